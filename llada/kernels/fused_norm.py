"""The fast engine's RMSNorm: the same weight as `llada.model.RMSNorm`, its work in one Triton launch.

`llada.model` asks a norm for two fused steps where it has them (`add_norm`, `norm_rope`) and
otherwise runs its plain ops, so swapping these in (`fuse_norms`, done by `llada.engine.to_fast`)
changes the kernels a forward launches, not the model's code; `unfuse_norms` puts the plain
modules back (same Parameter objects: nothing is copied).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import kernels
from ..model import LLaDA2MoE, RMSNorm


class FusedRMSNorm(RMSNorm):
    def __init__(self, norm: RMSNorm):
        nn.Module.__init__(self)
        self.weight, self.eps = norm.weight, norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps, impl="triton")

    def add_norm(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x + h (the residual stream) and its norm, (..., N) each."""
        return kernels.add_rms_norm(x, h, self.weight, self.eps, impl="triton")

    def norm_rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """q or k (B, T, heads, D) -> normed, rotated, heads first (B, heads, T, D)."""
        return kernels.qk_norm_rope(x, self.weight, self.eps, cos, sin, impl="triton")

    def plain(self) -> RMSNorm:
        norm = RMSNorm.__new__(RMSNorm)
        nn.Module.__init__(norm)
        norm.weight, norm.eps = self.weight, self.eps
        return norm


def _swap(model: LLaDA2MoE, make) -> LLaDA2MoE:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            swapped = make(child)
            if swapped is not None:
                setattr(parent, name, swapped)
    return model


def fuse_norms(model: LLaDA2MoE) -> LLaDA2MoE:
    """Every RMSNorm of `model` on the Triton kernels, in place."""
    return _swap(model, lambda m: FusedRMSNorm(m) if type(m) is RMSNorm else None)


def unfuse_norms(model: LLaDA2MoE) -> LLaDA2MoE:
    """Every fused norm back to the plain RMSNorm, in place."""
    return _swap(model, lambda m: m.plain() if isinstance(m, FusedRMSNorm) else None)
