"""Pins that make silent regressions loud: the positions the KV cache computes over the golden cases, drafting
`num_to_transfer` tokens per forward through the decoder, and an MBE step worked by hand at the rule level."""

from __future__ import annotations

import pytest
import torch

from llada import rule
from llada.config import DecodeConfig
from llada.decode import generate
from golden_cases import case_config

M = 99  # mask id of the hand-worked cases


# ---- the KV cache -------------------------------------------------------------------------------------------

def cache_positions(trace) -> int:
    """Positions the cache forwards computed (prefill and refreshes): each record's window width."""
    return sum(r.window[1] - r.window[0] for r in trace.records if r.kind == "cache")


@pytest.mark.parametrize("mbe, per_case", [
    (False, [40, 40, 40, 16, 40, 48, 32, 48, 24, 48, 24, 24, 24, 0, 24]),
    (True, [32, 24, 32, 32, 32, 40, 40, 40, 40, 40, 16, 16, 16, 16, 16]),
], ids=["plain", "mbe"])
def test_the_cache_recomputes_exactly_the_pinned_positions(ref_model, golden, mbe, per_case):
    # a block is written once: a prefill or refresh starts where the cache's committed keys end. Forgetting a
    # commit recomputes earlier blocks at every refresh (about 2.5x these positions) with identical outputs.
    got = [cache_positions(generate(ref_model, case["prompt_ids"], case_config(case, mbe=mbe), golden["mask_id"],
                                    golden["eos_id"]))
           for case in golden["generate"]]
    assert got == per_case


# ---- num_to_transfer, through the decoder --------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 3])
def test_each_forward_drafts_num_to_transfer_tokens_when_none_pass(ref_model, golden, k):
    case = golden["generate"][0]
    cfg = DecodeConfig(threshold=1.0, editing_threshold=None, block_length=8, gen_length=16, max_post_steps=0,
                       num_to_transfer=k)  # p > 1.0 never holds: every draft is the fallback's
    trace = generate(ref_model, case["prompt_ids"], cfg, golden["mask_id"], golden["eos_id"])
    x = list(case["prompt_ids"]) + [golden["mask_id"]] * (trace.length - len(case["prompt_ids"]))
    drafted = []
    for record in (r for r in trace.records if r.kind == "decode"):
        lo, hi = record.active
        masks = sum(t == golden["mask_id"] for t in x[lo:hi])
        drafted.append((len(record.drafts), min(k, masks)))
        for c in record.changes:
            x[c.pos] = c.token
    assert drafted and all(got == want for got, want in drafted)
    assert sum(got for got, _ in drafted) == sum(1 for t in x[len(case["prompt_ids"]):] if t != golden["mask_id"])


# ---- MBE, worked by hand at the rule level -------------------------------------------------------------------

def test_an_mbe_step_worked_by_hand():
    # blocks of 3: [0, 3) holds the prompt's end (0, 1 frozen) and one written token, [3, 6) an earlier
    # written block, [6, 9) the active block; tau_mask 0.7, tau_edit 0.5 (both strict)
    tokens = torch.tensor([10, 11, 12, 13, 14, 15, M, 16, M])
    x0 = torch.tensor([20, 21, 22, 13, 24, 25, 26, 27, 28])
    p = torch.tensor([0.99, 0.99, 0.99, 0.99, 0.6, 0.5, 0.8, 0.9, 0.2])
    frozen = torch.tensor([True, True] + [False] * 7)
    d = rule.step(tokens, x0, p, frozen, mask_id=M, threshold=0.7, editing_threshold=0.5, active_start=6)
    # 0, 1: prompt (frozen) · 2: edited in an earlier block (MBE) · 3: x0 is the token · 4: MBE edit ·
    # 5: p equals tau_edit (not above) · 6: drafted · 7: edited in the active block · 8: p too low, and one
    # draft already meets num_to_transfer
    assert torch.nonzero(d.mbe_edited).flatten().tolist() == [2, 4]
    assert torch.nonzero(d.edited).flatten().tolist() == [7]
    assert torch.nonzero(d.drafted).flatten().tolist() == [6]
    assert d.tokens.tolist() == [10, 11, 22, 13, 24, 15, 26, 27, M]
    off = rule.step(tokens, x0, p, frozen, mask_id=M, threshold=0.7, editing_threshold=None, active_start=6)
    assert not off.mbe_edited.any() and not off.edited.any() and off.tokens.tolist() == [10, 11, 12, 13, 14, 15,
                                                                                          26, 16, M]
