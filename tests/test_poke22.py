"""Pokes on LLaDA2.2 runs (the Levenshtein rule): write, mask, delete and insert between two forwards.

Hand-worked moves (`Poked.apply`/`undo`, the rule's bookkeeping through a poke, `llada.rule.poked_book`);
a poked run equal to its trace replayed, both ways and after JSON; the cache on and off identical on a tiny
2.2 model and on assets/model22; the refusals (moves on a 2.1 run, a written DELETE/SPLIT id); a 2.2 poke
through /generate (`ui.playground.api.generate_api`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llada.decode import BatchDecoder, generate
from llada.records import read_poke
from llada.rule import poked_book, start_block
from llada.trace import Poke, Poked, Trace
from model22 import EOS, MASK, SMALL, small_model

PROMPT = [11, 12, 13]  # 3 tokens: the first block (of 8) holds the prompt's tail, generated from position 3
a, b, c, d, M = 21, 22, 23, 24, 90
MODEL22 = Path(__file__).resolve().parents[1] / "assets" / "model22"


@pytest.fixture(scope="module")
def model():
    return small_model()


# ---- the moves, by hand ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, after, old, moved_to", [
    ("delete", [a, c, d, M], b, [0, -1, 1, 2]),  # b removed, the gap closes, a new mask pads the end
    ("insert", [a, M, b, c], d, [0, 2, 3, -1]),  # a mask opens before b, d leaves the block
    ("write", [a, M, c, d], b, None)])
def test_a_poke_moves_its_block_as_the_rule_does(kind, after, old, moved_to):
    poked = Poked(5, M, old, kind)  # in a view whose block [4, 8) holds a, b, c, d: the poke at b
    seq = [0, 0, 0, 7, a, b, c, d, 8]
    assert poked.replaced(seq, 4) == old
    poked.apply(seq, 4)
    assert seq == [0, 0, 0, 7, *after, 8]  # only the block moves: 7 and 8 stay
    poked.undo(seq, 4)
    assert seq == [0, 0, 0, 7, a, b, c, d, 8]
    if moved_to:
        assert poked.moved_to((4, 8)) == [4 + t if t >= 0 else -1 for t in moved_to]
    assert poked.to_list() == [5, M, old] + ([] if kind == "write" else [kind])


def test_the_book_through_a_poke_keeps_bits_with_their_tokens_and_opens_new_masks():
    tokens = torch.tensor([5, M, M, M])  # the prompt's last token, then three original masks
    book = start_block(tokens, torch.tensor([True, False, False, False]), M)
    book = replace(book, step=3, post=1, original=torch.tensor([False, True, False, True]))
    moved = poked_book(book, [0, -1, 1, 2], [3])  # a delete at 1: 2 -> 1, 3 -> 2, a new mask at 3
    assert moved.original.tolist() == [False, False, True, False]
    assert (moved.step, moved.post, moved.entry_masks, moved.seen) == (3, 1, book.entry_masks, book.seen)
    inserted = poked_book(book, [0, 2, 3, -1], [1])  # an insert at 1: the opened mask is new
    assert inserted.original.tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match="moved_to"):
        poked_book(book, [0, 1], [])


def test_delete_and_insert_read_from_text_and_objects():
    token_of = {"mask": M, "x": 5}.__getitem__
    assert read_poke("3:5:delete", token_of) == Poke(3, 5, M, "delete")
    assert read_poke({"step": 3, "pos": 5, "token": "insert"}, token_of) == Poke(3, 5, M, "insert")
    assert read_poke("3:5:x", token_of) == Poke(3, 5, 5)


# ---- runs ----------------------------------------------------------------------------------------------

def _cfg(**kw):
    return replace(SMALL, **kw)


def _decode_view(trace: Trace) -> list:
    return [(r.step, r.block, r.block_step, [c[:3] for c in r.changes], r.inserts, r.deletes, r.moved_to, r.pokes,
             r.guesses) for r in trace.records if r.kind == "decode"]


def _replayed(model, cfg, pokes) -> Trace:
    """The run, checking after every record that the engine's text is the trace's (pokes and moves included)."""
    batch = BatchDecoder(model, MASK, EOS, max_batch=1)
    batch.add(PROMPT, cfg, pokes=pokes)
    run = batch.waiting[0].run
    trace, states = Trace(PROMPT, cfg, MASK, EOS), {}
    for _, record in batch:
        trace.add(record)
        assert run.seq.tolist() == trace.tokens, record.step
        states[trace.steps] = list(trace.tokens)
    back = Trace.from_dict(json.loads(json.dumps(trace.to_dict())))
    assert back.pokes == trace.pokes and back.tokens == trace.tokens
    for step in (trace.steps, 0, 3, 1, trace.steps, 2, 4):  # replay both ways, after the JSON round trip
        assert back.tokens_at(step) == states.get(step, PROMPT + [MASK] * (trace.length - 3)), step
    return trace


KINDS = {"write": Poke(2, 1, 5), "mask": Poke(2, 1, MASK), "delete": Poke(2, 2, MASK, "delete"),
         "insert": Poke(2, 2, MASK, "insert")}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_moves_the_text_by_hand_and_the_run_is_its_trace(model, kind):
    plain, poked = generate(model, PROMPT, SMALL, MASK, EOS), _replayed(model, SMALL, [KINDS[kind]])
    assert _decode_view(poked)[:1] == _decode_view(plain)[:1]  # before the poke: the run it would have been
    before, after = plain.tokens_at(2), poked.tokens_at(2)  # the same step 2, then the poke on top
    at, blk = 3 + KINDS[kind].pos, slice(0, 8)
    want = list(before)
    Poked(at, KINDS[kind].token, 0, KINDS[kind].kind).apply(want, 8)
    assert after[blk] == want[blk] and after[8:] == before[8:]
    p = poked.step_record(2).pokes[0]
    assert (p.pos, p.kind, p.old) == (at, KINDS[kind].kind, before[7] if kind == "insert" else before[at])
    assert poked.poke_list()[0].get("kind", "write") == KINDS[kind].kind
    assert _decode_view(poked) == _decode_view(_replayed(model, SMALL, [KINDS[kind]]))  # the same pokes: same run


def test_a_poke_in_the_active_block_keeps_its_book_and_opens_a_new_mask(model):
    batch = BatchDecoder(model, MASK, EOS, max_batch=1)
    batch.add(PROMPT, SMALL, pokes=[Poke(1, 4, MASK, "insert")])
    run = batch.waiting[0].run
    for _, record in batch:
        if record.pokes:
            assert record.block == 0 and run.book.step == 1  # the step the poke followed: no step of its own
            assert not run.book.original[3 + 4] and run.seq[7] == MASK  # the opened mask is a new one
            break
    else:
        pytest.fail("no record carried the poke")


@pytest.mark.parametrize("mbe", [False, True], ids=["no-mbe", "mbe"])
def test_cache_on_and_off_agree_on_every_kind_and_a_reopened_block(model, mbe):
    plain = generate(model, PROMPT, _cfg(mbe=mbe), MASK, EOS)
    later = next(r.step for r in plain.records if r.kind == "decode" and r.block == 2)  # block 0 is finished
    pokes = [Poke(2, 1, 5), Poke(3, 2, MASK, "delete"), Poke(later, 1, MASK, "insert"),
             Poke(plain.steps + 5, 6, MASK, "delete")]  # the last after the run's end: re-opens its block
    cached, uncached = (_replayed(model, _cfg(mbe=mbe, use_cache=on), pokes) for on in (True, False))
    assert _decode_view(cached) == _decode_view(uncached) and cached.tokens == uncached.tokens
    after = [r for r in cached.records if r.kind == "decode" and r.step > later]
    assert after[0].block == 0  # the insert left a mask in a finished block: the loop went back to it
    assert MASK not in cached.output_ids and len(cached.pokes) == 4


@pytest.mark.skipif(not (MODEL22 / "config.json").exists(), reason="assets/model22 is not in this checkout")
def test_cache_on_and_off_agree_on_the_shipped_model22():
    from llada.pipeline import Pipeline

    pipe = Pipeline.load(MODEL22)
    ids = pipe.encode("def inc(ixturen):")
    cfg = pipe.config("S", gen_length=16)
    pokes = [Poke(2, 1, pipe.mask_id, "delete"), Poke(3, 0, pipe.mask_id, "insert"), Poke(4, 2, pipe.mask_id)]
    on, off = (pipe.generate(ids, replace(cfg, use_cache=c), pokes=pokes) for c in (True, False))
    assert _decode_view(on) == _decode_view(off) and on.output_ids == off.output_ids
    assert [p.kind for _, p in on.pokes] == ["delete", "insert", "write"]


# ---- refusals --------------------------------------------------------------------------------------------

def test_moves_on_a_joint_run_and_written_delete_split_ids_are_refused(model, ref_model):
    with pytest.raises(ValueError, match="only on a run of LLaDA2.2's rule"):
        generate(ref_model, [5, 6, 7, 8], replace(SMALL, block_length=4), 258, 257, pokes=[Poke(1, 0, 258, "delete")])
    delete, split = model.config.delete_token_id, model.config.split_token_id
    for token, move in ((delete, "'delete'"), (split, "'insert'")):
        with pytest.raises(ValueError, match=f"poke {move} instead"):
            generate(model, PROMPT, SMALL, MASK, EOS, pokes=[Poke(1, 0, token)])
    for bad, message in ((Poke(1, 0, 5, "delete"), "must be the mask id"), (Poke(1, 0, MASK, "swap"), "kind")):
        with pytest.raises(ValueError, match=message):
            generate(model, PROMPT, SMALL, MASK, EOS, pokes=[bad])


def test_the_cli_refuses_a_move_on_a_2_1_run_with_one_error_line(capsys, fixture_dir):
    from llada.__main__ import main

    code = main(["generate", "--model", str(fixture_dir), "--mask-id", "258", "--eos-id", "257", "--prompt-ids",
                 "5,6,7,8", "--gen-length", "8", "--block-length", "4", "--poke", "3:5:delete"])
    out = capsys.readouterr()
    errors = [line for line in out.err.splitlines() if line.startswith("error:")]
    assert code == 2 and out.out == "" and len(errors) == 1 and "LLaDA2.2" in errors[0], out.err


@pytest.mark.skipif(not (MODEL22 / "config.json").exists(), reason="assets/model22 is not in this checkout")
def test_a_2_2_poke_through_generate_api():
    from ui.models import Models
    from ui.playground.api import generate_api

    models = Models([str(MODEL22)])
    pokes = ["2:1:delete", {"step": 3, "pos": 0, "token": "insert"}]
    *_, (text, stats, trace) = generate_api(models, "def inc(ixturen):", "S", None, None, False, None, 16, None, pokes)
    pipe = models.get(None)
    alone = pipe.generate(pipe.encode("def inc(ixturen):"), trace.settings,
                          pokes=[Poke(2, 1, pipe.mask_id, "delete"), Poke(3, 0, pipe.mask_id, "insert")])
    assert stats["pokes"] == alone.poke_list() and [p["kind"] for p in stats["pokes"]] == ["delete", "insert"]
    assert trace.output_ids == alone.output_ids


# ---- the playground ----------------------------------------------------------------------------------------

@pytest.mark.skipif(not (MODEL22 / "config.json").exists(), reason="assets/model22 is not in this checkout")
@pytest.mark.parametrize("how, kind", [("delete it", "delete"), ("insert a mask before it", "insert")])
def test_the_poke_box_deletes_and_inserts_on_a_2_2_run_in_the_poke_colour(how, kind):
    from test_canvas import assert_patches_rebuild_every_step
    from ui.models import Models
    from ui.playground.poke import poke_ui
    from ui.playground.run import generate_ui
    from ui.render import canvas, tables

    models = Models([str(MODEL22)])
    page = {"mode": "S", "tau_mask": 0.5, "edit": True, "tau_edit": 0.0, "mbe": False, "mbe_window": 1,
            "block_length": 32, "gen_length": 16, "max_post_steps": 16, "temperature": 0.0, "seed": 0, "ghost": False}
    finished = list(generate_ui(models, prompt="def inc(ixturen):", **page))[-1].trace
    P = finished.prompt_length
    frames = list(poke_ui(models, finished, None, 2, P + 1, how, "", False))
    trace = frames[-1].trace
    assert frames[-1].error == "" and [p.kind for _, p in trace.pokes] == [kind]
    page2 = canvas.render(trace, 2)
    if kind == "delete":  # the removed token struck out in the poke's colour, before the cell now at its place
        assert f'class="gone" data-state="poke" data-was="{P + 1}"' in page2
    else:  # the opened mask is a poke cell
        assert f'data-pos="{P + 1}" data-block="{(P + 1) // 32}" data-state="poke"' in page2
        assert "mask inserted by a poke after step 2" in page2
    log = tables.edit_log(trace)
    assert log[log.kind == f"poke {kind}"][["step", "position"]].values.tolist() == [[2, P + 1]]
    assert_patches_rebuild_every_step(trace)
