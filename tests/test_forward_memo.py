"""The forward memo (`llada.forward_memo`): rows asked again are answered without the model, every trace
bit for bit its trace without a memo; only rows that read no cache and carry no mask are kept."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from llada.decode import BatchDecoder, generate
from llada.forward_memo import ForwardMemo
from llada.model import RowInput
from llada.pipeline import Pipeline
from golden_cases import case_config
from test_batch import _key


def _memo_batch(model, prompts, cfgs, mask_id, eos_id, memo, max_batch=3):
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=max_batch, memo=memo)
    rows = [batch.add(p, c) for p, c in zip(prompts, cfgs)]
    records = {row: [] for row in rows}
    for row, record in batch:
        records[row].append(record)
    return [records[row] for row in rows]


@pytest.mark.parametrize("extra", [{}, {"mbe": True, "mbe_window": 2}, {"use_cache": False}],
                         ids=["cache", "mbe", "no-cache"])
def test_each_golden_case_under_three_thresholds_decodes_as_without_a_memo(ref_model, golden, extra):
    cases = golden["generate"][10:]  # prompts of 5 tokens: every first window starts at 0
    jobs = [(c["prompt_ids"], replace(case_config(c, **extra), threshold=t)) for t in (0.5, 0.7, 0.9) for c in cases]
    memo = ForwardMemo()
    got = _memo_batch(ref_model, *zip(*jobs), golden["mask_id"], golden["eos_id"], memo)
    for (prompt, cfg), records in zip(jobs, got):
        alone = generate(ref_model, prompt, cfg, golden["mask_id"], golden["eos_id"])
        assert _key(alone) == _key(SimpleNamespace(records=records))
    if extra.get("use_cache", True):
        assert memo.hits > 0 and memo.misses > 0
    else:  # without a cache every row attends through a mask: none is kept
        assert memo.hits == 0 and not memo.kept


def test_rows_that_read_a_cache_or_carry_a_mask_are_not_kept(ref_model):
    ids = torch.arange(2, 10)
    cache = ref_model.new_cache(16)
    assert ForwardMemo.key(RowInput(ids, 0, None, cache)) is not None
    assert ForwardMemo.key(RowInput(ids, 8, None, cache)) is None
    assert ForwardMemo.key(RowInput(ids, 0, torch.ones(8, 8, dtype=torch.bool), None)) is None


def test_equal_rows_of_one_call_are_computed_once_and_fill_both_caches(ref_model, monkeypatch):
    seen = []
    real = ref_model.forward_rows
    monkeypatch.setattr(ref_model, "forward_rows", lambda rows: seen.append(len(rows)) or real(rows))
    ids = torch.arange(2, 10)
    rows = [RowInput(ids, 0, None, ref_model.new_cache(16)) for _ in range(2)]
    memo = ForwardMemo()
    with torch.inference_mode():
        a, b = memo.forward_rows(ref_model, rows)
        alone = RowInput(ids, 0, None, ref_model.new_cache(16))
        c = real([alone])[0]
        (d,) = memo.forward_rows(ref_model, [RowInput(ids, 0, None, ref_model.new_cache(16))])
    assert seen == [1] and memo.hits == 2 and memo.misses == 1
    assert torch.equal(a, c) and torch.equal(b, c) and torch.equal(d, c)
    for row in rows:
        assert torch.equal(row.cache.k[:, :, :, :8], alone.cache.k[:, :, :, :8])
        assert torch.equal(row.cache.v[:, :, :, :8], alone.cache.v[:, :, :, :8])


def test_the_memo_stays_under_its_bytes(ref_model):
    with torch.inference_mode():
        one = ForwardMemo()
        one.forward_rows(ref_model, [RowInput(torch.arange(2, 10), 0, None, ref_model.new_cache(16))])
        memo = ForwardMemo(max_bytes=2 * one.bytes)  # room for two rows
        rows = [RowInput(torch.arange(2, 10) + i, 0, None, ref_model.new_cache(16)) for i in range(5)]
        first = [t.clone() for t in memo.forward_rows(ref_model, rows)]
        again = memo.forward_rows(ref_model, [RowInput(r.ids, 0, None, ref_model.new_cache(16)) for r in rows])
    assert memo.bytes <= memo.max_bytes and len(memo.kept) == 2
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_a_sweep_gives_the_same_points_without_its_memo(tiny_model_dir, monkeypatch):
    from llada.eval import sweep as sw

    pipe = Pipeline.load(tiny_model_dir)
    spec = sw.SweepSpec((0.3, 0.9), (None, 0.0), (False, True), ("S",), ("add", "sort"), 3, 0, "eval", 8, 16)
    points = []
    for memo in (sw.ForwardMemo, lambda: None):
        monkeypatch.setattr(sw, "ForwardMemo", memo)
        last = list(sw.sweep(pipe, spec, budget=sw.Budget(forwards=256, seconds=600.0)))[-1]
        points.append([{k: v for k, v in p.to_dict().items() if k not in ("tps", "seconds")} for p in last.points])
    assert points[0] == points[1] and len(points[0]) == 8
