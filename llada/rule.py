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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepDecision:
    """What one step does to a window of W positions (bool masks are (W,), like `tokens`)."""

    tokens: torch.Tensor  # (W,) the window after the step
    drafted: torch.Tensor  # filled from a mask (M2T), active block only
    edited: torch.Tensor  # replaced in the active block (T2T)
    mbe_edited: torch.Tensor  # replaced in an earlier block of the window (MBE)


def step(tokens: torch.Tensor, x0: torch.Tensor, p: torch.Tensor, frozen: torch.Tensor, *, mask_id: int,
         threshold: float, editing_threshold: float | None, active_start: int = 0,
         num_to_transfer: int = 1) -> StepDecision:
    """Apply the rule to a window: tokens, x0 (W,) ints, p (W,) floats, frozen (W,) bool (prompt)."""
    _check(tokens, x0, p, frozen, active_start)
    masked = tokens == mask_id
    active = torch.arange(tokens.numel(), device=tokens.device) >= active_start
    drafted = draft(masked & active, p, threshold, num_to_transfer)
    edited = edit(~masked & ~frozen, tokens, x0, p, editing_threshold)
    new = torch.where(drafted | edited, x0, tokens)
    return StepDecision(tokens=new, drafted=drafted, edited=edited & active, mbe_edited=edited & ~active)


def draft(candidates: torch.Tensor, p: torch.Tensor, threshold: float, num_to_transfer: int = 1) -> torch.Tensor:
    """M2T: which candidate masks to fill (bool, like `candidates`)."""
    take = candidates & (p > threshold)
    n = int(candidates.sum())
    if n and int(take.sum()) < num_to_transfer:  # too few pass: the most confident masks instead
        conf = torch.where(candidates, p, torch.full_like(p, -torch.inf))
        take = torch.zeros_like(candidates)
        take[conf.topk(min(num_to_transfer, n)).indices] = True
    return take


def edit(editable: torch.Tensor, tokens: torch.Tensor, x0: torch.Tensor, p: torch.Tensor,
         editing_threshold: float | None) -> torch.Tensor:
    """T2T: which editable written positions to replace (editing_threshold None = off, 0.0 = every change)."""
    if editing_threshold is None:
        return torch.zeros_like(editable)
    return editable & (x0 != tokens) & (p > editing_threshold)


def _check(tokens, x0, p, frozen, active_start: int) -> None:
    shapes = {name: tuple(t.shape) for name, t in (("tokens", tokens), ("x0", x0), ("p", p), ("frozen", frozen))}
    if len(set(shapes.values())) != 1 or tokens.dim() != 1:
        raise ValueError(f"step needs 1-D tensors of one length, got shapes {shapes}")
    if frozen.dtype != torch.bool:
        raise ValueError(f"frozen must be a bool tensor, got {frozen.dtype}")
    if not 0 <= active_start <= tokens.numel():
        raise ValueError(f"active_start must be in [0, {tokens.numel()}], got {active_start}")
