"""Routed experts for training: one grouped GEMM per projection instead of a loop over experts.

The engine's `Experts.forward` (llada/model.py) is the readable reference: sort the (token, expert)
pairs by expert, then run each expert on its rows. It asks the host how many rows each expert got
(`.tolist()`), which stalls a GPU once per MoE layer and splits a compiled graph. `GroupedExperts`
computes the same function without leaving the device:

    pairs (T*K,) sorted by expert ──► a buffer of R = T*K + E*A rows, each expert's rows starting
    at a multiple of A (zero rows pad the gaps; the last group runs to R)
    h   = grouped_mm(buffer, w13ᵀ, offs)      (R, 2I)   gate and up of every pair at once
    out = grouped_mm(silu(gate) * up, w2ᵀ, offs)  (R, H)
    y   = Σ_k weight_k · out[row of (token, k)]

Zero rows give zero outputs and zero weight gradients, so the padding is exact; A = 16 keeps every
group aligned for the CUDA kernels. Both implementations also count the tokens each expert received
in the last training forward (`load`, a non-persistent buffer: it never reaches a checkpoint), which
the aux-loss-free balancer reads.

On CUDA the products run in bf16 (grouped GEMM kernels take bf16), with fp32 master weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..model import Experts, LLaDA2MoE, MoE

ALIGN = 16  # rows per expert group are padded to a multiple of this
IMPLS = ("grouped", "loop")


class GroupedExperts(Experts):
    """Experts with the engine's parameters (w13 (E, 2I, H), w2 (E, H, I)) and a choice of forward."""

    def __init__(self, num_experts: int, hidden: int, inner: int, impl: str = "grouped"):
        super().__init__(num_experts, hidden, inner)
        if impl not in IMPLS:
            raise ValueError(f"experts impl must be one of {', '.join(IMPLS)}, got {impl!r}")
        self.impl = impl
        self.register_buffer("load", torch.zeros(num_experts), persistent=False)

    @classmethod
    def replacing(cls, experts: Experts, impl: str) -> "GroupedExperts":
        """A GroupedExperts sharing `experts`' parameters (same state_dict keys and values)."""
        E, two_i, H = experts.w13.shape
        with torch.device("meta"):
            new = cls(E, H, two_i // 2, impl)
        new.w13, new.w2 = experts.w13, experts.w2
        new.load = torch.zeros(E, device=experts.w13.device)
        return new

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x (T, H), ids (T, K), weights (T, K) -> (T, H), the reference's contract."""
        if torch.is_grad_enabled():
            counts = torch.zeros_like(self.load).scatter_add_(0, ids.reshape(-1), torch.ones_like(ids.reshape(-1),
                                                                                              dtype=self.load.dtype))
            self.load.copy_(counts)
        if self.impl == "loop":
            return super().forward(x, ids, weights)
        return grouped_forward(x, ids, weights, self.w13, self.w2)


def padded_rows(ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Row of every (token, k) pair in the padded buffer (T*K,), group ends (E,) int32, buffer rows R."""
    flat = ids.reshape(-1)  # (T*K,) expert of each pair, in (token, k) order
    n = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat))  # (E,)
    padded = (counts + ALIGN - 1) // ALIGN * ALIGN
    pad_start = padded.cumsum(0) - padded  # (E,) first buffer row of each expert
    order = flat.argsort(stable=True)  # pairs sorted by expert
    sorted_e = flat[order]
    rank = torch.arange(n, device=flat.device) - (counts.cumsum(0) - counts)[sorted_e]  # place inside its group
    rows = torch.empty_like(flat)
    rows[order] = pad_start[sorted_e] + rank
    total = n + num_experts * ALIGN  # static bound on sum(padded)
    ends = (pad_start + padded).to(torch.int32)
    ends[-1] = total  # the last group absorbs the zero tail: no row is left outside a group
    return rows, ends, total


def grouped_forward(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w13: torch.Tensor,
                    w2: torch.Tensor) -> torch.Tensor:
    """The reference's math with two grouped GEMMs; bf16 products on CUDA."""
    T, K = ids.shape
    dtype = torch.bfloat16 if x.is_cuda else x.dtype
    rows, ends, total = padded_rows(ids, w13.shape[0])
    buf = x.new_zeros(total, x.shape[1], dtype=dtype)  # (R, H)
    buf = buf.index_put((rows,), x.to(dtype).repeat_interleave(K, dim=0))
    gate, up = F.grouped_mm(buf, w13.to(dtype).transpose(1, 2), offs=ends).chunk(2, dim=-1)  # (R, I) each
    out = F.grouped_mm(F.silu(gate) * up, w2.to(dtype).transpose(1, 2), offs=ends)  # (R, H)
    ys = out[rows].view(T, K, -1).to(x.dtype)  # (T, K, H)
    return (ys * weights.to(x.dtype)[..., None]).sum(1)


def use_grouped_experts(model: LLaDA2MoE, impl: str = "grouped") -> list[GroupedExperts]:
    """Swap every MoE layer's experts for GroupedExperts (same parameters); returns them."""
    swapped = []
    for module in model.modules():
        if isinstance(module, MoE):
            if not isinstance(module.experts, GroupedExperts):
                module.experts = GroupedExperts.replacing(module.experts, impl)
            module.experts.impl = impl
            swapped.append(module.experts)
    return swapped
