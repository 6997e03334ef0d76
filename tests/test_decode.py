"""The draft-and-edit loop against the reference traces, its records, the KV cache and MBE."""

import threading

import pytest
import torch

from llada.weights.checkpoint import load_model
from llada.config import DecodeConfig
from llada.decode import decode, generate
from llada.loop import NonFiniteLogits
from llada.trace import Trace
from golden_cases import case_config


def _run(model, golden, case, **kw) -> Trace:
    return generate(model, case["prompt_ids"], case_config(case, **kw), golden["mask_id"], golden["eos_id"])


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_every_fixture_case_is_reproduced(ref_model, golden, use_cache):
    for case in golden["generate"]:
        r = _run(ref_model, golden, case, use_cache=use_cache)
        assert r.output_ids == case["output_ids"], case["name"]
        assert r.num_decode_forwards == case["num_forwards"], case["name"]
        assert r.block_states_before_each_forward() == case["block_states_before_each_forward"], case["name"]


def _expected_cache_forwards(trace: Trace) -> int:
    """One prefill when the prompt fills whole blocks before the first decoded one, plus one refresh for
    every block (but the last decoded) whose last forward still changed tokens (it ended at max_post_steps)."""
    prefill = int(trace.prompt_length >= trace.block_length)
    last = {}
    for k in range(1, trace.steps + 1):
        last[trace.step_record(k).block] = trace.step_record(k)
    finished = [r for b, r in sorted(last.items())][:-1]
    return prefill + sum(1 for r in finished if r.changes)


def test_cache_forwards_are_exactly_the_needed_ones(ref_model, golden):
    total = 0
    for case in golden["generate"]:
        plain = _run(ref_model, golden, case, use_cache=False)
        cached = _run(ref_model, golden, case)
        assert plain.num_cache_forwards == 0
        assert cached.num_cache_forwards == _expected_cache_forwards(plain), case["name"]
        assert [r.kind for r in cached.records].count("cache") == cached.num_cache_forwards
        total += cached.num_cache_forwards
    assert total == 44  # across the 15 golden cases; skipping the commit of a verified block gives 53


def test_tpf_counts_cache_forwards(ref_model, golden):
    case = golden["generate"][0]  # prompt 19, block 8: two prompt-only blocks to prefill first
    r = _run(ref_model, golden, case)
    assert r.records[0].kind == "cache" and r.records[0].phase == "prefill" and r.records[0].window == (0, 16)
    assert r.forwards == r.num_decode_forwards + r.num_cache_forwards == len(r.records)
    assert r.tpf * r.forwards == pytest.approx(len(case["output_ids"]))  # tokens of the reference output


def test_records_hold_only_changes_that_replay_the_run(ref_model, golden):
    case = golden["generate"][2]
    r = _run(ref_model, golden, case, mbe=True, mbe_window=2)
    x = list(case["prompt_ids"]) + [golden["mask_id"]] * (r.length - len(case["prompt_ids"]))
    for record in r.records:
        for c in record.drafts:
            assert x[c.pos] == c.old == golden["mask_id"] and c.p > 0
        for c in record.edits + record.mbe_edits:
            assert x[c.pos] == c.old != golden["mask_id"] and c.pos >= len(case["prompt_ids"])
        for c in record.changes:
            x[c.pos] = c.token
    assert x == r.tokens and r.output_ids == r.tokens_at(r.steps)[len(case["prompt_ids"]):][:len(r.output_ids)]
    decodes = [x for x in r.records if x.kind == "decode"]
    assert [x.step for x in decodes] == list(range(1, len(decodes) + 1))
    assert r.drafts == sum(len(x.drafts) for x in decodes)


@pytest.mark.parametrize("window", [1, 2])
def test_mbe_window_reaches_exactly_k_finished_blocks(ref_model, golden, window):
    case = golden["generate"][0]  # S mode: tau_edit 0 edits every changed token
    r = _run(ref_model, golden, case, mbe=True, mbe_window=window)
    B, first = case["block_length"], len(case["prompt_ids"]) // case["block_length"]
    assert r.mbe_edits > 0
    for k in range(1, r.steps + 1):
        x = r.step_record(k)
        assert x.window == (max(first, x.block - window) * B, (x.block + 1) * B)
        assert len(x.guesses) == len(x.confidence) == x.window[1] - x.window[0]
        assert all(x.window[0] <= c.pos < x.active[0] for c in x.mbe_edits)
        assert all(x.active[0] <= c.pos < x.active[1] for c in x.edits + x.drafts)
    assert _run(ref_model, golden, case).mbe_edits == 0


@pytest.mark.parametrize("case_index", [0, 7, 12])
def test_mbe_with_and_without_cache_agree(ref_model, golden, case_index):
    case = golden["generate"][case_index]
    on, off = (_run(ref_model, golden, case, mbe=True, mbe_window=2, use_cache=c) for c in (True, False))
    assert on.output_ids == off.output_ids
    assert on.block_states_before_each_forward() == off.block_states_before_each_forward()


def test_editing_off_never_edits_and_zero_edits_everything(ref_model, golden):
    case = golden["generate"][0]
    assert _run(ref_model, golden, case).edits > 0  # 0.0 means "replace every changed token", not "off"
    off = generate(ref_model, case["prompt_ids"], case_config(case).with_(editing_threshold=None), golden["mask_id"],
                   golden["eos_id"])
    assert off.edits == off.mbe_edits == 0


def test_sampling_is_seeded(ref_model, golden):
    case = golden["generate"][3]
    greedy = _run(ref_model, golden, case)
    a, b = (_run(ref_model, golden, case, temperature=1.0, top_p=0.9, seed=5) for _ in range(2))
    assert a.output_ids == b.output_ids and a.output_ids != greedy.output_ids


def test_bad_prompt_is_refused_before_the_generator_exists(ref_model, golden):
    m, e = golden["mask_id"], golden["eos_id"]
    with pytest.raises(ValueError, match="empty"):
        decode(ref_model, [], DecodeConfig(), m, e)  # no next(): the call itself raises
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode(ref_model, [5, 9999], DecodeConfig(), m, e)
    with pytest.raises(ValueError, match="needs 576 positions; the model allows 512"):
        decode(ref_model, [5] * 500, DecodeConfig(gen_length=64), m, e)
    with pytest.raises(ValueError, match="mask id 300"):
        decode(ref_model, [5], DecodeConfig(), 300, e)


def test_eos_early_stop_saves_forwards(ref_model, golden):
    case = golden["generate"][6]  # p24 with eos_early_stop: the reference stops after 10 forwards
    r = _run(ref_model, golden, case)
    assert r.output_ids[-1] == golden["eos_id"] and r.num_decode_forwards == 10
    assert r.tokens[-8:] == [golden["mask_id"]] * 8  # the last block was never decoded


def test_a_run_can_be_stepped_from_several_threads(ref_model, golden):
    case = golden["generate"][0]
    expect = _run(ref_model, golden, case)
    stream = decode(ref_model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    trace = Trace(case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    errors = []

    def pull():  # one record per thread, like a Gradio generator stepped by its worker threads
        try:
            record = next(stream, None)
            if record is not None:
                trace.add(record)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    for _ in range(len(expect.records) + 1):
        t = threading.Thread(target=pull)
        t.start()
        t.join()
    assert errors == [] and trace.output_ids == expect.output_ids


def test_every_step_runs_in_inference_mode_whichever_thread_resumes_it(ref_model, golden, monkeypatch):
    """Inference mode is a per-thread flag: a run started on one thread and resumed on fresh ones (as Gradio
    steps its generators) still runs all of its work in it, the loop's own code between two forwards included
    (the EOS check after each finished block), and never records autograd history."""
    from llada import loop

    case = golden["generate"][0]
    seen, eos_stop, forward_rows = [], loop._eos_stop, ref_model.forward_rows

    def probe(where):
        mode, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
        seen.append((where, threading.current_thread().name, mode, grad))

    monkeypatch.setattr(loop, "_eos_stop", lambda run, block: probe("loop") or eos_stop(run, block))
    monkeypatch.setattr(ref_model, "forward_rows", lambda rows: probe("forward") or forward_rows(rows))
    stream = decode(ref_model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    records = [next(stream)]  # started here, then every other record pulled on a thread of its own
    while records[-1] is not None:
        t = threading.Thread(target=lambda: records.append(next(stream, None)))
        t.start()
        t.join()
    assert not torch.is_inference_mode_enabled()  # left on this thread once its step returned
    assert {where for where, *_ in seen} == {"loop", "forward"}
    assert len({thread for where, thread, *_ in seen if where == "loop"}) > 1  # resumed on other threads (names
    # are unique, unlike idents a joined thread hands on)
    assert [(where, mode, grad) for where, _, mode, grad in seen if not mode or grad] == []
    trace = Trace(case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    for record in records[:-1]:
        trace.add(record)
    assert trace.output_ids == case["output_ids"]


def test_two_runs_interleave_in_one_thread(ref_model, golden):
    a, b = golden["generate"][0], golden["generate"][5]
    streams = [decode(ref_model, c["prompt_ids"], case_config(c), golden["mask_id"], golden["eos_id"]) for c in (a, b)]
    traces = [Trace(c["prompt_ids"], case_config(c), golden["mask_id"], golden["eos_id"]) for c in (a, b)]
    live = [0, 1]
    while live:
        for i in list(live):
            record = next(streams[i], None)
            if record is None:
                live.remove(i)
            else:
                traces[i].add(record)
    assert [t.output_ids for t in traces] == [a["output_ids"], b["output_ids"]]


def test_non_finite_logits_stop_the_run(fixture_dir, golden):
    broken = load_model(fixture_dir)
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    case = golden["generate"][0]
    with pytest.raises(NonFiniteLogits, match="non-finite logits at step 1"):
        generate(broken, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])

