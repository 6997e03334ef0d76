"""The model's RMSNorm and rotary embedding, and the two hooks a fast engine fills in.

    RMSNorm          y = w * (x * rsqrt(mean(x^2) + eps)), normalised in fp32, rounded to x's dtype
    rope_cos_sin     NeoX rotary tables for absolute positions, fp32 (T, R), dim j pairs with j + R/2
    apply_rope       rotate the first R dims of every head; the rest pass through
    rope_table       the tables of positions [0, n) made once, read by position (the static forward)

`norm_rope` and `add_norm` are where `llada.model` asks a norm for a fused step (QK-norm + RoPE; the
residual add + RMSNorm): a norm that has the method (`llada.fast.kernels.fused_norm.FusedRMSNorm`) does it in
one launch, a plain one runs the ops below. Letter legend as in `llada.model`.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    # The fused steps a fast norm has (`llada.fast.kernels.fused_norm`); a plain one has none. Named here so
    # that looking them up finds None at once, not through nn.Module's failing `__getattr__`.
    norm_rope = add_norm = qkv_rope_cache = None

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x if x.dtype == torch.float32 else x.float()  # (the casts are no-ops on fp32: skipped)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (xf if x.dtype == torch.float32 else xf.to(x.dtype))


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """NeoX rotary tables for absolute `positions` (T,) -> cos, sin of shape (T, rotary_dim), fp32."""
    inv_freq = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=positions.device) / rotary_dim)
    freqs = positions.float()[:, None] * inv_freq[None, :]  # (T, rotary_dim/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, rotary_dim): dim j pairs with j + rotary_dim/2
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first rotary_dim dims of every head of x (B, h, T, D); the rest pass through."""
    rd = cos.shape[-1]
    rot, rest = x[..., :rd], x[..., rd:]
    half = rd // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    rot = (rot.float() * cos + rotated_half.float() * sin).to(x.dtype)
    return torch.cat([rot, rest], dim=-1)


def norm_rope(norm: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """q or k (B, T, h, D) -> normed, heads first, rotated (B, h, T, D); a fused norm does it in one kernel."""
    fused = getattr(norm, "norm_rope", None)
    return fused(x, cos, sin) if fused is not None else apply_rope(norm(x).transpose(1, 2), cos, sin)


def add_norm(norm: nn.Module, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual stream x + h and its norm, (..., H) each; a fused norm does both in one kernel."""
    fused = getattr(norm, "add_norm", None)
    if fused is not None:
        return fused(x, h)
    x = x + h
    return x, norm(x)


def rope_table(owner: nn.Module, positions: torch.Tensor, size: int, rotary_dim: int,
               theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, R) of `positions` (T,) read from tables of positions [0, size) kept on `owner`.

    Elementwise ops give a position the same values in any tensor, so these are bit for bit
    `rope_cos_sin(positions)`; a forward reads them with one gather instead of ~10 ops.

    A table that a larger one replaces stays alive on `owner` (`_rope_retired`): CUDA graphs recorded
    while it was the table (`llada.fast.graphs`, kept between runs) read its memory at every replay, and
    freed memory is soon another tensor's. Tables grow at least twofold, so few are ever kept."""
    kept = getattr(owner, "_rope_table", None)
    if kept is None or kept.shape[0] < size or kept.device != positions.device:
        if kept is not None:
            owner.__dict__.setdefault("_rope_retired", []).append(kept)
            size = max(size, 2 * kept.shape[0]) if kept.device == positions.device else size
        cos, sin = rope_cos_sin(torch.arange(size, device=positions.device), rotary_dim, theta)
        kept = owner._rope_table = torch.cat([cos, sin], dim=-1)  # (size, 2R): one row per position
    both = kept.index_select(0, positions)  # (T, 2R)
    return both[:, :rotary_dim], both[:, rotary_dim:]
