"""The public step rule with hand-built probabilities: thresholds are strict, 0 is not off, MBE edits."""

import pytest
import torch

from llada import rule

M = 99  # mask id


def step(tokens, x0, p, frozen=None, **kw):
    tokens, x0 = torch.tensor(tokens), torch.tensor(x0)
    p = torch.tensor(p, dtype=torch.float32)  # what sample_tokens returns
    frozen = torch.zeros_like(tokens, dtype=torch.bool) if frozen is None else torch.tensor(frozen)
    kw = {"mask_id": M, "threshold": 0.5, "editing_threshold": 0.5} | kw
    d = rule.step(tokens, x0, p, frozen, **kw)
    return {k: torch.nonzero(getattr(d, k)).flatten().tolist() for k in ("drafted", "edited", "mbe_edited")} | {
        "tokens": d.tokens.tolist()}


@pytest.mark.parametrize("tau", [0.5, 0.7, 0.95])
def test_a_mask_at_exactly_tau_mask_is_not_drafted(tau):
    d = step([M, M, M], [1, 2, 3], [tau, 0.99, tau], threshold=tau)
    assert d["drafted"] == [1] and d["tokens"] == [M, 2, M]


@pytest.mark.parametrize("tau", [0.0, 0.5, 0.7])
def test_a_token_at_exactly_tau_edit_is_not_edited(tau):
    d = step([5, 6, 7], [1, 2, 7], [tau, min(tau + 0.01, 1.0), 0.99], editing_threshold=tau)
    assert d["edited"] == [1] and d["tokens"] == [5, 2, 7]  # 7 is unchanged: x0 equals the token


def test_tau_edit_zero_replaces_every_changed_token():
    d = step([5, 6, 7, M], [1, 2, 7, 4], [0.01, 0.3, 0.99, 0.9], editing_threshold=0.0)
    assert d["edited"] == [0, 1] and d["drafted"] == [3]


def test_editing_off_never_edits():
    d = step([5, 6, M], [1, 2, 3], [1.0, 1.0, 0.9], editing_threshold=None)
    assert d["edited"] == [] and d["drafted"] == [2]


@pytest.mark.parametrize("n, expect", [(1, [2]), (2, [0, 2])])
def test_when_no_mask_passes_the_most_confident_are_drafted(n, expect):
    d = step([M, 5, M, M], [1, 5, 3, 4], [0.3, 0.99, 0.45, 0.1], threshold=0.5, num_to_transfer=n)
    assert d["drafted"] == expect


def test_enough_passing_masks_skip_the_fallback():
    d = step([M, M, M], [1, 2, 3], [0.6, 0.7, 0.1], threshold=0.5, num_to_transfer=2)
    assert d["drafted"] == [0, 1]


def test_no_mask_no_draft():
    d = step([5, 6], [5, 6], [0.1, 0.1], threshold=0.5)
    assert d["drafted"] == [] and d["tokens"] == [5, 6]


def test_prompt_positions_are_frozen():
    d = step([5, 6, 7], [1, 2, 3], [1.0, 1.0, 1.0], frozen=[True, True, False], editing_threshold=0.0)
    assert d["edited"] == [2]


def test_mbe_window_edits_earlier_blocks_and_drafts_only_the_active_one():
    # window of 6: an earlier block [0, 3) (its last position still a mask, which M2T must not touch),
    # then the active block [3, 6)
    d = step([5, 6, M, 7, M, 8], [1, 6, 4, 2, 3, 9], [0.9, 0.9, 0.99, 0.9, 0.9, 0.4], active_start=3,
             editing_threshold=0.5)
    assert d["mbe_edited"] == [0] and d["edited"] == [3] and d["drafted"] == [4]
    assert d["tokens"] == [1, 6, M, 2, 3, 8]


def test_drafts_and_edits_come_from_the_same_forward():
    d = step([M, 5], [1, 2], [0.9, 0.9], editing_threshold=0.0)
    assert d["drafted"] == [0] and d["edited"] == [1] and d["tokens"] == [1, 2]


@pytest.mark.parametrize("bad, message", [
    ({"x0": torch.tensor([1, 2])}, "tensors of one shape"),
    ({"frozen": torch.tensor([0, 0, 0])}, "frozen must be a bool tensor"),
    ({"active_start": 4}, "active_start must be in"),
])
def test_bad_inputs_are_refused(bad, message):
    args = {"tokens": torch.tensor([M, 1, 2]), "x0": torch.tensor([1, 1, 2]), "p": torch.tensor([0.9, 0.9, 0.9]),
            "frozen": torch.zeros(3, dtype=torch.bool)} | {k: v for k, v in bad.items() if k != "active_start"}
    with pytest.raises(ValueError, match=message):
        rule.step(**args, mask_id=M, threshold=0.5, editing_threshold=0.5, active_start=bad.get("active_start", 0))


def test_rows_decided_together_get_what_each_gets_alone():
    """R windows in one call, each with its own settings (editing off, MBE start, fallback count), equal
    the R calls of one window; ties and thresholds exactly at p included."""
    gen = torch.Generator().manual_seed(0)
    R, W = 12, 16
    tokens = torch.randint(0, 6, (R, W), generator=gen)
    tokens[torch.rand(R, W, generator=gen) < 0.5] = M
    x0 = torch.randint(0, 6, (R, W), generator=gen)
    p = (torch.randint(0, 8, (R, W), generator=gen) / 8).float()  # few values: many ties and p == tau
    frozen = torch.arange(W)[None, :] < torch.randint(0, 5, (R, 1), generator=gen)
    settings = {"threshold": [0.5, 0.875, 0.9, 1.0] * 3, "editing_threshold": [None, 0.0, 0.5, 0.75] * 3,
                "active_start": [0, 4, 8, 16] * 3, "num_to_transfer": [1, 2, 3] * 4}
    together = rule.step(tokens, x0, p, frozen, mask_id=M, **settings)
    assert together.drafted.any() and together.edited.any() and together.mbe_edited.any()
    for i in range(R):
        alone = rule.step(tokens[i], x0[i], p[i], frozen[i], mask_id=M, **{k: v[i] for k, v in settings.items()})
        for name in ("tokens", "drafted", "edited", "mbe_edited"):
            assert torch.equal(getattr(together, name)[i], getattr(alone, name)), (i, name)


def test_one_setting_per_row_needs_as_many_rows():
    with pytest.raises(ValueError, match="one active_start per row"):
        rule.step(torch.tensor([[M, 1]]), torch.tensor([[1, 1]]), torch.tensor([[0.9, 0.9]]),
                  torch.zeros(1, 2, dtype=torch.bool), mask_id=M, threshold=0.5, editing_threshold=0.5,
                  active_start=[0, 0])
