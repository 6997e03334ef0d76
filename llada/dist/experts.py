"""Expert parallel MoE layers: each rank holds E/W of the routed experts; one all-reduce sums their outputs.

Letter legend: T tokens, H hidden, K experts per token, E experts, W ranks, P (token, expert) pairs of a rank.

Rank r of W holds experts [r*E/W, (r+1)*E/W) of every MoE layer. Every rank sees every token (the tokens are
replicated: a decode forward scores a 32-token block, too few to be worth sending tokens to their experts'
ranks with an all-to-all), routes them all with its full copy of the router, keeps the (token, expert) pairs
whose expert it holds, runs them, and adds each pair's weighted output into a (T, H) buffer of zeros. One
all-reduce (a sum) of that buffer gives every rank the routed experts' output; the shared expert and the
residual are added after it, on every rank, as in one process. The buffer is fp32 for a bf16 model (the
all-reduce moves twice the bytes) so that a token's experts are summed in fp32 and rounded once, as one
process sums them; in bf16 each rank's partial sum would be rounded before the all-reduce adds them.

Quantized experts split the same way: a slice is the module one process runs (`Experts`, int8 `Int8Experts`
on the CPU, `FP8Experts`) with `RankSlice` mixed in before it, holding the quantized tensors of its own
experts only (`as_slice` makes one from the loader's quantized module). Each pair runs through the module's
own forward and kernels, so an expert's rows get the bits one process gives them; only the sum over a
token's experts is taken in another order.

What is split and what is replicated, and why: the routed experts are ~97% of an MoE model's bytes (LLaDA2.1-
flash: 256 experts of 8 active per token), so splitting them alone brings each rank's share near 1/W of the
model. Attention, the shared expert, the dense first layers, the embeddings and the output layer are
replicated: every rank computes them on the same tokens and gets the same values without talking to the
others. Attention stays whole on purpose (1.2% of flash's bytes, an all-reduce a layer that costs more than
it saves at 32-token blocks, and per-row KV state every rank would then have to mirror): docs/distributed.md
says why.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..fast.int8 import Int8Experts
from ..fast.kernels import resolve_impl
from ..fast.quantize import FP8Experts
from ..model import Experts, LLaDA2MoE


class RankSlice:
    """What every rank's slice of a layer's routed experts adds to the module it extends: which experts it holds
    (`first_expert`, of `num_experts`), the pairs of a call that are its own, and the all-reduce.

    Mixed in before an experts module (`Experts`, `Int8Experts`, `FP8Experts`): the module's own forward runs
    this rank's pairs (`pairs`), as it runs every pair in one process, with its tensors and kernels unchanged,
    so a checkpoint fills a slice's tensors as it fills the module's."""

    first_expert: int
    num_experts: int
    send = None  # rank 0 serving the others (`llada.dist.serve.Lead`): sends each call first

    def place(self, first: int, num_experts: int):
        """Say which experts this slice holds: [first, first + its own count) of `num_experts`."""
        self.first_expert, self.num_experts, self.send = first, num_experts, None
        return self

    def forward(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x (T, H), ids (T, K) over all E experts, weights (T, K) -> (T, H): the sum over every rank's experts."""
        if self.send is not None:
            return self.send(x, ids, weights, lambda: self.summed(x, ids, weights))
        return self.summed(x, ids, weights)

    def summed(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """This rank's experts on x, then the all-reduce that sums every rank's: (T, H)."""
        local = ids - self.first_expert  # (T, K)
        mine = (local >= 0) & (local < self.w13.shape[0])
        token, k = mine.nonzero(as_tuple=True)  # (P,) each: this rank's pairs, in (token, k) order
        wide = torch.promote_types(x.dtype, torch.float32)  # sums in fp32 at least, rounded to x's dtype once
        out = x.new_zeros(x.shape, dtype=wide)  # (T, H)
        if token.numel():
            y = self.pairs(x[token], local[token, k][:, None], weights[token, k][:, None])  # (P, H) weighted
            out.index_add_(0, token, y.to(wide))
        dist.all_reduce(out)  # the sum over the ranks' slices
        return out.to(x.dtype)

    def pairs(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x (P, H), local ids (P, 1), weights (P, 1) -> (P, H): each pair's weighted output, by the module's
        own forward (an expert's rows are the rows one process gives it, in the same order)."""
        return super().forward(x, ids, weights)


class ShardedExperts(RankSlice, Experts):
    """The slice [first, first + E/W) of a layer's experts: w13 (E/W, 2I, H), w2 (E/W, H, I).

    The same tensors as `Experts` (so checkpoints fill them the same way), the expert ids offset by `first`."""

    def __init__(self, num_experts: int, hidden: int, inner: int, rank: int, world: int):
        mine = expert_slice(num_experts, rank, world)
        super().__init__(len(mine), hidden, inner)
        self.place(mine.start, num_experts)


class ShardedInt8Experts(RankSlice, Int8Experts):
    """A slice of a layer's experts in int8 (CPU): `Int8Experts`' codes and row scales of its E/W experts,
    run by the same kernel (the pack kernel gives a row the same bits at any row count)."""


class ShardedFP8Experts(RankSlice, FP8Experts):
    """A slice of a layer's experts in FP8: `FP8Experts`' weights and tile scales of its E/W experts.

    On the PyTorch reference (the CPU, or a GPU where no fast engine runs FP8) the pairs run in fp32 and come
    back unrounded (the reference sums a token's experts in fp32 and rounds once; the all-reduce then does)."""

    def pairs(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        if resolve_impl(self.impl, x, fp8=True) == "torch":
            x = x.to(torch.promote_types(x.dtype, torch.float32))  # the reference quantizes x.float() either way
        return super().pairs(x, ids, weights)


def as_slice(experts: nn.Module, like: nn.Module) -> nn.Module:
    """`experts` (a quantized module of `like`'s own shapes, e.g. its int8 twin on `meta` while loading) as the
    same slice `like` is; `experts` itself where `like` is no slice (one process)."""
    if not isinstance(like, RankSlice):
        return experts
    if isinstance(experts, Int8Experts):
        twin = ShardedInt8Experts(experts.w13, experts.w13_scale, experts.w2, experts.w2_scale, impl=experts.impl)
    elif isinstance(experts, FP8Experts):
        twin = ShardedFP8Experts.from_quantized(experts.w13, experts.w13_scale, experts.w2, experts.w2_scale,
                                                impl=experts.impl)
    else:
        raise TypeError(f"no slice across ranks for {type(experts).__name__}; expert parallel runs Experts, "
                        "Int8Experts and FP8Experts")
    return twin.place(like.first_expert, like.num_experts)


def shard_experts(model: LLaDA2MoE, rank: int, world: int) -> LLaDA2MoE:
    """Replace every MoE layer's experts by this rank's slice (on `meta`, before loading: nothing allocated)."""
    cfg = model.config
    for layer in model.layers:
        experts = getattr(layer.mlp, "experts", None)
        if isinstance(experts, Experts):
            device = experts.w13.device
            with torch.device(device):
                sharded = ShardedExperts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, rank, world)
            layer.mlp.experts = sharded.to(experts.w13.dtype)
    return model


def expert_slice(num_experts: int, rank: int, world: int) -> range:
    """The experts rank `rank` of `world` holds; ValueError when `world` does not divide `num_experts`."""
    if num_experts % world:
        divisors = [w for w in range(2, num_experts + 1) if num_experts % w == 0]
        raise ValueError(f"expert parallel needs the world size to divide the experts: {num_experts} experts over "
                         f"{world} ranks leaves {num_experts % world} over; run on one of "
                         f"{', '.join(map(str, divisors))} ranks")
    local = num_experts // world
    return range(rank * local, (rank + 1) * local)
