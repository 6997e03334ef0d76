"""The reference fixture's golden cases in one batch: every row's trace is bit for bit the one it gets alone, in
float64 (with the cache, with MBE, without the cache) and in float32 with continuous batching (rows joining as
others finish). Minutes on 2 shared cores: a file of its own for parallel workers (tests/test_batch.py has the
rest of batched decoding)."""

import pytest
import torch

from llada.decode import generate, generate_batch
from llada.weights.checkpoint import load_model
from golden_cases import case_config
from test_batch import _key


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
