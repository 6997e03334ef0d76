"""FP8 runtime modules and the one-time converter that swaps them into a loaded model.

`quantize_model_fp8(model)` replaces every routed-expert block `layer.mlp.experts` (an `Experts`
module with w13 (E, 2I, H) and w2 (E, H, I)) by an `FP8Experts` holding float8_e4m3fn weights and
one fp32 scale per 128x128 tile, quantized once here. On the Triton kernels the router
`layer.mlp.gate` becomes a `FusedRouter` too (same weights, one kernel instead of ~15 ATen ops), so
one MoE layer is seven launches with no host sync: a CUDA graph can hold it. With `dense=True` the
dense linears of the layers (attention projections, dense SwiGLU, shared experts) become
`FP8Linear`; the embeddings / lm_head stay as they are. Forward contracts do not change, so the
decode loop is untouched. `impl` picks the kernels (see `llada.fast.kernels`): "auto" = Triton on CUDA,
PyTorch else.
Quantize once the model has its final dtype: `.to(dtype)` would cast the fp8 buffers too (moving
to another device is fine).

The offline converter, as gpt-fast has one, is `llada.weights.fp8_checkpoint`: `python -m llada.weights.fp8_checkpoint
SRC DST` writes SRC's experts once as FP8 into DST, which then loads as FP8 directly (`llada.weights.fp8_format`).
"""

from __future__ import annotations

import torch
from torch import nn

from . import kernels
from ..model import Experts, LLaDA2MoE, Router

ROUTER_SETTINGS = {"top_k", "n_group", "topk_group", "scale", "training"}  # what the router kernel implements


class FP8Experts(nn.Module):
    """Routed experts with fp8 weights: forward(x (T, H), ids (T, K), weights (T, K)) -> (T, H)."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, impl: str = "auto"):
        super().__init__()
        kernels.resolve_impl(impl, w13)
        self.impl = impl
        q13, s13 = kernels.quantize_weight_fp8(w13.detach(), impl)  # (E, 2I, H), (E, 2I/128, H/128)
        q2, s2 = kernels.quantize_weight_fp8(w2.detach(), impl)  # (E, H, I), (E, H/128, I/128)
        self.register_buffer("w13", q13)
        self.register_buffer("w13_scale", s13)
        self.register_buffer("w2", q2)
        self.register_buffer("w2_scale", s2)

    @classmethod
    def from_experts(cls, experts: Experts, impl: str = "auto") -> "FP8Experts":
        return cls(experts.w13, experts.w2, impl)

    @classmethod
    def from_quantized(cls, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
                       impl: str = "auto") -> "FP8Experts":
        """Wrap fp8 weights and tile scales quantized elsewhere (e.g. expert by expert while loading)."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self.impl = impl
        for name, t in (("w13", w13), ("w13_scale", w13_scale), ("w2", w2), ("w2_scale", w2_scale)):
            self.register_buffer(name, t)
        return self

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return kernels.fused_moe_fp8(x, self.w13, self.w13_scale, self.w2, self.w2_scale, ids, weights,
                                     impl=self.impl)

    def extra_repr(self) -> str:
        E, I2, H = self.w13.shape
        return f"experts={E}, hidden={H}, inner={I2 // 2}, fp8 128x128 tiles, impl={self.impl}"


class FP8Linear(nn.Module):
    """A bias-free linear layer with fp8 weights (N, K) and 128x128 tile scales."""

    def __init__(self, weight: torch.Tensor, impl: str = "auto"):
        super().__init__()
        kernels.resolve_impl(impl, weight)
        self.impl = impl
        q, s = kernels.quantize_weight_fp8(weight.detach(), impl)  # (N, K), (N/128, K/128)
        self.register_buffer("weight", q)
        self.register_buffer("weight_scale", s)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.fp8_linear(x, self.weight, self.weight_scale, impl=self.impl)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp8, impl={self.impl}"


class FusedRouter(Router):
    """`Router` on the Triton kernels of `llada.fast.kernels.router`: same parameters, same state-dict keys."""

    def __init__(self, router: Router):
        nn.Module.__init__(self)
        self.weight = router.weight  # the same Parameter and buffer objects: nothing is copied
        self.register_buffer("expert_bias", router.expert_bias)
        self.top_k, self.n_group, self.topk_group = router.top_k, router.n_group, router.topk_group
        self.scale = router.scale

    @staticmethod
    def supports(router: nn.Module) -> bool:
        """Only a plain Router whose settings the kernel implements (a newer setting keeps the reference)."""
        return (type(router) is Router and {k for k in vars(router) if not k.startswith("_")} <= ROUTER_SETTINGS
                and router.expert_bias is not None)  # the kernel adds a bias (E,): a router without one keeps torch

    def forward(self, h: torch.Tensor, shared: bool = False, residual: torch.Tensor | None = None,
                norm: nn.Module | None = None) -> tuple[torch.Tensor, ...]:
        """h (T, H) -> expert ids (T, K) int64 and combine weights (T, K) fp32; shared: (T, K + 1), the last
        column the shared expert's id E with weight 1 (`llada.fast.layers.FusedMoE`). With `residual` and
        `norm` (an RMSNorm), h is the attention's output and the router reads norm(residual + h), in the same
        launch: -> ids, weights, residual + h, norm(residual + h)."""
        args = (self.weight, self.expert_bias, self.top_k, self.n_group, self.topk_group, self.scale, shared)
        if norm is None:
            return kernels.route(h, *args)
        s, x, ids, w = kernels.route_add_norm(h, residual, norm.weight, norm.eps, *args)
        return ids, w, s, x


class FusedBlockRouter(FusedRouter):
    """LLaDA2.2's block router on the fast path, `FusedRouter`'s contract: the reference's selection
    (`llada.model.block_topk`, the same ops, so the same experts and weights bit for bit) on the device
    with no host sync (a CUDA graph can hold it), after the residual add + RMSNorm in one fused launch
    (`kernels.add_rms_norm`), with the shared expert's column for `llada.fast.layers.FusedMoE`. The
    selection is ~10 ATen launches: it has no Triton kernel of its own yet."""

    def __init__(self, router: Router):
        super().__init__(router)
        self.capacity, self.routing_block = router.capacity, router.routing_block

    @staticmethod
    def supports(router: nn.Module) -> bool:
        """A plain block-routing Router (LLaDA2.2)."""
        return type(router) is Router and hasattr(router, "capacity")

    def forward(self, h: torch.Tensor, shared: bool = False, residual: torch.Tensor | None = None,
                norm: nn.Module | None = None) -> tuple[torch.Tensor, ...]:
        """As `FusedRouter.forward`: h (T, H) -> ids, weights (T, K) [or (T, K + 1) with shared]; with
        `residual` and `norm` -> ids, weights, residual + h, norm(residual + h)."""
        s = None
        if norm is not None:
            s, h = kernels.add_rms_norm(residual, h, norm.weight, norm.eps)  # (T, H) each
        ids, w = Router.forward(self, h)  # (T, K) each
        if shared:  # the shared expert as expert E, weight 1
            ids = torch.cat([ids, ids.new_full((h.shape[0], 1), self.weight.shape[0])], dim=1)
            w = torch.cat([w, w.new_ones(h.shape[0], 1)], dim=1)
        return (ids, w) if norm is None else (ids, w, s, h)


def fast_router(router: nn.Module) -> FusedRouter | None:
    """The fast path's router for `router` (2.1: the Triton kernel, 2.2: `FusedBlockRouter`), None if none."""
    if FusedRouter.supports(router):
        return FusedRouter(router)
    return FusedBlockRouter(router) if FusedBlockRouter.supports(router) else None


def _quantize_linears(module: nn.Module, impl: str) -> int:
    """Swap every nn.Linear below `module` for an FP8Linear; returns how many."""
    swapped = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and child.bias is None:
            setattr(module, name, FP8Linear(child.weight, impl))
            swapped += 1
        else:
            swapped += _quantize_linears(child, impl)
    return swapped


@torch.no_grad()
def quantize_model_fp8(model: LLaDA2MoE, impl: str = "auto", dense: bool = False) -> LLaDA2MoE:
    """Quantize `model` in place (routed experts; with dense=True also the layers' dense linears)."""
    fused = kernels.resolve_impl(impl, model.word_embeddings.weight) == "triton"
    for layer in model.layers:
        experts = getattr(layer.mlp, "experts", None)
        if isinstance(experts, Experts):
            layer.mlp.experts = FP8Experts.from_experts(experts, impl)
        router = fast_router(getattr(layer.mlp, "gate", None)) if fused else None
        if router is not None:
            layer.mlp.gate = router
        if dense:
            _quantize_linears(layer.attention, impl)
            _quantize_linears(layer.mlp, impl)  # dense SwiGLU or the shared experts (router is not a Linear)
    return model

