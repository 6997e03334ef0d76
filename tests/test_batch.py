"""Batched decoding: every row's trace is bit for bit the one it gets alone (float64 and float32), on the
reference fixture's golden cases; continuous batching, the API and errors. The embedded model's mixed batches
are in tests/test_batch_embedded.py (minutes: a file of its own for parallel workers)."""

from pathlib import Path

import pytest
import torch

from llada.decode import BatchDecoder, decode_batch, generate_batch
from llada.weights.checkpoint import load_model
from llada.decode import generate
from llada.model import RowInput
from llada.row_exact import tiled_linear, tiled_matmul
from llada.pipeline import Pipeline
from golden_cases import case_config

EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / "model"


def _key(trace):
    """Everything a trace holds per forward: kinds, windows, every change with its confidence, the guesses."""
    return [(r.kind, r.phase, r.step, r.block, r.block_step, r.window, r.active, r.drafts, r.edits, r.mbe_edits,
             r.guesses, r.confidence) for r in trace.records]


def _assert_batch_equals_alone(model, prompts, cfgs, mask_id, eos_id, max_batch=None):
    alone = [generate(model, p, c, mask_id, eos_id) for p, c in zip(prompts, cfgs)]
    batch = generate_batch(model, prompts, cfgs, mask_id, eos_id, max_batch=max_batch)
    for i, (a, b) in enumerate(zip(alone, batch)):
        assert _key(b) == _key(a), f"row {i}"
        assert b.output_ids == a.output_ids and b.tokens == a.tokens, f"row {i}"
    return alone


@pytest.fixture(scope="module")
def ref64(fixture_dir):
    return load_model(fixture_dir).to(torch.float64)


@pytest.mark.parametrize("extra", [{}, {"mbe": True, "mbe_window": 2}, {"use_cache": False}],
                         ids=["cache", "mbe", "no-cache"])
def test_golden_cases_in_one_batch_are_bit_exact_in_float64(ref64, golden, extra):
    cases = golden["generate"]
    alone = _assert_batch_equals_alone(ref64, [c["prompt_ids"] for c in cases],
                                       [case_config(c, **extra) for c in cases], golden["mask_id"], golden["eos_id"])
    if not extra:  # and they are the reference's traces
        for case, trace in zip(cases, alone):
            assert trace.output_ids == case["output_ids"], case["name"]
            assert trace.block_states_before_each_forward() == case["block_states_before_each_forward"]


def test_golden_cases_with_continuous_batching_in_float32(ref_model, golden):
    cases = golden["generate"]  # 3 rows at a time: rows join as others finish, mid-block for the others
    _assert_batch_equals_alone(ref_model, [c["prompt_ids"] for c in cases], [case_config(c) for c in cases],
                               golden["mask_id"], golden["eos_id"], max_batch=3)


@pytest.fixture(scope="module")
def embedded():
    return Pipeline.load(EMBEDDED)


def test_forward_rows_gives_each_row_its_lone_logits_and_cache(ref_model):
    """Windows of different lengths and positions over their own caches: one call equals one call per row."""
    torch.manual_seed(0)
    V = ref_model.config.vocab_size
    specs = [(0, 24, 8), (16, 24, 16), (8, 16, 0), (0, 5, 3), (32, 40, 24)]  # (lo, hi, committed prefix)

    def rows():
        out = []
        gen = torch.Generator().manual_seed(1)
        for lo, hi, _ in specs:
            ids = torch.randint(0, V, (hi,), generator=gen)
            cache = ref_model.new_cache(48)
            with torch.inference_mode():
                if lo:
                    ref_model.forward_rows([RowInput(ids[:lo], 0, None, cache, False)])
                cache.commit(lo)
            out.append(RowInput(ids[lo:], lo, None, cache))
        return out

    with torch.inference_mode():
        alone_rows, together_rows = rows(), rows()
        alone = [ref_model.forward_rows([row])[0] for row in alone_rows]
        together = ref_model.forward_rows(together_rows)
    for a, b, x, y, (lo, hi, _) in zip(alone, together, alone_rows, together_rows, specs):
        assert torch.equal(a, b) and a.shape == (hi - lo, V)
        assert torch.equal(x.cache.k, y.cache.k) and torch.equal(x.cache.v, y.cache.v)
    assert torch.allclose(alone[0], ref_model(together_rows[0].ids[None])[0], atol=1e-4)  # the plain forward


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tiled_products_do_not_depend_on_the_other_rows(dtype):
    torch.manual_seed(0)
    w = torch.randn(96, 384, dtype=dtype)
    x = torch.randn(7, 384, dtype=dtype)
    alone = tiled_linear(x, w)
    for n in (1, 9, 16, 40, 200):
        assert torch.equal(tiled_linear(torch.cat([torch.randn(n, 384, dtype=dtype), x]), w)[n:], alone)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_padded_product_rounds_each_row_as_any_other_padded_product(dtype, threads):
    """The CPU path's premise (`llada.row_exact`): a row's result in a product padded to a multiple of 4
    rows is the same for any count of rows and at any place among them, on one thread or two."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        for k, o in ((99, 37), (192, 320), (96, 192)):  # odd sizes (an edge of every kernel), the model's own
            w_t = torch.randn(k, o, generator=gen, dtype=dtype)
            x = torch.randn(300, k, generator=gen, dtype=dtype)
            whole = tiled_matmul(x, w_t)
            for n in (*range(1, 20), *range(20, 290, 7)):
                for at in (0, 1, 2, 3, 5, 11):
                    assert torch.equal(tiled_matmul(x[at:at + n], w_t), whole[at:at + n]), (k, o, n, at)
    finally:
        torch.set_num_threads(before)


def test_rows_join_and_leave_between_rounds(ref_model, golden):
    cases = golden["generate"][:4]
    m, e = golden["mask_id"], golden["eos_id"]
    batch = BatchDecoder(ref_model, m, e, max_batch=2)
    rows = [batch.add(c["prompt_ids"], case_config(c)) for c in cases[:3]]
    first = batch.step()
    assert {row for row, _ in first} == {0, 1} and len(batch.active) == 2 and len(batch.waiting) == 1
    late = batch.add(cases[3]["prompt_ids"], case_config(cases[3]))  # joins while the others run
    batch.drop(rows[1])  # stopped: its slot goes to the next waiting row
    records = {i: [r for row, r in first if row == i] for i in range(4)}
    for row, record in batch:
        records[row].append(record)
        assert len(batch.active) <= 2
    assert batch.done[0] == 1 and sorted(batch.done) == [0, 1, 2, 3] and late == 3
    for i in (0, 2, 3):
        expect = generate(ref_model, cases[i]["prompt_ids"], case_config(cases[i]), m, e)
        assert [(r.kind, r.window, r.changes) for r in records[i]] == [(r.kind, r.window, r.changes)
                                                                      for r in expect.records]
    assert all(r.step <= 1 for r in records[1])  # dropped after its first round


def test_pipeline_batch_api(embedded):
    prompts = [embedded.encode(t) for t in ("def add(a, b):", "def fibonacci(n):")]
    cfg = embedded.config("Q", gen_length=32)
    traces = embedded.generate_batch(prompts, cfg, texts=["def add(a, b):", "def fibonacci(n):"], modes=["Q", "Q"])
    alone = [embedded.generate(p, cfg) for p in prompts]
    assert [t.summary() | {"tps": 0} for t in traces] == [t.summary() | {"tps": 0} for t in alone]
    assert [t.text for t in traces] == [t.text for t in alone] and traces[0].mode == "Q" and traces[1].model
    assert all(t.status == "done" for t in traces)
    stream = list(embedded.stream_batch(prompts, [cfg, embedded.config("S", gen_length=32)], max_batch=1))
    assert {row for row, _ in stream} == {0, 1} and [row for row, _ in stream] == sorted(row for row, _ in stream)


def test_bad_batches_are_refused_before_any_forward(ref_model, golden):
    m, e = golden["mask_id"], golden["eos_id"]
    good = golden["generate"][0]["prompt_ids"]
    cfg = case_config(golden["generate"][0])
    with pytest.raises(ValueError, match="prompt 2: prompt token id 99999 is outside the vocabulary"):
        decode_batch(ref_model, [good, good, [5, 99999]], cfg, m, e)
    with pytest.raises(ValueError, match="2 prompts but 3 settings"):
        decode_batch(ref_model, [good, good], [cfg] * 3, m, e)
    with pytest.raises(ValueError, match="non-empty list"):
        decode_batch(ref_model, [], cfg, m, e)
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        BatchDecoder(ref_model, m, e, max_batch=0)
    with pytest.raises(ValueError, match="decodes one run at a time"):
        BatchDecoder(ref_model, m, e, forward="static")
