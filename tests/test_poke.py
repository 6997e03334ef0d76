"""Pokes: the text changed between two forwards, on the reference fixture (llada.loop, llada.trace).

A poked run's state after every record is the trace's replay of its records (pokes included), in both
directions and after a JSON round trip; the KV cache on and off give the same run with a poke in a finished
block (with and without MBE); each row of a batch keeps its own pokes; every bad poke is refused."""

import json

import pytest

from llada.config import DecodeConfig
from llada.decode import BatchDecoder, generate
from llada.trace import Poke, Poked, Trace

MASK, EOS = 258, 257  # the fixture's ids (tests/fixtures/llada2_tiny_ref/golden.json)
PROMPT = [5, 6, 7, 8]  # one whole block of 4: generated blocks start at position 4


def _cfg(**kw) -> DecodeConfig:
    base = dict(gen_length=16, block_length=4, threshold=0.0, editing_threshold=0.0, max_post_steps=2)
    return DecodeConfig(**(base | kw))


def _run(model, cfg, pokes=()) -> Trace:
    return generate(model, PROMPT, cfg, MASK, EOS, pokes=pokes)


def _decode_view(trace: Trace) -> list:
    """What each decode record wrote and guessed (cache forwards differ between cache on and off, and so do the
    last bits of a confidence: the cache changes the order of the sums)."""
    return [(r.step, r.block, r.block_step, r.phase, [c[:3] for c in r.changes], r.pokes, r.guesses)
            for r in trace.records if r.kind == "decode"]


def _step_in_block(trace: Trace, block: int) -> int:
    """The first decode step whose active block is `block`."""
    return next(r.step for r in trace.records if r.kind == "decode" and r.block == block)


def test_a_poked_run_is_its_trace_replayed(ref_model):
    cfg = _cfg()
    pokes = [Poke(2, 0, MASK), Poke(2, 1, 9), Poke(5, 3, 100), Poke(10_000, 6, 7)]  # the last: after the end
    batch = BatchDecoder(ref_model, MASK, EOS, max_batch=1)
    batch.add(PROMPT, cfg, pokes=pokes)
    run = batch.waiting[0].run
    trace = Trace(PROMPT, cfg, MASK, EOS)
    states = {}
    for _, record in batch:
        trace.add(record)
        assert run.seq.tolist() == trace.tokens, record.step  # the engine's text is the trace's, pokes included
        states[trace.steps] = list(trace.tokens)
    assert [(s, p.pos, p.token) for s, p in trace.pokes][:3] == [(2, 4, MASK), (2, 5, 9), (5, 7, 100)]
    assert trace.pokes[3][1][:2] == (10, 7) and trace.pokes[3][0] < trace.steps  # decoding went on after it
    assert all(p.old == back_one(trace, s, p) for s, p in trace.pokes)  # old: the token the step left there
    assert trace.step_record(2).changes and trace.counts["pokes"] == 4
    back = Trace.from_dict(json.loads(json.dumps(trace.to_dict())))
    assert back.to_dict()["records"] == trace.to_dict()["records"] and back.pokes == trace.pokes
    assert back.tokens == trace.tokens
    for step in (trace.steps, 1, 5, 2, 0, 4, 3, 2, trace.steps, 1):  # replay in both directions
        assert back.tokens_at(step) == states.get(step, PROMPT + [MASK] * 16), step
    assert "pokes" not in _run(ref_model, cfg).to_dict()["records"][-1]  # a run without pokes writes none


def back_one(trace: Trace, step: int, poke: Poked) -> int:
    """The token at the poke's position after its step's changes, before its pokes."""
    view = trace.tokens_at(step - 1)
    for c in trace.step_record(step).changes:
        view[c.pos] = c.token
    return view[poke.pos]


def test_the_same_pokes_give_the_same_run_and_a_poke_changes_it(ref_model):
    cfg, pokes = _cfg(), [Poke(3, 2, 17)]
    a, b, plain = _run(ref_model, cfg, pokes), _run(ref_model, cfg, pokes), _run(ref_model, cfg)
    assert _decode_view(a) == _decode_view(b)
    assert _decode_view(a) != _decode_view(plain)
    assert _decode_view(a)[:2] == _decode_view(plain)[:2]  # before the poke: the run it would have been
    assert a.step_record(3).changes == plain.step_record(3).changes and a.step_record(3).pokes


@pytest.mark.parametrize("mbe", [False, True], ids=["no-mbe", "mbe"])
def test_cache_on_and_off_agree_with_a_poke_in_a_finished_block(ref_model, mbe):
    plain = _run(ref_model, _cfg(mbe=mbe))
    step = _step_in_block(plain, 3) + 1  # the active block is the third generated one: the first is finished
    pokes = [Poke(step, 0, 42), Poke(step, 1, MASK)]
    cached, uncached = (_run(ref_model, _cfg(mbe=mbe, use_cache=c), pokes) for c in (True, False))
    static = generate(ref_model, PROMPT, _cfg(mbe=mbe), MASK, EOS, forward="static", pokes=pokes)  # fixed shapes
    assert _decode_view(cached) == _decode_view(uncached) == _decode_view(static)
    assert cached.output_ids == uncached.output_ids and cached.tokens == uncached.tokens
    after = cached.records.index(cached.step_record(step)) + 1
    refresh = cached.records[after]  # the poked block's keys/values recomputed before the next forward
    assert (refresh.kind, refresh.phase, refresh.window[0]) == ("cache", "refresh", 4)
    if not mbe:  # a finished block outside the window is never edited again: the poke stays
        assert cached.tokens[4] == 42


def test_pokes_in_a_batch_stay_in_their_row(ref_model):
    cfg = _cfg()
    rows = [([Poke(2, 0, 42)], PROMPT), ([], [9, 10, 11]), ([Poke(4, 5, MASK)], PROMPT)]
    batch = BatchDecoder(ref_model, MASK, EOS)
    traces = []
    for pokes, prompt in rows:
        batch.add(prompt, cfg, pokes=pokes)
        traces.append(Trace(prompt, cfg, MASK, EOS))
    for row, record in batch:
        traces[row].add(record)
    for (pokes, prompt), trace in zip(rows, traces):
        alone = generate(ref_model, prompt, cfg, MASK, EOS, pokes=pokes)
        assert _decode_view(trace) == _decode_view(alone)
        assert [p for _, p in trace.pokes] == [p for _, p in alone.pokes] and len(trace.pokes) == len(pokes)


def test_a_poked_trace_renders_and_narrates_at_every_step(ref_model):
    from ui.render import canvas, narrate

    trace = _run(ref_model, _cfg(), [Poke(2, 0, 42), Poke(3, 1, 43)]).finish()
    trace.name_tokens(lambda ids: [f"t{t}" for t in ids])
    pages = [canvas.render(trace, step) + narrate.narrate(trace, step) for step in range(trace.steps + 1)]
    assert any("poked after step" in page for page in pages)


@pytest.mark.parametrize("mbe", [False, True], ids=["no-mbe", "mbe"])
def test_a_poke_after_the_last_forward_reopens_the_block_it_touches(ref_model, mbe):
    plain = _run(ref_model, _cfg(mbe=mbe))
    last, touched = plain.steps, plain.step_record(plain.steps).block - 1  # the block before the last decoded
    pokes = [Poke(10_000, touched * 4 - 4 + 1, MASK), Poke(10_001, touched * 4 - 4 + 2, 42)]
    runs = [_run(ref_model, _cfg(mbe=mbe, use_cache=c), pokes) for c in (True, False)]
    runs.append(generate(ref_model, PROMPT, _cfg(mbe=mbe), MASK, EOS, forward="static", pokes=pokes))
    poked = runs[0]
    assert _decode_view(runs[0]) == _decode_view(runs[1]) == _decode_view(runs[2])
    assert _decode_view(poked)[:last - 1] == _decode_view(plain)[:last - 1]  # the run up to its end, unchanged
    assert [(p.pos, p.token) for p in poked.step_record(last).pokes] == [(4 * touched + 1, MASK), (4 * touched + 2, 42)]
    again = [r.block for r in poked.records[poked.steps_index[last]:] if r.kind == "decode"]
    assert again and again[0] == touched and again == sorted(again)  # re-opened there, then the blocks after it
    assert MASK not in poked.output_ids and poked.tokens == Trace.from_dict(poked.to_dict()).tokens


@pytest.mark.parametrize("poke, message", [
    (Poke(0, 0, 1), "step 0 is below 1"), (Poke(1, -1, 1), "outside the generated region"),
    (Poke(1, 16, 1), "outside the generated region"), (Poke(1, 0, 259), "outside the vocabulary")])
def test_bad_pokes_are_refused_before_any_forward(ref_model, poke, message):
    with pytest.raises(ValueError, match=message):
        _run(ref_model, _cfg(), [poke])


def _cli(capsys, *args):
    from llada.__main__ import main

    code = main(["generate", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_pokes_and_lists_them(capsys, fixture_dir):
    base = ["--model", fixture_dir, "--mask-id", MASK, "--eos-id", EOS, "--prompt-ids", "5,6,7,8",
            "--gen-length", 16, "--block-length", 4, "--threshold", 0.0, "--editing-threshold", 0.0,
            "--max-post-steps", 2, "--json"]
    code, out, err = _cli(capsys, *base, "--poke", "2:0:mask", "--poke", "3:1:#9")
    assert code == 0, err
    got = json.loads(out)
    assert [(p["step"], p["pos"], p["new"]) for p in got["pokes"]] == [(2, 0, MASK), (3, 1, 9)]
    assert got["output_ids"] == _run_ids(fixture_dir, [Poke(2, 0, MASK), Poke(3, 1, 9)])
    code, out, _ = _cli(capsys, *base)
    assert code == 0 and "pokes" not in json.loads(out)  # without --poke: the object a batch row gets


def _run_ids(fixture_dir, pokes):
    from llada.weights.checkpoint import load_model

    return _run(load_model(fixture_dir), _cfg(), pokes).output_ids


@pytest.mark.parametrize("poke, message", [
    ("0:0:mask", "below 1"), ("1:16:mask", "outside the generated region"), ("1:-1:mask", "outside the generated"),
    ("1:0:#99999", "unknown"), ("1:0:#x", "#ID"), ("1:0:hello world, twice over", "not one"), ("1:0", "STEP:POS"),
    ("a:0:mask", "whole numbers")])
def test_cli_refuses_every_bad_poke_with_one_error_line(capsys, tiny_model_dir, poke, message):
    code, out, err = _cli(capsys, "--model", tiny_model_dir, "--prompt", "def add(", "--gen-length", 8,
                          "--block-length", 4, "--poke", poke)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and out == "" and len(errors) == 1 and message in errors[0], err


def test_cli_batch_pokes_stay_in_their_row(capsys, tmp_path, fixture_dir, ref_model):
    path = tmp_path / "prompts.txt"
    lines = ['{"prompt": [5, 6, 7, 8], "pokes": ["2:0:mask", "3:1:#9"]}', "5,6,7,8", '{"prompt": [9, 10, 11]}',
             '{"prompt": [9, 10, 11], "pokes": ["4:5:#42"]}']
    path.write_text("\n".join(lines) + "\n")
    code, out, err = _cli(capsys, "--model", fixture_dir, "--mask-id", MASK, "--eos-id", EOS, "--prompts-file", path,
                          "--batch-size", 3, "--gen-length", 16, "--block-length", 4, "--threshold", 0.0,
                          "--editing-threshold", 0.0, "--max-post-steps", 2, "--json")
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    rows = [([5, 6, 7, 8], [Poke(2, 0, MASK), Poke(3, 1, 9)]), ([5, 6, 7, 8], []), ([9, 10, 11], []),
            ([9, 10, 11], [Poke(4, 5, 42)])]
    for result, (prompt, pokes) in zip(got, rows):  # each row is the run its prompt and pokes get alone
        alone = generate(ref_model, prompt, _cfg(), MASK, EOS, pokes=pokes)
        assert result["output_ids"] == alone.output_ids
        assert result.get("pokes", []) == alone.poke_list() and len(alone.poke_list()) == len(pokes)
    assert "pokes" not in got[1] and "pokes" not in got[2]  # a row without pokes: the object it always was
    assert got[0]["output_ids"] != got[1]["output_ids"]  # the pokes changed their row's run


@pytest.mark.parametrize("line, message", [
    ('{"prompt": [5, 6, 7], "pokes": ["0:0:mask"]}', "prompt 0: poke step 0 is below 1"),
    ('{"prompt": [5, 6, 7], "pokes": ["1:0"]}', "line 1: poke '1:0': expected STEP:POS:TOKEN"),
    ('{"prompt": [5, 6, 7], "pokes": "1:0:mask"}', "must be a list"),
    ('{"prompt": [5, 6, 7], "poke": []}', '"pokes" optional'), ('{"prompt": "x"', "not a valid JSON object"),
    ('{"prompt": true}', "list of token ids")])
def test_cli_batch_refuses_a_bad_rows_poke(capsys, tmp_path, fixture_dir, line, message):
    path = tmp_path / "prompts.txt"
    path.write_text(line + "\n")
    code, out, err = _cli(capsys, "--model", fixture_dir, "--mask-id", MASK, "--eos-id", EOS, "--prompts-file", path,
                          "--gen-length", 16, "--block-length", 4)
    errors = [text for text in err.splitlines() if text.startswith("error:")]
    assert code == 2 and out == "" and len(errors) == 1 and message in errors[0], err
