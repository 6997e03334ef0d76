"""The fast engine's RMSNorm and SwiGLU: the same weights as `llada.model`'s, their small ops in one Triton launch.

`llada.model` asks a norm for fused steps where it has them (`add_norm`, `norm_rope`, and on the
static decode path `qkv_rope_cache`: q, k, v from the qkv projection into attention and the KV
cache) and otherwise runs its plain ops, so swapping these in (`fuse_norms`, done by
`llada.fast.engine.to_fast`) changes the kernels a forward launches, not the model's code. `FusedSwiGLU`
runs silu(gate) * up as one launch. `unfuse_norms` puts the plain modules back (same Parameter
objects: nothing is copied).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import kernels
from ...model import LLaDA2MoE, SwiGLU
from ...norm_rope import RMSNorm
from ...row_exact import linear, project


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

    def qkv_rope_cache(self, qkv: torch.Tensor, key_norm: RMSNorm, cos: torch.Tensor, sin: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """qkv (B, T, nH + 2 nKV, D) -> q (B, nH, T, D); k (normed by `key_norm`, rotated) and v written into
        the layer's caches (B, nKV, S, D) at slots start.. (this norm is the query norm)."""
        return kernels.qkv_rope_cache(qkv, self.weight, key_norm.weight, self.eps, cos, sin, k_cache, v_cache, start,
                                      impl="triton")

    def plain(self) -> RMSNorm:
        norm = RMSNorm.__new__(RMSNorm)
        nn.Module.__init__(norm)
        norm.weight, norm.eps = self.weight, self.eps
        return norm


class FusedSwiGLU(SwiGLU):
    """`SwiGLU` whose silu(gate) * up is one launch (`kernels.silu_mul`); same projections."""

    def __init__(self, mlp: SwiGLU):
        nn.Module.__init__(self)
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        both = self._gate_up()
        if both is None:  # e.g. FP8 projections: two products
            gate, up = project(self.gate_proj, x), project(self.up_proj, x)
        else:
            gate, up = linear(x, both).chunk(2, dim=-1)  # (..., I) each, one product (tiled on the row-exact path)
        return project(self.down_proj, kernels.silu_mul(gate, up, impl="triton"))

    def _gate_up(self) -> torch.Tensor | None:
        """The gate and up weights stacked (2I, H), made again when either changes; None unless both are
        plain bias-free nn.Linear (a copy of the two: the FFN of a dense layer or a shared expert).

        When the weights change, the copy is rewritten in place where it can be (same shape, dtype and
        device): CUDA graphs recorded on it read that memory at every replay, and then read the new
        weights from the next eager call on. A copy that must be replaced stays alive (`_retired`)."""
        g, u = self.gate_proj, self.up_proj
        if not (type(g) is nn.Linear and type(u) is nn.Linear and g.bias is None and u.bias is None):
            return None
        stamp = tuple((w._version, w.data_ptr(), w.dtype, w.device) for w in (g.weight, u.weight))
        kept = getattr(self, "_kept", None)
        if kept is not None and kept[0] != stamp:
            both = kept[1]
            if both.shape == (g.weight.shape[0] + u.weight.shape[0], *g.weight.shape[1:]) and \
                    both.dtype == g.weight.dtype == u.weight.dtype and both.device == g.weight.device == u.weight.device:
                with torch.inference_mode():  # an inference tensor may only be written there
                    torch.cat([g.weight.detach(), u.weight.detach()], out=both)
                kept = self._kept = (stamp, both)
            else:
                self.__dict__.setdefault("_retired", []).append(both)
                kept = None
        if kept is None:
            kept = self._kept = (stamp, torch.cat([g.weight.detach(), u.weight.detach()]))
        return kept[1]

    def plain(self) -> SwiGLU:
        mlp = SwiGLU.__new__(SwiGLU)
        nn.Module.__init__(mlp)
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = self.gate_proj, self.up_proj, self.down_proj
        return mlp


def _swap(model: LLaDA2MoE, make) -> LLaDA2MoE:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            swapped = make(child)
            if swapped is not None:
                setattr(parent, name, swapped)
    return model


def fuse_norms(model: LLaDA2MoE) -> LLaDA2MoE:
    """Every RMSNorm and SwiGLU of `model` on the Triton kernels, in place."""
    fused = {RMSNorm: FusedRMSNorm, SwiGLU: FusedSwiGLU}
    return _swap(model, lambda m: fused[type(m)](m) if type(m) in fused else None)


def unfuse_norms(model: LLaDA2MoE) -> LLaDA2MoE:
    """Every fused norm and SwiGLU back to the plain module, in place."""
    return _swap(model, lambda m: m.plain() if isinstance(m, (FusedRMSNorm, FusedSwiGLU)) else None)


def fused(model: LLaDA2MoE) -> bool:
    """The model's small ops run on the Triton kernels (`fuse_norms` was applied)."""
    return isinstance(model.norm, FusedRMSNorm)
