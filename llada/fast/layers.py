"""The fast engine's MoE layers: the layer's small ops moved into the fused MoE's own launches.

`llada.fast.engine.to_fast` swaps these in (the same Parameter objects: nothing is copied; `unfuse_layers`
puts the plain modules back). A bf16 MoE layer on them runs, from the attention's output h on:

    `_route_logits_kernel`  s = x + h, RMSNorm(s) (the experts' input), router logits over expert tiles
    `_route_select_kernel`  group-limited top-k, and one more column per token for the shared expert (id E,
                       weight 1); above 256 tokens both in one `_route_kernel` (`kernels/router.py`)
    `_align_kernel`    (token, expert) pairs sorted by expert, the shared expert's T pairs among them
    `_up_kernel`       gate and up products of every pair, silu(gate) * up in the epilogue (no split-K)
    `_down_kernel`     the down product, times the routing weight
    `_ksum_kernel`     sum of the routed rows, + the shared expert's row, + s, each rounded as the plain
                       `(out + shared) + x` rounds; and the next sublayer's RMSNorm of the result

what the plain `MoE` runs in 3 cuBLAS products, silu * up, two norms and 7 Triton launches. The next
layer's input norm (or the model's final norm) is computed by this layer's k-sum and handed over by a
`Handoff`: the consumer takes it only for the very tensor it was made from, and only where it is that
norm's module, so a layer run on its own (or out of order) computes its norm itself.
"""

from __future__ import annotations

import torch
from torch import nn

from . import kernels
from .kernels.fused_norm import FusedRMSNorm, FusedSwiGLU
from .kernels.reference import add_rms_norm, rel_rmse
from ..model import Experts, Layer, LLaDA2MoE, MoE
from .quantize import FusedRouter


class FusedExperts(nn.Module):
    """`Experts` on the bf16 grouped-GEMM kernels: same w13 (E, 2I, H) / w2 (E, H, I) Parameters."""

    def __init__(self, experts: Experts):
        super().__init__()
        self.w13, self.w2 = experts.w13, experts.w2

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return kernels.fused_moe_bf16(x, self.w13, self.w2, ids, weights, impl="triton")

    def forward_add(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, adds: list) -> torch.Tensor:
        """forward(x) + adds[0] + ..., the sums in the experts' last launch (`llada.model.MoE`)."""
        return kernels.fused_moe_bf16(x, self.w13, self.w2, ids, weights, impl="triton", adds=tuple(adds))

    def reference(self) -> Experts:
        experts = Experts.__new__(Experts)
        nn.Module.__init__(experts)
        experts.w13, experts.w2 = self.w13, self.w2
        return experts


class Handoff:
    """One norm made ahead by a k-sum: (the tensor it normalises, its norm, the module that would make it)."""

    def __init__(self):
        self.kept: tuple | None = None

    def put(self, x: torch.Tensor, normed: torch.Tensor, norm: nn.Module) -> None:
        self.kept = (x, normed, norm)

    def take(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor | None:
        kept, self.kept = self.kept, None
        return kept[1] if kept is not None and kept[0] is x and kept[2] is norm else None


class FusedMoE(MoE):
    """`MoE` whose shared expert runs as expert E of the routed grouped GEMMs (`kernels.fused_moe_bf16`'s
    `shared`): the router writes its column (id E, weight 1), the k-sum adds its row and the residual."""

    def __init__(self, moe: MoE):
        nn.Module.__init__(self)
        self.gate, self.experts, self.shared_experts = moe.gate, moe.experts, moe.shared_experts

    @staticmethod
    def supports(moe: nn.Module) -> bool:
        """A plain MoE on the bf16 fused experts and router whose shared expert is one expert's size."""
        shared = getattr(moe, "shared_experts", None)
        if not (type(moe) is MoE and isinstance(moe.experts, FusedExperts) and isinstance(moe.gate, FusedRouter)
                and isinstance(shared, FusedSwiGLU) and type(shared.down_proj) is nn.Linear):
            return False
        gate_up, w13 = shared._gate_up(), moe.experts.w13
        return (gate_up is not None and gate_up.shape == w13.shape[1:] and gate_up.dtype == w13.dtype
                and shared.down_proj.weight.shape == moe.experts.w2.shape[1:])

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """h (B, T, H) or (N, H) -> experts(h) + shared(h) [+ residual], h's shape, each sum rounded as `MoE`'s."""
        H = h.shape[-1]
        flat = h.reshape(-1, H)
        ids, w = self.gate(flat, shared=True)  # (B*T, K + 1): the last column the shared expert
        adds = () if residual is None else (residual.reshape(-1, H),)
        return self._experts(flat, ids, w, adds).view(h.shape)

    def forward_add_norm(self, x: torch.Tensor, h: torch.Tensor, norm: nn.Module,
                         next_norm: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """From the residual stream x and the attention's output h, (B, T, H) each: s = x + h, the layer's
        output s + experts(norm(s)) + shared(norm(s)), and with `next_norm` that norm of the output.
        The row path passes (N, H) instead of (B, T, H): the outputs keep h's shape."""
        H = h.shape[-1]
        ids, w, s, normed = self.gate(h.reshape(-1, H), shared=True, residual=x.reshape(-1, H),
                                      norm=norm)  # (B*T, K + 1) x2, (B*T, H) x2
        after = None if next_norm is None else (next_norm.weight, next_norm.eps)
        out = self._experts(normed, ids, w, (s,), after)
        out, ahead = out if after is not None else (out, None)
        return out.view(h.shape), None if ahead is None else ahead.view(h.shape)

    def _experts(self, x, ids, w, adds, norm=None):
        shared = (self.shared_experts._gate_up(), self.shared_experts.down_proj.weight)  # (2I, H), (H, I)
        return kernels.fused_moe_bf16(x, self.experts.w13, self.experts.w2, ids, w, impl="triton", adds=adds,
                                      shared=shared, norm=norm)

    def plain(self) -> MoE:
        moe = MoE.__new__(MoE)
        nn.Module.__init__(moe)
        moe.gate, moe.experts, moe.shared_experts = self.gate, self.experts, self.shared_experts
        return moe


class FusedLayer(Layer):
    """`Layer` on a `FusedMoE`: the post-attention add + norm inside the router's launch, and the next
    sublayer's norm (`next_norm`, the next layer's input norm or the model's final norm) in the k-sum's."""

    def __init__(self, layer: Layer, handoff: Handoff, next_norm: nn.Module):
        nn.Module.__init__(self)
        self.input_layernorm, self.attention = layer.input_layernorm, layer.attention
        self.post_attention_layernorm, self.mlp, self.index = layer.post_attention_layernorm, layer.mlp, layer.index
        object.__setattr__(self, "links", (handoff, next_norm))  # not submodules: no state-dict keys

    def forward(self, x, cos, sin, mask, cache, start):
        handoff, next_norm = self.links
        normed = handoff.take(x, self.input_layernorm)
        normed = self.input_layernorm(x) if normed is None else normed  # (B, T, H)
        h = self.attention(normed, cos, sin, mask, cache, self.index, start)
        out, ahead = self.mlp.forward_add_norm(x, h, self.post_attention_layernorm, next_norm)
        handoff.put(out, ahead, next_norm)
        return out

    @torch.no_grad()
    def moe_error(self, x: torch.Tensor, h: torch.Tensor) -> float:
        """How far this layer's fused MoE half is from the plain modules, from the residual x and the
        attention's output h (M, H) each (`llada.fast.engine.self_check`): the worse relative RMSE of the norm the
        router made and of the experts' sum (routed + shared, on the routing the fused router chose). The
        residual add is left out: in bf16 it rounds a small MoE output away."""
        norm, moe = self.post_attention_layernorm, self.mlp
        ids, w, _, normed = moe.gate(h, shared=True, residual=x, norm=norm)  # (M, K + 1) x2, (M, H)
        out = moe._experts(normed, ids, w, ())  # (M, H): routed + shared
        _, ref_normed = add_rms_norm(x, h, norm.weight, norm.eps)
        ref = moe.experts.reference()(ref_normed, ids[:, :-1], w[:, :-1]) + moe.shared_experts.plain()(ref_normed)
        return max(rel_rmse(normed, ref_normed), rel_rmse(out, ref))

    def plain(self) -> Layer:
        layer = Layer.__new__(Layer)
        nn.Module.__init__(layer)
        layer.input_layernorm, layer.attention = self.input_layernorm, self.attention
        layer.post_attention_layernorm, layer.mlp, layer.index = self.post_attention_layernorm, self.mlp, self.index
        return layer


class HandoffNorm(FusedRMSNorm):
    """The model's final norm, taken from the last layer's k-sum where it made it."""

    def __init__(self, norm: FusedRMSNorm, handoff: Handoff):
        super().__init__(norm)
        object.__setattr__(self, "handoff", handoff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = self.handoff.take(x, self)
        return super().forward(x) if normed is None else normed


def fuse_layers(model: LLaDA2MoE) -> LLaDA2MoE:
    """Every MoE layer `FusedMoE.supports` on `FusedLayer`, in place (after the norms, experts and router)."""
    for layer in model.layers:
        if FusedMoE.supports(layer.mlp):
            layer.mlp = FusedMoE(layer.mlp)
    if not any(isinstance(layer.mlp, FusedMoE) for layer in model.layers) or not isinstance(model.norm, FusedRMSNorm):
        return model
    handoff = Handoff()
    model.norm = HandoffNorm(model.norm, handoff)
    nexts = [layer.input_layernorm for layer in model.layers[1:]] + [model.norm]
    model.layers = nn.ModuleList(FusedLayer(layer, handoff, after) if isinstance(layer.mlp, FusedMoE) else layer
                                 for layer, after in zip(model.layers, nexts))
    return model


def unfuse_layers(model: LLaDA2MoE) -> LLaDA2MoE:
    """The plain `Layer` and `MoE` modules back (the norms, experts and router stay fused), in place."""
    model.layers = nn.ModuleList(layer.plain() if isinstance(layer, FusedLayer) else layer for layer in model.layers)
    for layer in model.layers:
        if isinstance(layer.mlp, FusedMoE):
            layer.mlp = layer.mlp.plain()
    if isinstance(model.norm, HandoffNorm):
        model.norm = FusedRMSNorm(model.norm)
    return model
