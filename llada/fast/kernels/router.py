"""The MoE router in Triton: router logits, sigmoid and group-limited top-k (one launch, or two at decode).

Reference: `llada.model.Router` (same contract: h (T, H) -> ids (T, K) int64, weights (T, K) fp32).
E experts in n_group groups of S = E / n_group; K experts per token; `bias` (E,) steers selection only.
The selection holds BLOCK_T tokens' E logits in registers, laid out as (BLOCK_T, G, S):

    logits  = h @ W^T                          (BLOCK_T, E) fp32, a K loop over (E, BLOCK_K) weight tiles
    score   = sigmoid(logits);  biased = score + bias
    group   = sum of the 2 best biased scores in each group
    keep      the topk_group best groups; the rest are -inf
    ids     = top-K of biased over kept groups, best first
    weights = score[ids] / sum * routed_scaling_factor
    [shared]  one more column: id E, weight 1 (the shared expert, run as expert E by `fused_moe`)

Two paths, chosen from T (`plan_route`), with the same bits:

    one program   T > SPLIT_MAX_T: grid (cdiv(T, 16),), `_route_kernel`; each program streams all of W
                  (1 MB at the mini's 256 x 2048 in bf16) in a serial K loop and selects in registers
    split         T <= SPLIT_MAX_T: `_route_logits_kernel` over (token blocks, E / 16 expert tiles) writes
                  fp32 logits (T, E) to a scratch buffer, `_route_select_kernel` over tokens (one each)
                  reads them back into the slot layout and runs the same selection code

Why the split: at decode, T <= 32, the one-program path is one or two programs (1 or 2 SMs of 132)
streaming 1 MB each, 64 serial steps; an H200 timed it at 68 us at M = 1, 8 and 32, 63% of the FP8 MoE
layer at M = 1. The split path's 16 programs per token block each stream 64 KB in 8 steps of 8 KB.
Estimate, not measured: ~5-10 us for the logits (steps bound by latency, ~1 us each) plus ~3 us for the
second launch and its gap, so ~10 us against 68, ~1.1 ms of the mini's 4.79 ms FP8 forward (19 MoE layers).
Measured on an H200 since: 9.5-10.2 us for the logits, but 13.7-14.9 us for the top-k as it was (below).
Why not split K too: a logit summed from K-chunk partials rounds differently from the serial chain, and
the paths must agree bit for bit. Why a second launch rather than the last-arriving program selecting
(an atomic counter per token block): a counter must start at zero on every replay, which needs either a
fill launch or a buffer shared between plans, and the release/acquire pattern cannot be checked on a CPU;
the second launch costs ~2-3 us and holds no state. Each logit is the same fp32 chain over k in order on
both paths (an MMA chain in k on a GPU, whatever the tile width; under the interpreter both tiles are
numpy products of a contiguous W^T tile, 32 wide, whose sums agree column by column), the rms pass keeps
NORM_K = 32 on both, and with `norm` only expert tile 0 stores s and n, so they are written once.
No float sum goes through `tl.sum`, whose order follows the layout the compiler gives a tile (a dot's
output in one kernel, a load's in the other): on an H200 that alone made the weights' normalising sum and
rstd differ in their last bits between the paths (every id agreed). The picks' scores are summed in pick
order and the rms pass's squares column by column, then by a fixed tree (`_pairwise_sum`). The tests hold
the interpreter to the same bits and a GPU to a derived bound (tests/test_kernels_router_split.py).

The top-k launch runs one token per program in one warp (SELECT_BLOCK_T = 1, num_warps = 1). An H200
timed it at 13.7 / 14.2 / 14.9 us at M = 1 / 8 / 32 when it held 16 tokens over 4 warps: its ~20
reductions per block (per round an argmax and two sums, then the groups') each crossed warps through
shared memory behind barriers. In one warp a reduction over a token's 256 slots is 8 values per thread and
5 shuffles, and T tokens take T SMs; an id now comes from its slot by arithmetic (`_expert_of`, a
reduction fewer per round) and a group's best score and its index from one pass. Estimate, not measured:
~2-4 us alone (the launch and one load's latency), the router's two launches ~12-13 us at M <= 32.
Not chosen: selecting in the logits launch's last-arriving program (a counter per token block that must
be zero again after every graph replay, acq_rel atomics the interpreter cannot check); `tl.sort` over
packed (score, index) keys (a bitonic network over 256 keys is ~36 compare-exchange stages against 8
argmax rounds, and the groups must be ranked first anyway).

The logits GEMM keeps the reference's precision: for bf16 (or fp16) h and W every product is exact
in fp32 and the tensor cores sum in fp32, as `F.linear(h.float(), W.float())` does; for fp32 inputs
the dot runs in IEEE fp32 (no TF32). Top-k is K rounds of argmax-and-mask (K <= 8 on real models),
ties to the lower index; group and expert axes are padded to powers of two with -inf. A token whose
scores are NaN still gets ids in [0, E) (its weights are NaN), so no later kernel reads out of bounds.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton import knobs

from .launch import Launch, run

NEG_INF = tl.constexpr(float("-inf"))
BLOCK_T = 16  # tokens per program (tl.dot's smallest M)
BLOCK_K = 32  # hidden features per step: the (E, BLOCK_K) weight tile, 16 KB in bf16 at E = 256
NORM_STEPS = tl.constexpr(5)  # halvings in the rms pass's sum of its (BLOCK_T, NORM_K) tile of squares
NORM_K = tl.constexpr(2 ** NORM_STEPS.value)  # hidden features per step of the rms pass: fixes its order
BLOCK_E = 16  # experts per program on the split path (tl.dot's smallest N)
SPLIT_K = 256  # hidden features per step on the split path on a GPU: a (256, 16) bf16 tile of W^T, 8 KB
SELECT_BLOCK_T = 1  # tokens per program of the split path's top-k: one token, one warp (the module doc)
INTERPRETED_SELECT_BLOCK_T = 16  # under the interpreter (~0.1 s a program there): the same bits, row by row
SPLIT_MAX_T = 256  # the split path up to this many tokens (16 token blocks x 16 expert tiles at the mini)


@triton.jit
def _add_rsqrt(x_ptr, res_ptr, s_ptr, tokens, t_ok, H, eps, stride_xt, stride_rt, stride_st, store,
               BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """The residual stream s = x + res, rounded to x's dtype and stored for the tokens where `store`
    (BLOCK_T,) is true, and 1 / rms(s) per token (BLOCK_T,). BLOCK_K fixes the order of the squares' sum:
    every caller passes NORM_K (= 2 ** NORM_STEPS)."""
    sq = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)  # one fp32 chain over k0 per column: elementwise
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        m = t_ok[:, None] & (ks < H)[None, :]
        x = tl.load(x_ptr + tokens[:, None] * stride_xt + ks[None, :], mask=m, other=0.0)  # (BLOCK_T, BLOCK_K)
        r = tl.load(res_ptr + tokens[:, None] * stride_rt + ks[None, :], mask=m, other=0.0)
        s = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)  # one rounding, as `x + h` in torch
        tl.store(s_ptr + tokens[:, None] * stride_st + ks[None, :], s, mask=m & store[:, None])
        sq += s.to(tl.float32) * s.to(tl.float32)
    return 1.0 / tl.sqrt(_pairwise_sum(sq, NORM_STEPS) / H + eps)


@triton.jit
def _pairwise_sum(x, STEPS: tl.constexpr):
    """(BLOCK_T, 2 ** STEPS) -> (BLOCK_T,): the sum of each row as a fixed tree (column 2i + column 2i + 1, then
    again), so its bits do not depend on how the compiler lays the tile over threads, as `tl.sum`'s do: the
    two router paths (and the interpreter) then round alike."""
    for _ in tl.static_range(STEPS):
        a, b = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
        x = a + b
    return tl.reshape(x, (x.shape[0],))


@triton.jit
def _normed(x_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, ks, m, H, stride_xt, stride_rt, stride_nt, store):
    """RMSNorm(x + res) of one (BLOCK_T, BLOCK_K) tile, rounded as `llada.model.RMSNorm` rounds; stored
    for the tokens where `store` (elementwise: the same bits whatever the tile width)."""
    x = tl.load(x_ptr + tokens[:, None] * stride_xt + ks[None, :], mask=m, other=0.0)
    r = tl.load(res_ptr + tokens[:, None] * stride_rt + ks[None, :], mask=m, other=0.0)
    s = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
    w = tl.load(nw_ptr + ks, mask=ks < H, other=0.0).to(tl.float32)
    n = (w[None, :] * (s.to(tl.float32) * rstd[:, None]).to(x.dtype).to(tl.float32)).to(x.dtype)
    tl.store(n_ptr + tokens[:, None] * stride_nt + ks[None, :], n, mask=m & store[:, None])
    return n


@triton.jit
def _logits(h_ptr, w_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, t_ok, expert, e_ok, H,
            stride_ht, stride_hk, stride_we, stride_wk, stride_rt, stride_nt, store,
            BLOCK_T: tl.constexpr, SLOTS: tl.constexpr, BLOCK_K: tl.constexpr, LOW_PRECISION_IN: tl.constexpr,
            ADD_NORM: tl.constexpr):
    """h @ W^T for BLOCK_T tokens and every expert, (BLOCK_T, SLOTS) fp32: slot j holds expert[j].
    ADD_NORM: h is RMSNorm(h + res) made tile by tile here (and stored for the experts where `store`).
    Each logit is one fp32 chain over k in order, whatever BLOCK_K or the slot count: the split path's
    (BLOCK_T, BLOCK_E) tiles hold the same bits as the one-program path's (BLOCK_T, SLOTS)."""
    acc = tl.zeros((BLOCK_T, SLOTS), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        m = t_ok[:, None] & (ks < H)[None, :]
        if ADD_NORM:
            h = _normed(h_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, ks, m, H, stride_ht, stride_rt, stride_nt,
                       store)
        else:
            h = tl.load(h_ptr + tokens[:, None] * stride_ht + ks[None, :] * stride_hk, mask=m, other=0.0)
        # W^T's tile loaded as (BLOCK_K, SLOTS): the interpreter's numpy product then sums every width alike
        wt = tl.load(w_ptr + ks[:, None] * stride_wk + expert[None, :] * stride_we,
                     mask=(ks < H)[:, None] & e_ok[None, :], other=0.0)  # (BLOCK_K, SLOTS)
        if LOW_PRECISION_IN:  # bf16 x bf16 products are exact in the fp32 accumulator
            acc = tl.dot(h, wt, acc)
        else:
            acc = tl.dot(h.to(tl.float32), wt.to(tl.float32), acc, input_precision="ieee")
    return acc


@triton.jit
def _slots(N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, G_P2: tl.constexpr, S_P2: tl.constexpr):
    """The (G_P2 * S_P2,) slot layout: slot j = group j // S_P2, member j % S_P2, padded; its expert (< E)."""
    slots = tl.arange(0, G_P2 * S_P2)
    slot_ok = (slots // S_P2 < N_GROUP) & (slots % S_P2 < GROUP_SIZE)
    return slots, slot_ok, _expert_of(slots, N_GROUP, GROUP_SIZE, S_P2)  # (SLOTS,) always < E


@triton.jit
def _expert_of(slot, N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, S_P2: tl.constexpr):
    """A slot's expert, as `_slots` maps it (a padding slot, picked only when every score is -inf: expert 0)."""
    ok = (slot // S_P2 < N_GROUP) & (slot % S_P2 < GROUP_SIZE)
    return tl.where(ok, (slot // S_P2) * GROUP_SIZE + slot % S_P2, 0)


@triton.jit
def _select(logits, bias_ptr, ids_ptr, weights_ptr, tokens, t_ok, slots, slot_ok, expert, scale,
            stride_it, stride_ik, stride_wt, stride_wk2, N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr,
            TOPK_GROUP: tl.constexpr, TOP_K: tl.constexpr, G_P2: tl.constexpr, S_P2: tl.constexpr,
            K_P2: tl.constexpr, BLOCK_T: tl.constexpr, SHARED: tl.constexpr):
    """(BLOCK_T, SLOTS) fp32 logits -> sigmoid, group-limited top-k; ids and weights stored."""
    valid = t_ok[:, None] & slot_ok[None, :]  # (BLOCK_T, SLOTS)
    score = tl.sigmoid(logits)
    biased = score + tl.load(bias_ptr + expert, mask=slot_ok, other=0.0).to(tl.float32)[None, :]
    biased = tl.where(valid & (biased == biased), biased, NEG_INF)  # a NaN token picks in-range experts
    keep = _kept_groups(tl.reshape(biased, (BLOCK_T, G_P2, S_P2)), G_P2, TOPK_GROUP)  # (BLOCK_T, G_P2)
    flat = tl.reshape(tl.where(keep[:, :, None], tl.reshape(biased, (BLOCK_T, G_P2, S_P2)), NEG_INF),
                      (BLOCK_T, G_P2 * S_P2))
    ks = tl.arange(0, K_P2)[None, :]
    ids = tl.zeros((BLOCK_T, K_P2), dtype=tl.int64)
    w = tl.zeros((BLOCK_T, K_P2), dtype=tl.float32)
    total = tl.zeros((BLOCK_T,), dtype=tl.float32)  # the picks' scores summed in pick order, not by `tl.sum`
    for k in tl.static_range(TOP_K):
        pick = tl.argmax(flat, axis=1)[:, None]  # (BLOCK_T, 1) slot
        chosen = slots[None, :] == pick
        ids = tl.where(ks == k, _expert_of(pick, N_GROUP, GROUP_SIZE, S_P2).to(tl.int64), ids)  # no reduction
        picked = tl.sum(tl.where(chosen, score, 0.0), axis=1)  # (BLOCK_T,) one term: exact in any order
        w = tl.where(ks == k, picked[:, None], w)
        total += picked
        flat = tl.where(chosen, NEG_INF, flat)
    w = w / (total[:, None] + 1e-20) * scale
    if SHARED:  # column K: the shared expert, id E, weight 1 (`fused_moe.plan_fused_moe`)
        ids = tl.where(ks == TOP_K, N_GROUP * GROUP_SIZE, ids)
        w = tl.where(ks == TOP_K, 1.0, w)
    out_ok = t_ok[:, None] & (ks < TOP_K + SHARED)
    tl.store(ids_ptr + tokens[:, None] * stride_it + ks * stride_ik, ids, mask=out_ok)
    tl.store(weights_ptr + tokens[:, None] * stride_wt + ks * stride_wk2, w, mask=out_ok)


@triton.jit(do_not_specialize=["T"])  # one compile for every token count
def _route_kernel(h_ptr, w_ptr, bias_ptr, ids_ptr, weights_ptr, res_ptr, nw_ptr, s_ptr, n_ptr, T, H, scale, eps,
                  stride_ht, stride_hk, stride_we, stride_wk, stride_it, stride_ik, stride_wt, stride_wk2,
                  stride_rt, stride_st, stride_nt,
                  N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr, TOP_K: tl.constexpr,
                  G_P2: tl.constexpr, S_P2: tl.constexpr, K_P2: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_K: tl.constexpr, LOW_PRECISION_IN: tl.constexpr, SHARED: tl.constexpr,
                  ADD_NORM: tl.constexpr):
    """The one-program path: grid (token blocks,), each program every expert's logits and the selection."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    slots, slot_ok, expert = _slots(N_GROUP, GROUP_SIZE, G_P2, S_P2)
    rstd = tl.zeros((BLOCK_T,), dtype=tl.float32)
    if ADD_NORM:  # pass 1 over H: the residual stream and its rms; the logits' pass normalises
        rstd = _add_rsqrt(h_ptr, res_ptr, s_ptr, tokens, t_ok, H, eps, stride_ht, stride_rt, stride_st, t_ok,
                          BLOCK_T, NORM_K)
    logits = _logits(h_ptr, w_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, t_ok, expert, slot_ok, H, stride_ht,
                     stride_hk, stride_we, stride_wk, stride_rt, stride_nt, t_ok, BLOCK_T, G_P2 * S_P2, BLOCK_K,
                     LOW_PRECISION_IN, ADD_NORM)
    _select(logits, bias_ptr, ids_ptr, weights_ptr, tokens, t_ok, slots, slot_ok, expert, scale, stride_it,
            stride_ik, stride_wt, stride_wk2, N_GROUP, GROUP_SIZE, TOPK_GROUP, TOP_K, G_P2, S_P2, K_P2, BLOCK_T,
            SHARED)


@triton.jit(do_not_specialize=["T"])
def _route_logits_kernel(h_ptr, w_ptr, part_ptr, res_ptr, nw_ptr, s_ptr, n_ptr, T, H, E, eps,
                         stride_ht, stride_hk, stride_we, stride_wk, stride_pt, stride_rt, stride_st, stride_nt,
                         BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                         LOW_PRECISION_IN: tl.constexpr, ADD_NORM: tl.constexpr):
    """The split path's first launch: grid (token blocks, expert tiles); program (i, j) writes the fp32 logits
    of tokens block i, experts [j * BLOCK_E, (j + 1) * BLOCK_E) to `part` (T, E). With ADD_NORM every program
    makes its tokens' rstd (the same bits: the same code and order) and tile j = 0 alone stores s and n."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    expert = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = expert < E
    store = t_ok & (tl.program_id(1) + tl.zeros((BLOCK_T,), dtype=tl.int32) == 0)  # (BLOCK_T,): tile 0 stores
    rstd = tl.zeros((BLOCK_T,), dtype=tl.float32)
    if ADD_NORM:
        rstd = _add_rsqrt(h_ptr, res_ptr, s_ptr, tokens, t_ok, H, eps, stride_ht, stride_rt, stride_st, store,
                          BLOCK_T, NORM_K)
    logits = _logits(h_ptr, w_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, t_ok, tl.where(e_ok, expert, 0), e_ok, H,
                     stride_ht, stride_hk, stride_we, stride_wk, stride_rt, stride_nt, store, BLOCK_T, BLOCK_E,
                     BLOCK_K, LOW_PRECISION_IN, ADD_NORM)  # (BLOCK_T, BLOCK_E)
    tl.store(part_ptr + tokens[:, None] * stride_pt + expert[None, :], logits, mask=t_ok[:, None] & e_ok[None, :])


@triton.jit(do_not_specialize=["T"])
def _route_select_kernel(part_ptr, bias_ptr, ids_ptr, weights_ptr, T, scale,
                         stride_pt, stride_it, stride_ik, stride_wt, stride_wk2,
                         N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
                         TOP_K: tl.constexpr, G_P2: tl.constexpr, S_P2: tl.constexpr, K_P2: tl.constexpr,
                         BLOCK_T: tl.constexpr, SHARED: tl.constexpr):
    """The split path's second launch: grid (token blocks,); the logits read back into the slot layout and
    the one-program path's selection on them."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    slots, slot_ok, expert = _slots(N_GROUP, GROUP_SIZE, G_P2, S_P2)
    logits = tl.load(part_ptr + tokens[:, None] * stride_pt + expert[None, :],
                     mask=t_ok[:, None] & slot_ok[None, :], other=0.0)  # (BLOCK_T, SLOTS) as `_logits` leaves them
    _select(logits, bias_ptr, ids_ptr, weights_ptr, tokens, t_ok, slots, slot_ok, expert, scale, stride_it,
            stride_ik, stride_wt, stride_wk2, N_GROUP, GROUP_SIZE, TOPK_GROUP, TOP_K, G_P2, S_P2, K_P2, BLOCK_T,
            SHARED)


@triton.jit
def _kept_groups(biased, G_P2: tl.constexpr, TOPK_GROUP: tl.constexpr):
    """(BLOCK_T, G_P2, S_P2) biased scores -> bool (BLOCK_T, G_P2): the TOPK_GROUP groups whose two best
    scores sum highest (ties to the lower group)."""
    best, first = tl.max(biased, axis=2, return_indices=True, return_indices_tie_break_left=True)  # one pass
    s = tl.arange(0, biased.shape[2])[None, None, :]
    second = tl.max(tl.where(s == first[:, :, None], NEG_INF, biased), axis=2)
    group_score = best + second  # (BLOCK_T, G_P2)
    groups = tl.arange(0, G_P2)[None, :]
    keep = groups < 0
    for _ in tl.static_range(TOPK_GROUP):
        chosen = tl.argmax(group_score, axis=1)[:, None]
        keep = keep | (groups == chosen)
        group_score = tl.where(groups == chosen, NEG_INF, group_score)
    return keep


def plan_route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
               topk_group: int, scale: float, shared: bool = False, norm: tuple | None = None,
               split: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, list[Launch], tuple]:
    """h (T, H), router weight (E, H), bias (E,) -> ids (T, K) int64, weights (T, K) fp32, the launches, and
    with `norm` the residual stream and the experts' input.

    shared: one more column K, id E with weight 1, for a shared expert run as expert E of the fused MoE.
    norm: (residual (T, H), norm weight (H,), eps): h is the attention's output, the router reads
    RMSNorm(residual + h) and returns (residual + h, that norm), each (T, H) in h's dtype
    (`reference.add_rms_norm`, a launch fewer than the norm's own).
    split: the two-launch path over expert tiles (the module doc); None chooses it for T <= SPLIT_MAX_T.
    Both paths give the same bits."""
    T, H = h.shape
    E = weight.shape[0]
    if weight.shape != (E, H) or bias.shape != (E,):
        raise ValueError(f"router weight {tuple(weight.shape)} and bias {tuple(bias.shape)} for h {tuple(h.shape)}:"
                         f" expected ({E}, {H}) and ({E},)")
    if E % n_group or not 1 <= topk_group <= n_group or not 1 <= top_k <= E:
        raise ValueError(f"routing sizes: {E} experts in {n_group} groups, {topk_group} groups kept, top-{top_k}")
    cols = top_k + int(shared)
    ids = torch.empty(T, cols, dtype=torch.int64, device=h.device)  # (T, K [+ 1])
    weights = torch.empty(T, cols, dtype=torch.float32, device=h.device)  # (T, K [+ 1])
    res, nw, eps = norm if norm is not None else (h, h, 0.0)  # unread without a norm
    normed = tuple(torch.empty(T, H, dtype=h.dtype, device=h.device) for _ in range(2 if norm else 0))  # s, x
    if norm is not None and not (res.shape == h.shape and res.dtype == h.dtype and nw.shape == (H,)
                                 and h.stride(-1) == res.stride(-1) == 1):
        raise ValueError(f"norm: residual {tuple(res.shape)} {res.dtype} and weight {tuple(nw.shape)} for h "
                         f"{tuple(h.shape)} {h.dtype}: expected a contiguous-row residual like h and a weight ({H},)")
    # bf16 tensor-core products on a GPU; widened to fp32 (exact) under Triton's CPU interpreter, whose bf16
    # dots are wrong (as `fused_moe._scaled_dot`'s FP32_DOT)
    low = h.dtype == weight.dtype and h.dtype in (torch.bfloat16, torch.float16) and not knobs.runtime.interpret
    g_p2 = triton.next_power_of_2(n_group)
    s_p2 = max(triton.next_power_of_2(E // n_group), 16 // g_p2)  # at least 16 slots: tl.dot's smallest N
    s_out, n_out = normed or (h, h)  # never written without a norm
    select = dict(N_GROUP=n_group, GROUP_SIZE=E // n_group, TOPK_GROUP=topk_group, TOP_K=top_k, G_P2=g_p2, S_P2=s_p2,
                  K_P2=triton.next_power_of_2(cols), BLOCK_T=BLOCK_T, SHARED=bool(shared))
    blocks = triton.cdiv(T, BLOCK_T)
    select_t = INTERPRETED_SELECT_BLOCK_T if knobs.runtime.interpret else SELECT_BLOCK_T
    if split if split is not None else T <= SPLIT_MAX_T:
        part = torch.empty(T, E, dtype=torch.float32, device=h.device)  # (T, E) fp32 logits between the launches
        # the interpreter's dots are numpy products: its sums match the one-program path's only step for step
        step = BLOCK_K if knobs.runtime.interpret else SPLIT_K
        launches = [Launch(_route_logits_kernel, (blocks, triton.cdiv(E, BLOCK_E)),
                           (h, weight, part, res, nw, s_out, n_out, T, H, E, float(eps), *h.stride(),
                            *weight.stride(), part.stride(0), res.stride(0), s_out.stride(0), n_out.stride(0)),
                           dict(BLOCK_T=BLOCK_T, BLOCK_E=BLOCK_E, BLOCK_K=step, LOW_PRECISION_IN=low,
                                ADD_NORM=norm is not None, num_warps=4, num_stages=3)),
                    Launch(_route_select_kernel, (triton.cdiv(T, select_t),),
                           (part, bias, ids, weights, T, float(scale), part.stride(0), *ids.stride(),
                            *weights.stride()), select | dict(BLOCK_T=select_t, num_warps=1, num_stages=1))]
    else:
        launches = [Launch(_route_kernel, (blocks,),
                           (h, weight, bias, ids, weights, res, nw, s_out, n_out, T, H, float(scale), float(eps),
                            *h.stride(), *weight.stride(), *ids.stride(), *weights.stride(), res.stride(0),
                            s_out.stride(0), n_out.stride(0)),
                           select | dict(BLOCK_K=BLOCK_K, LOW_PRECISION_IN=low, ADD_NORM=norm is not None,
                                         num_warps=4, num_stages=3))]
    return ids, weights, launches, (() if norm is None else normed)


def route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
          topk_group: int, scale: float, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of `llada.model.Router.forward`: ids (T, K) int64 and weights (T, K) fp32 [+ the shared
    expert's column]."""
    ids, weights, launches, _ = plan_route(h, weight, bias, top_k, n_group, topk_group, scale, shared)
    run(launches)
    return ids, weights


def route_add_norm(h: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                   weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
                   scale: float, shared: bool = False) -> tuple[torch.Tensor, ...]:
    """`reference.route_add_norm` in one launch: s = residual + h, x = RMSNorm(s), and the router on x ->
    (s, x, ids, weights)."""
    ids, weights, launches, (s, x) = plan_route(h, weight, bias, top_k, n_group, topk_group, scale, shared,
                                                (residual, norm_weight, eps))
    run(launches)
    return s, x, ids, weights
