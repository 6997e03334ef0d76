"""The MoE router in two Triton kernels: router logits, then sigmoid + group-limited top-k.

Reference: `llada.model.Router` (same contract: h (T, H) -> ids (T, K) int64, weights (T, K) fp32).
E experts in n_group groups of S = E / n_group; K experts per token; `bias` (E,) steers selection only.

    logits  = h @ W^T                          (T, E) fp32           `_logits_kernel`, grid over (T, E) tiles
    score   = sigmoid(logits);  biased = score + bias                `_topk_kernel`, one program per
    group   = sum of the 2 best biased scores in each group             BLOCK_T tokens, all E in
    keep      the topk_group best groups; the rest are -inf             registers as (BLOCK_T, G, S)
    ids     = top-K of biased over kept groups, best first
    weights = score[ids] / sum * routed_scaling_factor

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

from .launch import Launch, run

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit(do_not_specialize=["T"])  # one compile for every token count
def _logits_kernel(h_ptr, w_ptr, out_ptr, T, E, H,
                   stride_ht, stride_hk, stride_we, stride_wk, stride_ot, stride_oe,
                   BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                   LOW_PRECISION_IN: tl.constexpr):
    pid_t, pid_e = tl.program_id(0), tl.program_id(1)
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    experts = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
    acc = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        h = tl.load(h_ptr + tokens[:, None] * stride_ht + ks[None, :] * stride_hk,
                    mask=(tokens < T)[:, None] & (ks < H)[None, :], other=0.0)  # (BLOCK_T, BLOCK_K)
        w = tl.load(w_ptr + experts[:, None] * stride_we + ks[None, :] * stride_wk,
                    mask=(experts < E)[:, None] & (ks < H)[None, :], other=0.0)  # (BLOCK_E, BLOCK_K)
        if LOW_PRECISION_IN:  # bf16 x bf16 products are exact in the fp32 accumulator
            acc = tl.dot(h, tl.trans(w), acc)
        else:
            acc = tl.dot(h.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    tl.store(out_ptr + tokens[:, None] * stride_ot + experts[None, :] * stride_oe, acc,
             mask=(tokens < T)[:, None] & (experts < E)[None, :])


@triton.jit(do_not_specialize=["T"])
def _topk_kernel(logits_ptr, bias_ptr, ids_ptr, weights_ptr, T, scale,
                 stride_lt, stride_le, stride_it, stride_ik, stride_wt, stride_wk,
                 N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr, TOP_K: tl.constexpr,
                 G_P2: tl.constexpr, S_P2: tl.constexpr, K_P2: tl.constexpr, BLOCK_T: tl.constexpr):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = tokens < T
    g = tl.arange(0, G_P2)[None, :, None]
    s = tl.arange(0, S_P2)[None, None, :]
    valid = (g < N_GROUP) & (s < GROUP_SIZE) & t_ok[:, None, None]  # (BLOCK_T, G_P2, S_P2)
    expert = g * GROUP_SIZE + s
    score = tl.sigmoid(tl.load(logits_ptr + tokens[:, None, None] * stride_lt + expert * stride_le,
                               mask=valid, other=0.0))
    biased = score + tl.load(bias_ptr + expert, mask=valid, other=0.0).to(tl.float32)
    biased = tl.where(valid & (biased == biased), biased, NEG_INF)  # a NaN token picks in-range experts
    best = tl.max(biased, axis=2)  # group score: the two best biased scores of each group
    first = tl.argmax(biased, axis=2)
    second = tl.max(tl.where(s == first[:, :, None], NEG_INF, biased), axis=2)
    group_score = best + second  # (BLOCK_T, G_P2)
    groups = tl.arange(0, G_P2)[None, :]
    keep = groups < 0
    for _ in tl.static_range(TOPK_GROUP):
        chosen = tl.argmax(group_score, axis=1)[:, None]
        keep = keep | (groups == chosen)
        group_score = tl.where(groups == chosen, NEG_INF, group_score)
    flat = tl.reshape(tl.where(keep[:, :, None], biased, NEG_INF), (BLOCK_T, G_P2 * S_P2))
    flat_score = tl.reshape(score, (BLOCK_T, G_P2 * S_P2))
    slots = tl.arange(0, G_P2 * S_P2)[None, :]
    ks = tl.arange(0, K_P2)[None, :]
    ids = tl.zeros((BLOCK_T, K_P2), dtype=tl.int64)
    w = tl.zeros((BLOCK_T, K_P2), dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        pick = tl.argmax(flat, axis=1)[:, None]  # (BLOCK_T, 1) slot in the padded layout
        e = tl.minimum((pick // S_P2) * GROUP_SIZE + pick % S_P2, N_GROUP * GROUP_SIZE - 1)  # always < E
        ids = tl.where(ks == k, e.to(tl.int64), ids)
        w = tl.where(ks == k, tl.sum(tl.where(slots == pick, flat_score, 0.0), axis=1)[:, None], w)
        flat = tl.where(slots == pick, NEG_INF, flat)
    w = w / (tl.sum(w, axis=1)[:, None] + 1e-20) * scale
    out_ok = t_ok[:, None] & (ks < TOP_K)
    tl.store(ids_ptr + tokens[:, None] * stride_it + ks * stride_ik, ids, mask=out_ok)
    tl.store(weights_ptr + tokens[:, None] * stride_wt + ks * stride_wk, w, mask=out_ok)


def plan_route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
               topk_group: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, list[Launch]]:
    """h (T, H), router weight (E, H), bias (E,) -> ids (T, K) int64, weights (T, K) fp32, launches."""
    T, H = h.shape
    E = weight.shape[0]
    assert weight.shape == (E, H) and bias.shape == (E,), f"weight {tuple(weight.shape)} bias {tuple(bias.shape)}"
    assert E % n_group == 0 and 1 <= topk_group <= n_group and 1 <= top_k <= E, "routing sizes"
    logits = torch.empty(T, E, dtype=torch.float32, device=h.device)  # (T, E)
    ids = torch.empty(T, top_k, dtype=torch.int64, device=h.device)  # (T, K)
    weights = torch.empty(T, top_k, dtype=torch.float32, device=h.device)  # (T, K)
    low = h.dtype == weight.dtype and h.dtype in (torch.bfloat16, torch.float16)
    block_t, block_e = 16, 64
    logits_launch = Launch(_logits_kernel, (triton.cdiv(T, block_t), triton.cdiv(E, block_e)),
                           (h, weight, logits, T, E, H, *h.stride(), *weight.stride(), *logits.stride()),
                           dict(BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_K=64, LOW_PRECISION_IN=low,
                                num_warps=4, num_stages=3))
    size = E // n_group
    topk_launch = Launch(_topk_kernel, (triton.cdiv(T, 4),),
                         (logits, bias, ids, weights, T, float(scale), *logits.stride(), *ids.stride(),
                          *weights.stride()),
                         dict(N_GROUP=n_group, GROUP_SIZE=size, TOPK_GROUP=topk_group, TOP_K=top_k,
                              G_P2=triton.next_power_of_2(n_group), S_P2=triton.next_power_of_2(size),
                              K_P2=triton.next_power_of_2(top_k), BLOCK_T=4, num_warps=4))
    return ids, weights, [logits_launch, topk_launch]


def route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
          topk_group: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of `llada.model.Router.forward`: ids (T, K) int64 and weights (T, K) fp32."""
    ids, weights, launches = plan_route(h, weight, bias, top_k, n_group, topk_group, scale)
    run(launches)
    return ids, weights
