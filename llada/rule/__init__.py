"""The draft-and-edit rule of one decode step, apart from any model (like a diffusers scheduler's `step`).

Given the window a forward scored (the MBE blocks, then the active block), the model's token x0 and
its confidence p at every window position, the official LLaDA2.1 rule decides what changes:

* DRAFT (M2T): in the active block, every mask with p > threshold (strict) is filled with x0; when
  fewer than `num_to_transfer` pass, the `num_to_transfer` most confident masks are filled instead;
* EDIT (T2T): every written, non-frozen (non-prompt) window position whose x0 differs from its token
  and whose p > editing_threshold (strict) is replaced by x0. editing_threshold 0.0 replaces every
  changed token; None switches editing off. An edit before `active_start` is an MBE edit.

Drafts and edits come from the same forward and are applied together.

    x0, p = sample_tokens(logits)                       # (W,), (W,)
    d = step(tokens, x0, p, frozen, mask_id=m, threshold=0.5, editing_threshold=0.0)
    tokens = d.tokens

The rule also decides R windows of one length W at once: tensors (R, W), and each setting either one
value for every row or a sequence of R (one per row). Every row gets what it gets alone.

LLaDA2.2's Levenshtein rule (`llada.rule.levenshtein`, re-exported here) works on the active block alone
and also deletes and inserts (docs/llada22.md): once per forward, from the block's logits (W, V),

    cand = levenshtein_candidates(logits, lev)         # the mask logit suppressed
    s = levenshtein_step(block, cand, frozen, book, lev)  # book: start_block(...) at the block's entry
    block, book = s.tokens, s.book                     # s.done: the block is finished
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .levenshtein import (BlockBook, BlockBooks, Candidates, Delete, Escape, Insert, Levenshtein, LevenshteinRows,
                          LevenshteinStep, PostCount, levenshtein_candidates, levenshtein_rows, levenshtein_step,
                          poked_book, start_block)

__all__ = ["StepDecision", "step", "draft", "edit", "BlockBook", "BlockBooks", "Candidates", "Delete", "Escape",
           "Insert", "Levenshtein", "LevenshteinRows", "LevenshteinStep", "PostCount", "levenshtein_candidates",
           "levenshtein_rows", "levenshtein_step", "poked_book", "start_block"]


@dataclass(frozen=True)
class StepDecision:
    """What one step does to a window of W positions (bool masks are (W,) or (R, W), like `tokens`)."""

    tokens: torch.Tensor  # (W,) the window after the step
    drafted: torch.Tensor  # filled from a mask (M2T), active block only
    edited: torch.Tensor  # replaced in the active block (T2T)
    mbe_edited: torch.Tensor  # replaced in an earlier block of the window (MBE)


def step(tokens: torch.Tensor, x0: torch.Tensor, p: torch.Tensor, frozen: torch.Tensor, *, mask_id: int,
         threshold: float | Sequence[float], editing_threshold: float | None | Sequence[float | None],
         active_start: int | Sequence[int] = 0, num_to_transfer: int | Sequence[int] = 1) -> StepDecision:
    """Apply the rule to a window: tokens, x0 (W,) ints, p (W,) floats, frozen (W,) bool (prompt); or to R
    windows, (R, W) each, with each setting one value or one per row."""
    _check(tokens, x0, p, frozen, active_start)
    masked = tokens == mask_id
    active = torch.arange(tokens.shape[-1], device=tokens.device) >= _per_row(active_start, tokens, torch.long)
    drafted = draft(masked & active, p, _per_row(threshold, p), num_to_transfer)
    edited = edit(~masked & ~frozen, tokens, x0, p, editing_threshold)
    new = torch.where(drafted | edited, x0, tokens)
    return StepDecision(tokens=new, drafted=drafted, edited=edited & active, mbe_edited=edited & ~active)


def draft(candidates: torch.Tensor, p: torch.Tensor, threshold: float | torch.Tensor,
          num_to_transfer: int | Sequence[int] = 1) -> torch.Tensor:
    """M2T: which candidate masks to fill (bool, like `candidates`; rows (R, W) each on their own, with
    `threshold` a number or (R, 1))."""
    take = candidates & (p > threshold)
    if candidates.dim() == 1:
        n = int(candidates.sum())
        if n and int(take.sum()) < num_to_transfer:  # too few pass: the most confident masks instead
            conf = torch.where(candidates, p, torch.full_like(p, -torch.inf))
            take = torch.zeros_like(candidates)
            take[conf.topk(min(num_to_transfer, n)).indices] = True
        return take
    counts = torch.stack([candidates.sum(-1), take.sum(-1)]).tolist()  # (2, R): candidates, passing
    wants = num_to_transfer if isinstance(num_to_transfer, Sequence) else [num_to_transfer] * len(counts[0])
    for i, (n, passed, want) in enumerate(zip(*counts, wants)):
        if n and passed < want:  # this row alone, as it runs alone
            take[i] = draft(candidates[i], p[i], threshold if not torch.is_tensor(threshold) else threshold[i], want)
    return take


def edit(editable: torch.Tensor, tokens: torch.Tensor, x0: torch.Tensor, p: torch.Tensor,
         editing_threshold: float | None | Sequence[float | None]) -> torch.Tensor:
    """T2T: which editable written positions to replace (editing_threshold None = off, 0.0 = every change)."""
    if editing_threshold is None:
        return torch.zeros_like(editable)
    if isinstance(editing_threshold, Sequence):  # a row with editing off compares against +inf: never passes
        editing_threshold = _per_row([torch.inf if t is None else t for t in editing_threshold], p)
    return editable & (x0 != tokens) & (p > editing_threshold)


def _per_row(value, like: torch.Tensor, dtype: torch.dtype | None = None):
    """A setting as it compares with `like`: a number as it is, a sequence as an (R, 1) tensor of like's dtype
    (a float threshold is rounded to p's dtype, as a number compared with p is)."""
    if not isinstance(value, Sequence):
        return value
    return torch.tensor(value, dtype=dtype or like.dtype, device=like.device)[:, None]


def _check(tokens, x0, p, frozen, active_start) -> None:
    shapes = {name: tuple(t.shape) for name, t in (("tokens", tokens), ("x0", x0), ("p", p), ("frozen", frozen))}
    if len(set(shapes.values())) != 1 or tokens.dim() not in (1, 2):
        raise ValueError(f"step needs 1-D (W,) or 2-D (R, W) tensors of one shape, got shapes {shapes}")
    if frozen.dtype != torch.bool:
        raise ValueError(f"frozen must be a bool tensor, got {frozen.dtype}")
    starts = active_start if isinstance(active_start, Sequence) else [active_start]
    if isinstance(active_start, Sequence) and (tokens.dim() != 2 or len(starts) != tokens.shape[0]):
        raise ValueError(f"one active_start per row needs (R, W) tensors with R = {len(starts)}")
    W = tokens.shape[-1]
    for start in starts:
        if not 0 <= start <= W:
            raise ValueError(f"active_start must be in [0, {W}], got {start}")
