"""The MoE router in one Triton kernel: router logits, sigmoid and group-limited top-k.

Reference: `llada.model.Router` (same contract: h (T, H) -> ids (T, K) int64, weights (T, K) fp32).
E experts in n_group groups of S = E / n_group; K experts per token; `bias` (E,) steers selection only.
One program per BLOCK_T tokens holds all E logits in registers, laid out as (BLOCK_T, G, S):

    logits  = h @ W^T                          (BLOCK_T, E) fp32, a K loop over (E, BLOCK_K) weight tiles
    score   = sigmoid(logits);  biased = score + bias
    group   = sum of the 2 best biased scores in each group
    keep      the topk_group best groups; the rest are -inf
    ids     = top-K of biased over kept groups, best first
    weights = score[ids] / sum * routed_scaling_factor
    [shared]  one more column: id E, weight 1 (the shared expert, run as expert E by `fused_moe`)

Why one program sees every expert: top-k needs the whole row of logits, and a grid over expert tiles
would hand them to a second launch through memory (the earlier design: two kernels). Each program
reads all of W (1 MB at the mini's 256 x 2048 in bf16, from L2 after the first): at decode, T = 32,
that is two programs, ~2 MB of L2 reads (an estimate, not measured).

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


@triton.jit
def _add_rsqrt(x_ptr, res_ptr, s_ptr, tokens, t_ok, H, eps, stride_xt, stride_rt, stride_st,
               BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """The residual stream s = x + res, rounded to x's dtype and stored, and 1 / rms(s) per token (BLOCK_T,)."""
    sq = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        m = t_ok[:, None] & (ks < H)[None, :]
        x = tl.load(x_ptr + tokens[:, None] * stride_xt + ks[None, :], mask=m, other=0.0)  # (BLOCK_T, BLOCK_K)
        r = tl.load(res_ptr + tokens[:, None] * stride_rt + ks[None, :], mask=m, other=0.0)
        s = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)  # one rounding, as `x + h` in torch
        tl.store(s_ptr + tokens[:, None] * stride_st + ks[None, :], s, mask=m)
        sq += tl.sum(s.to(tl.float32) * s.to(tl.float32), axis=1)
    return 1.0 / tl.sqrt(sq / H + eps)


@triton.jit
def _normed(x_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, ks, m, H, stride_xt, stride_rt, stride_nt):
    """RMSNorm(x + res) of one (BLOCK_T, BLOCK_K) tile, rounded as `llada.model.RMSNorm` rounds; stored."""
    x = tl.load(x_ptr + tokens[:, None] * stride_xt + ks[None, :], mask=m, other=0.0)
    r = tl.load(res_ptr + tokens[:, None] * stride_rt + ks[None, :], mask=m, other=0.0)
    s = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
    w = tl.load(nw_ptr + ks, mask=ks < H, other=0.0).to(tl.float32)
    n = (w[None, :] * (s.to(tl.float32) * rstd[:, None]).to(x.dtype).to(tl.float32)).to(x.dtype)
    tl.store(n_ptr + tokens[:, None] * stride_nt + ks[None, :], n, mask=m)
    return n


@triton.jit
def _logits(h_ptr, w_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, t_ok, expert, e_ok, H,
            stride_ht, stride_hk, stride_we, stride_wk, stride_rt, stride_nt,
            BLOCK_T: tl.constexpr, SLOTS: tl.constexpr, BLOCK_K: tl.constexpr, LOW_PRECISION_IN: tl.constexpr,
            ADD_NORM: tl.constexpr):
    """h @ W^T for BLOCK_T tokens and every expert, (BLOCK_T, SLOTS) fp32: slot j holds expert[j].
    ADD_NORM: h is RMSNorm(h + res) made tile by tile here (and stored for the experts)."""
    acc = tl.zeros((BLOCK_T, SLOTS), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        m = t_ok[:, None] & (ks < H)[None, :]
        if ADD_NORM:
            h = _normed(h_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, ks, m, H, stride_ht, stride_rt, stride_nt)
        else:
            h = tl.load(h_ptr + tokens[:, None] * stride_ht + ks[None, :] * stride_hk, mask=m, other=0.0)
        w = tl.load(w_ptr + expert[:, None] * stride_we + ks[None, :] * stride_wk,
                    mask=e_ok[:, None] & (ks < H)[None, :], other=0.0)  # (SLOTS, BLOCK_K)
        if LOW_PRECISION_IN:  # bf16 x bf16 products are exact in the fp32 accumulator
            acc = tl.dot(h, tl.trans(w), acc)
        else:
            acc = tl.dot(h.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    return acc


@triton.jit(do_not_specialize=["T"])  # one compile for every token count
def _route_kernel(h_ptr, w_ptr, bias_ptr, ids_ptr, weights_ptr, res_ptr, nw_ptr, s_ptr, n_ptr, T, H, scale, eps,
                  stride_ht, stride_hk, stride_we, stride_wk, stride_it, stride_ik, stride_wt, stride_wk2,
                  stride_rt, stride_st, stride_nt,
                  N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr, TOP_K: tl.constexpr,
                  G_P2: tl.constexpr, S_P2: tl.constexpr, K_P2: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_K: tl.constexpr, LOW_PRECISION_IN: tl.constexpr, SHARED: tl.constexpr,
                  ADD_NORM: tl.constexpr):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    slots = tl.arange(0, G_P2 * S_P2)  # slot j = group j // S_P2, member j % S_P2 (padded with -inf)
    slot_ok = (slots // S_P2 < N_GROUP) & (slots % S_P2 < GROUP_SIZE)
    expert = tl.where(slot_ok, (slots // S_P2) * GROUP_SIZE + slots % S_P2, 0)  # (SLOTS,) always < E
    rstd = tl.zeros((BLOCK_T,), dtype=tl.float32)
    if ADD_NORM:  # pass 1 over H: the residual stream and its rms; the logits' pass normalises
        rstd = _add_rsqrt(h_ptr, res_ptr, s_ptr, tokens, t_ok, H, eps, stride_ht, stride_rt, stride_st,
                          BLOCK_T, BLOCK_K)
    logits = _logits(h_ptr, w_ptr, res_ptr, nw_ptr, n_ptr, rstd, tokens, t_ok, expert, slot_ok, H, stride_ht,
                     stride_hk, stride_we, stride_wk, stride_rt, stride_nt, BLOCK_T, G_P2 * S_P2, BLOCK_K,
                     LOW_PRECISION_IN, ADD_NORM)
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
    for k in tl.static_range(TOP_K):
        pick = tl.argmax(flat, axis=1)[:, None]  # (BLOCK_T, 1) slot
        chosen = slots[None, :] == pick
        ids = tl.where(ks == k, tl.sum(tl.where(chosen, expert[None, :], 0), axis=1)[:, None].to(tl.int64), ids)
        w = tl.where(ks == k, tl.sum(tl.where(chosen, score, 0.0), axis=1)[:, None], w)
        flat = tl.where(chosen, NEG_INF, flat)
    w = w / (tl.sum(w, axis=1)[:, None] + 1e-20) * scale
    if SHARED:  # column K: the shared expert, id E, weight 1 (`fused_moe.plan_fused_moe`)
        ids = tl.where(ks == TOP_K, N_GROUP * GROUP_SIZE, ids)
        w = tl.where(ks == TOP_K, 1.0, w)
    out_ok = t_ok[:, None] & (ks < TOP_K + SHARED)
    tl.store(ids_ptr + tokens[:, None] * stride_it + ks * stride_ik, ids, mask=out_ok)
    tl.store(weights_ptr + tokens[:, None] * stride_wt + ks * stride_wk2, w, mask=out_ok)


@triton.jit
def _kept_groups(biased, G_P2: tl.constexpr, TOPK_GROUP: tl.constexpr):
    """(BLOCK_T, G_P2, S_P2) biased scores -> bool (BLOCK_T, G_P2): the TOPK_GROUP groups whose two best
    scores sum highest (ties to the lower group)."""
    best = tl.max(biased, axis=2)
    first = tl.argmax(biased, axis=2)
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
               topk_group: int, scale: float, shared: bool = False, norm: tuple | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, list[Launch], tuple]:
    """h (T, H), router weight (E, H), bias (E,) -> ids (T, K) int64, weights (T, K) fp32, the launch, and
    with `norm` the residual stream and the experts' input.

    shared: one more column K, id E with weight 1, for a shared expert run as expert E of the fused MoE.
    norm: (residual (T, H), norm weight (H,), eps): h is the attention's output, the router reads
    RMSNorm(residual + h) and returns (residual + h, that norm), each (T, H) in h's dtype
    (`reference.add_rms_norm`, a launch fewer than the norm's own)."""
    T, H = h.shape
    E = weight.shape[0]
    assert weight.shape == (E, H) and bias.shape == (E,), f"weight {tuple(weight.shape)} bias {tuple(bias.shape)}"
    assert E % n_group == 0 and 1 <= topk_group <= n_group and 1 <= top_k <= E, "routing sizes"
    cols = top_k + int(shared)
    ids = torch.empty(T, cols, dtype=torch.int64, device=h.device)  # (T, K [+ 1])
    weights = torch.empty(T, cols, dtype=torch.float32, device=h.device)  # (T, K [+ 1])
    res, nw, eps = norm if norm is not None else (h, h, 0.0)  # unread without a norm
    normed = tuple(torch.empty(T, H, dtype=h.dtype, device=h.device) for _ in range(2 if norm else 0))  # s, x
    assert norm is None or (res.shape == h.shape and res.dtype == h.dtype and nw.shape == (H,)
                            and h.stride(-1) == res.stride(-1) == 1), "norm: residual (T, H) like h, weight (H,)"
    # bf16 tensor-core products on a GPU; widened to fp32 (exact) under Triton's CPU interpreter, whose bf16
    # dots are wrong (as `fused_moe._scaled_dot`'s FP32_DOT)
    low = h.dtype == weight.dtype and h.dtype in (torch.bfloat16, torch.float16) and not knobs.runtime.interpret
    g_p2 = triton.next_power_of_2(n_group)
    s_p2 = max(triton.next_power_of_2(E // n_group), 16 // g_p2)  # at least 16 slots: tl.dot's smallest N
    s_out, n_out = normed or (h, h)  # never written without a norm
    launch = Launch(_route_kernel, (triton.cdiv(T, BLOCK_T),),
                    (h, weight, bias, ids, weights, res, nw, s_out, n_out, T, H, float(scale), float(eps),
                     *h.stride(), *weight.stride(), *ids.stride(), *weights.stride(), res.stride(0),
                     s_out.stride(0), n_out.stride(0)),
                    dict(N_GROUP=n_group, GROUP_SIZE=E // n_group, TOPK_GROUP=topk_group, TOP_K=top_k, G_P2=g_p2,
                         S_P2=s_p2, K_P2=triton.next_power_of_2(cols), BLOCK_T=BLOCK_T, BLOCK_K=BLOCK_K,
                         LOW_PRECISION_IN=low, SHARED=bool(shared), ADD_NORM=norm is not None, num_warps=4,
                         num_stages=3))
    return ids, weights, [launch], (() if norm is None else normed)


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
