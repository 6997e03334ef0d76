"""The int8 SwiGLU: gate_proj and up_proj read the same x, so x is split into its two int8 digits once for both.

`llada.model.SwiGLU` runs down(silu(gate(x)) * up(x)) as three linear layers; with int8 weights on intmm
(`llada.fast.int8.Int8Linear`) each layer splits its input into digits (`llada.fast.int8_digits`), so x was
split twice, and the two products' digits summed and scaled in two passes each. `Int8SwiGLU` keeps the same
three `Int8Linear` children (the same state dict: the loader and the int8 checkpoint see no change) and runs

    d = int8_digits(x)                            once: (2, M, K) int8 codes, (M, 1) scales
    acc[0] = d @ gate^T, acc[1] = d @ up^T        (2, 2M, I) int32: two exact `torch._int_mm` into one buffer
    y = (acc[:, M:] / 254 + acc[:, :M]) * sx * s  (2, M, I): both products' sum and scales in one pass each
    down(silu(y[0]) * y[1])                       the down projection as before (its input is new: its own split)

Per output element the arithmetic is `int8_linear_intmm`'s, so the result is the three layers' bit for bit
(`forward_ref` runs them; tests/test_int8_mlp.py compares). The dense layer and each MoE layer's shared
expert are SwiGLUs.

An MoE layer's shared expert and its routed experts read the same x too (the shared expert is one more expert
every token goes to): `Int8MoE` splits x once for both (`Int8Experts` takes the split for its many rows), the
bits of `llada.model.MoE.forward`. `int8_mlps(model)` swaps both modules in, keeping every child.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..model import Experts, LLaDA2MoE, MoE, SwiGLU
from ..row_exact import project
from .int8 import Int8Experts, Int8Linear, quantized_modules
from .int8_digits import Digits, int8_digits
from .team import products, serial


class Int8SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) on int8 `Int8Linear` children (intmm), x's digits made once for gate and up."""

    def __init__(self, gate_proj: nn.Module, up_proj: nn.Module, down_proj: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = gate_proj, up_proj, down_proj

    def forward(self, x: torch.Tensor, digits: Digits | None = None) -> torch.Tensor:
        """x (..., H) -> (..., H); `digits`: x's split where the caller made it already."""
        qg, qu = self.gate_proj.weight, self.up_proj.weight  # (I, H) int8 each
        with serial():  # the steps between products on this thread alone (`llada.fast.team`)
            d = int8_digits(x) if digits is None else digits
            M, I = d.rows, qg.shape[0]
            codes = d.codes.view(2 * M, -1)  # (2M, H): hi rows, then lo rows
            acc = torch.empty(2, 2 * M, I, dtype=torch.int32, device=x.device)
            with products():
                torch._int_mm(codes, qg.T, out=acc[0])  # exact
                torch._int_mm(codes, qu.T, out=acc[1])
            y = torch.div(acc[:, M:], 254).add_(acc[:, :M])  # (2, M, I) fp32, as `combine_digits`
            s = torch.stack([self.gate_proj.scale, self.up_proj.scale]).float()[:, None, :]  # (2, 1, I)
            y = y.mul_(d.scale).mul_(s).to(x.dtype)
            h = F.silu(y[0]) * y[1]  # (M, I)
            return self.down_proj(h).view(*x.shape[:-1], -1)

    def forward_ref(self, x: torch.Tensor, digits: Digits | None = None) -> torch.Tensor:
        """`SwiGLU.forward`: each child on its own (x split for gate and again for up); the same bits."""
        return project(self.down_proj, F.silu(project(self.gate_proj, x)) * project(self.up_proj, x))


class Int8MoE(MoE):
    """`MoE` with int8 routed experts (`Int8Experts`) and an `Int8SwiGLU` shared expert (or none): x split into
    digits once for both. The children are the MoE's own (`from_moe`): the same state dict."""

    @classmethod
    def from_moe(cls, moe: MoE) -> "Int8MoE":
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.gate, new.experts, new.shared_experts = moe.gate, moe.experts, moe.shared_experts
        return new

    def forward(self, h: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """h (B, T, H) or (N, H) -> experts(h) + shared(h) [+ residual], shaped as h: `MoE.forward`'s sums."""
        H = h.shape[-1]
        flat = h if h.ndim == 2 else h.reshape(-1, H)  # (N, H)
        with serial():  # the router and the steps between products on this thread alone (`llada.fast.team`)
            ids, w = self.gate(flat)
            d = int8_digits(flat)
            out = self.experts(flat, ids, w, digits=d)
            if self.shared_experts is not None:
                out = out + self.shared_experts(flat, digits=d)
            if residual is not None:
                out = out + residual.reshape(-1, H)
        return out if h.ndim == 2 else out.view(h.shape)

    def forward_ref(self, h: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """`MoE.forward`: the shared expert and the routed experts each split x; the same bits."""
        return MoE.forward(self, h, residual)


def fusable(module: nn.Module) -> bool:
    """A SwiGLU whose three layers are int8 on intmm without a bias (the model's SwiGLUs have none)."""
    if not isinstance(module, SwiGLU):
        return False
    layers = (module.gate_proj, module.up_proj, module.down_proj)
    return all(isinstance(m, Int8Linear) and m.impl == "intmm" and m.bias is None for m in layers)


def sharable(module: nn.Module) -> bool:
    """An MoE whose routed experts are one process's `Int8Experts` (not a slice across ranks: those run their
    own forward) and whose shared expert, if any, is an `Int8SwiGLU`."""
    return (type(module) is MoE and type(module.experts) is Int8Experts
            and (module.shared_experts is None or isinstance(module.shared_experts, Int8SwiGLU)))


def int8_mlps(model: nn.Module) -> int:
    """Swap `Int8SwiGLU` in for every fusable SwiGLU of `model` (dense layers, shared experts), then `Int8MoE`
    for every sharable MoE, in place: the same children, so the state dict and the loader are unchanged.
    Returns how many modules were swapped."""
    swapped = 0
    for make, wanted in ((lambda m: Int8SwiGLU(m.gate_proj, m.up_proj, m.down_proj), fusable),
                         (Int8MoE.from_moe, sharable)):
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if wanted(child):
                    setattr(parent, name, make(child))
                    swapped += 1
    return swapped


@torch.no_grad()
def quantize_model_int8(model: LLaDA2MoE) -> LLaDA2MoE:
    """Quantize `model` in place: routed experts, attention projections, dense and shared SwiGLUs (each SwiGLU
    then one `Int8SwiGLU`, each MoE one `Int8MoE`: x split into digits once for all that read it)."""
    for parent, name in quantized_modules(model):
        child = getattr(parent, name)
        new = Int8Experts.from_experts(child) if isinstance(child, Experts) else Int8Linear.from_linear(child)
        setattr(parent, name, new)
    int8_mlps(model)
    return model
