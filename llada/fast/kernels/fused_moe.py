"""Fused MoE: grouped GEMMs over expert-sorted (token, expert) pairs, FP8 block-scaled or bf16 weights.

Layout (E experts, T tokens, K experts per token, H hidden, I expert width, G = 128, S split-K):

    x            (T, H)        activations; with FP8 weights quantized once per token: x_q fp8, x_s (T, H/G)
    w13          (E, 2I, H)    gate rows then up rows; FP8: w13_s (E, 2I/G, H/G)
    w2           (E, H, I)     FP8: w2_s (E, H/G, I/G)
    sorted_pairs (P,)          pair p = t*K + k in expert order, runs padded to BLOCK_M (routing.py)

The launches from routed ids to the output, none of them a fill, no host sync (graph-capturable):

    1. `_align_kernel` (routing.py)   sorted_pairs, block_expert
    2. `_act_kernel` (fp8.py)         x_q, x_s                       (FP8 weights only)
    3. `_up_kernel`    tile = BLOCK_M pairs of one expert x BLOCK_N intermediate columns x one H slice.
       Gathers the pairs' token rows of x and runs the gate and the up GEMM side by side over its
       slice of H in 128-wide steps; with FP8 each step's fp32 product is scaled by the activation
       scales (one per pair) and the weight tile scales (one per row): acc += (a @ w^T) * a_s * w_s.
       Writes the fp32 pre-activations gate|up of its valid rows to gu (S, P, 2I); with bf16 weights
       and no split-K (S = 1: the tile has seen all of H) h = silu(gate) * up itself, and step 4 is gone.
    4. `_silu_kernel`  tile = BLOCK_M rows x one 128-wide group of I: sums the S slices, forms
       h = silu(gate) * up once, and writes it in padded-row order: FP8 codes + one scale per row and
       group (exactly `quantize_act_fp8(h)`), or h in the weights' dtype.
    5. `_down_kernel`  tile = BLOCK_M rows x BLOCK_N hidden columns: the same K loop as the up GEMM
       over h (contiguous rows, no gather); the epilogue scales by the pair's routing weight and
       writes row p of y (T*K, H) fp32.
    6. `_ksum_kernel`  out[t] = sum_k y[t*K + k], cast to x.dtype (each pair row written exactly once,
       so nothing needs zeroing; the sum order is fixed, so results are deterministic); then, where
       the caller passes them (`adds`), the shared expert's output and the residual stream, each
       sum rounded to x.dtype as `(out + shared) + x` is: two launches fewer per MoE layer. With
       `norm`, one program per token also writes the next sublayer's RMSNorm of its output.

The shared expert (`shared`, bf16 weights) runs as expert E: the router gives every token one more
column (id E, weight 1), so ids are (T, K + 1), the sort places its T pairs like any expert's, the
GEMMs read its own (2I, H) and (H, I) tensors where a tile's expert is E (`_expert_weight`: no copy
of the stacked weights), and the k-sum rounds its row before adding it, as `out + shared` rounds.

Why step 4 is its own pass with FP8 weights or split-K: the down GEMM's tiles split H into H / BLOCK_N
column blocks, and each of them needs all of h. Computing silu and the FP8 re-quantization inside the
down kernel (the first design) repeated it H / BLOCK_N = 32 times per row at the mini's shape, ~40
instructions per element against one tensor-core instruction per 128-wide step: instruction-bound.
The pass reads 8 KB of gu and writes 1 KB of h per pair, once (docs/gpu.md, "Per-kernel estimates"). The
gate/up tile holds the gate and up columns of the same rows, so without split-K it forms h itself;
the FP8 quantizer wants one scale per 128-wide group, wider than a 64-column tile: FP8 keeps the pass.

Hopper. With fewer than 64 pairs per tile the GEMMs run swapped (SWAP_AB, see configs.py): the
weight tile (BLOCK_N, 128) is the MMA's A operand and the pairs' tile transposed its B operand, so
`tl.dot` lowers to `wgmma.m64n16k32.f32.e4m3.e4m3` at BLOCK_M 16 instead of an f16 `mma.sync` fed by
converted operands. The accumulator is then (BLOCK_N, BLOCK_M); `_rows` / `_cols` orient per-pair
and per-column vectors to match. Scales are loaded one step ahead (the next step's loads are issued
before this step's dot), so their latency hides behind the MMA; the weight and activation tiles are
pipelined by Triton (num_stages). Tiles whose expert is -1 return at once; padding rows carry the
sentinel T*K and are masked on load and store. Without FP8 (sm80 / sm86, or bf16 weights chosen)
the same kernels run with SCALED = False: bf16 operands, `mma.sync` bf16 on sm80, no scales.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton import knobs

from .configs import MoEConfig, choose_config, fit_config
from .fp8 import plan_quantize_act, quantize_rows
from .launch import Launch, run
from .reference import AMAX_FLOOR, FP8, FP8_MAX, GROUP
from .routing import plan_sort_by_expert


@triton.jit
def _rows(v, SWAP_AB: tl.constexpr):
    """A per-pair vector (BLOCK_M,) as an accumulator axis: pairs run along dim 1 when swapped."""
    if SWAP_AB:
        return v[None, :]
    else:
        return v[:, None]


@triton.jit
def _cols(v, SWAP_AB: tl.constexpr):
    """A per-column vector (BLOCK_N,) as an accumulator axis."""
    if SWAP_AB:
        return v[:, None]
    else:
        return v[None, :]


@triton.jit
def _scaled_dot(a, a_s, w, w_s, SWAP_AB: tl.constexpr, SCALED: tl.constexpr, FP32_DOT: tl.constexpr = False):
    """(a @ w^T) [* a_s * w_s] in fp32 for a (BLOCK_M, G) and w (BLOCK_N, G), oriented like acc.

    FP32_DOT: operands widened to fp32 and multiplied in IEEE fp32: fp32 weights (no TF32 rounding)
    and Triton 3.9's CPU interpreter, which multiplies bf16 dots wrongly (widening bf16 is exact)."""
    if FP32_DOT:
        a, w = a.to(tl.float32), w.to(tl.float32)
        if SWAP_AB:
            acc = tl.dot(w, tl.trans(a), input_precision="ieee")  # (BLOCK_N, BLOCK_M)
        else:
            acc = tl.dot(a, tl.trans(w), input_precision="ieee")  # (BLOCK_M, BLOCK_N)
    elif SWAP_AB:
        acc = tl.dot(w, tl.trans(a))  # (BLOCK_N, BLOCK_M)
    else:
        acc = tl.dot(a, tl.trans(w))  # (BLOCK_M, BLOCK_N)
    if SCALED:
        acc = acc * _cols(w_s, SWAP_AB) * _rows(a_s, SWAP_AB)
    return acc


@triton.jit
def _scales(ptrs, mask, SCALED: tl.constexpr):
    """One fp32 scale per row of a tile (FP8), or zeros that `_scaled_dot` never reads (no load)."""
    if SCALED:
        return tl.load(ptrs, mask=mask, other=0.0)
    else:
        return tl.zeros(ptrs.shape, tl.float32)


@triton.jit
def _expert_weight(w_ptr, shared_ptr, expert, E, stride_we, stride_wn, stride_wk, stride_sn, stride_sk,
                   SHARED: tl.constexpr):
    """Base pointer, row and column strides of `expert`'s weight; with SHARED, id E is the shared expert's own
    (2-D) tensor, so that it runs as one more expert of the grouped GEMM."""
    if SHARED:
        own = expert == E
        return (tl.where(own, shared_ptr, w_ptr + expert * stride_we), tl.where(own, stride_sn, stride_wn),
                tl.where(own, stride_sk, stride_wk))
    else:
        return w_ptr + expert * stride_we, stride_wn, stride_wk


@triton.jit(do_not_specialize=["num_pairs"])  # one compile for every token count
def _up_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, sw_ptr, gu_ptr, pairs_ptr, block_expert_ptr, num_pairs, H, I, E,
               stride_xm, stride_xk, stride_xsm, stride_xsk,
               stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk, stride_sn, stride_sk,
               stride_gs, stride_gm, stride_gn,
               TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
               SWAP_AB: tl.constexpr, GROUP: tl.constexpr, SCALED: tl.constexpr, FP32_DOT: tl.constexpr,
               SHARED: tl.constexpr, ACT: tl.constexpr):
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)  # int64: expert * stride may pass 2^31
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows of this tile
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    token = tl.where(row_ok, pair // TOP_K, 0)  # padding rows read row 0 (masked anyway): never out of range
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # intermediate columns: gate row c, up row I + c
    col_ok = cols < I
    steps = tl.cdiv(tl.cdiv(H, GROUP), SPLIT_K)
    last = tl.cdiv(H, GROUP) - 1
    g0 = pid_k * steps
    g1 = tl.minimum(g0 + steps, last + 1)  # this slice's 128-wide steps of H (none when g0 > last)
    w_e, stride_n, stride_k = _expert_weight(w_ptr, sw_ptr, expert, E, stride_we, stride_wn, stride_wk,
                                             stride_sn, stride_sk, SHARED)
    w_gate = w_e + cols[:, None] * stride_n  # (BLOCK_N, 1) row pointers
    w_up = w_gate + I * stride_n
    s_gate = ws_ptr + expert * stride_wse + (cols // GROUP) * stride_wsn  # (BLOCK_N,) tile-scale rows
    s_up = ws_ptr + expert * stride_wse + ((cols + I) // GROUP) * stride_wsn
    first = tl.minimum(g0, last)  # scale indices are clamped, not masked: always in bounds
    a_s = _scales(xs_ptr + token * stride_xsm + first * stride_xsk, row_ok, SCALED)
    sg = _scales(s_gate + first * stride_wsk, col_ok, SCALED)
    su = _scales(s_up + first * stride_wsk, col_ok, SCALED)
    gate = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        ks = g * GROUP + tl.arange(0, GROUP)
        k_ok = ks < H
        w_mask = col_ok[:, None] & k_ok[None, :]
        wg = tl.load(w_gate + ks[None, :] * stride_k, mask=w_mask, other=0.0)  # (BLOCK_N, G)
        wu = tl.load(w_up + ks[None, :] * stride_k, mask=w_mask, other=0.0)
        a = tl.load(x_ptr + token[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(wg.dtype)  # (BLOCK_M, G)
        nxt = tl.minimum(g + 1, last)  # next step's scales, issued before this step's MMA
        a_s_next = _scales(xs_ptr + token * stride_xsm + nxt * stride_xsk, row_ok, SCALED)
        sg_next = _scales(s_gate + nxt * stride_wsk, col_ok, SCALED)
        su_next = _scales(s_up + nxt * stride_wsk, col_ok, SCALED)
        gate += _scaled_dot(a, a_s, wg, sg, SWAP_AB, SCALED, FP32_DOT)
        up += _scaled_dot(a, a_s, wu, su, SWAP_AB, SCALED, FP32_DOT)
        a_s, sg, su = a_s_next, sg_next, su_next
    out = gu_ptr + pid_k * stride_gs + _rows(rows, SWAP_AB) * stride_gm + _cols(cols, SWAP_AB) * stride_gn
    ok = _rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB)
    if ACT:  # the whole H in this tile: h = silu(gate) * up straight into h (P, I), no gu and no second pass
        tl.store(out, (gate * tl.sigmoid(gate) * up).to(gu_ptr.dtype.element_ty), mask=ok)
    else:
        tl.store(out, gate, mask=ok)
        tl.store(out + I * stride_gn, up, mask=ok)


@triton.jit(do_not_specialize=["num_pairs"])
def _silu_kernel(gu_ptr, h_ptr, hs_ptr, pairs_ptr, block_expert_ptr, num_pairs, I,
                 stride_gs, stride_gm, stride_gn, stride_hm, stride_hk, stride_hsm, stride_hsk,
                 BLOCK_M: tl.constexpr, SPLIT_K: tl.constexpr, GROUP: tl.constexpr, QUANT: tl.constexpr,
                 FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    """h = silu(gate) * up for BLOCK_M padded rows and one group of I, summed over the S slices."""
    pid_m, grp = tl.program_id(0), tl.program_id(1)
    if tl.load(block_expert_ptr + pid_m) < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = tl.load(pairs_ptr + rows) < num_pairs
    ks = grp * GROUP + tl.arange(0, GROUP)
    mask = row_ok[:, None] & (ks < I)[None, :]
    ptrs = gu_ptr + rows[:, None] * stride_gm + ks[None, :] * stride_gn  # (BLOCK_M, G)
    gate = tl.load(ptrs, mask=mask, other=0.0)
    up = tl.load(ptrs + I * stride_gn, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        gate += tl.load(ptrs + s * stride_gs, mask=mask, other=0.0)
        up += tl.load(ptrs + s * stride_gs + I * stride_gn, mask=mask, other=0.0)
    h = gate * tl.sigmoid(gate) * up  # (BLOCK_M, G) fp32; masked entries are 0
    out = h_ptr + rows[:, None] * stride_hm + ks[None, :] * stride_hk
    if QUANT:
        q, scale = quantize_rows(h, FP8_MAX, AMAX_FLOOR)  # per row and group, like quantize_act_fp8(h)
        tl.store(out, q, mask=mask)
        tl.store(hs_ptr + rows[:, None] * stride_hsm + grp * stride_hsk, scale, mask=row_ok[:, None])
    else:
        tl.store(out, h.to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["num_pairs"])
def _down_kernel(h_ptr, hs_ptr, w_ptr, ws_ptr, sw_ptr, y_ptr, pairs_ptr, block_expert_ptr, route_w_ptr, num_pairs,
                 N, I, E, stride_hm, stride_hk, stride_hsm, stride_hsk,
                 stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk, stride_sn, stride_sk,
                 stride_ym, stride_yn, stride_rt, stride_rk,
                 TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 SWAP_AB: tl.constexpr, GROUP: tl.constexpr, SCALED: tl.constexpr, FP32_DOT: tl.constexpr,
                 SHARED: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows (h is in expert order already)
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # hidden features
    col_ok = cols < N
    w_e, stride_n, stride_k = _expert_weight(w_ptr, sw_ptr, expert, E, stride_we, stride_wn, stride_wk,
                                             stride_sn, stride_sk, SHARED)
    w_rows = w_e + cols[:, None] * stride_n
    s_rows = ws_ptr + expert * stride_wse + (cols // GROUP) * stride_wsn
    a_rows = h_ptr + rows[:, None] * stride_hm
    steps = tl.cdiv(I, GROUP)
    w_s = _scales(s_rows, col_ok, SCALED)
    a_s = _scales(hs_ptr + rows * stride_hsm, row_ok, SCALED)
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, steps):
        ks = g * GROUP + tl.arange(0, GROUP)
        k_ok = ks < I
        w = tl.load(w_rows + ks[None, :] * stride_k, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        a = tl.load(a_rows + ks[None, :] * stride_hk, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        nxt = tl.minimum(g + 1, steps - 1)
        w_s_next = _scales(s_rows + nxt * stride_wsk, col_ok, SCALED)
        a_s_next = _scales(hs_ptr + rows * stride_hsm + nxt * stride_hsk, row_ok, SCALED)
        acc += _scaled_dot(a, a_s, w, w_s, SWAP_AB, SCALED, FP32_DOT)
        w_s, a_s = w_s_next, a_s_next
    safe = tl.where(row_ok, pair, 0)  # padding rows carry the sentinel T*K: never used as an index
    route_w = tl.load(route_w_ptr + (safe // TOP_K) * stride_rt + (safe % TOP_K) * stride_rk,
                      mask=row_ok, other=0.0).to(tl.float32)
    out = y_ptr + _rows(safe.to(tl.int64), SWAP_AB) * stride_ym + _cols(cols, SWAP_AB) * stride_yn
    tl.store(out, acc * _rows(route_w, SWAP_AB), mask=_rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB))


@triton.jit
def _ksum_kernel(y_ptr, out_ptr, a1_ptr, a2_ptr, nw_ptr, n_ptr, H, eps, stride_ym, stride_yn, stride_ot, stride_oh,
                 stride_a1, stride_a2, stride_n,
                 TOP_K: tl.constexpr, SHARED: tl.constexpr, ADDS: tl.constexpr, NORM: tl.constexpr,
                 BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = cols < H
    rows = y_ptr + t * TOP_K * stride_ym + cols * stride_yn  # (BLOCK_H,) the token's first pair row
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for k in tl.static_range(TOP_K - SHARED):  # the routed experts, in a fixed order: deterministic
        acc += tl.load(rows + k * stride_ym, mask=ok, other=0.0)
    out = acc.to(out_ptr.dtype.element_ty)
    if SHARED:  # the shared expert's row (weight 1), rounded, then added as `out + shared` rounds
        shared = tl.load(rows + (TOP_K - 1) * stride_ym, mask=ok, other=0.0).to(out_ptr.dtype.element_ty)
        out = (out.to(tl.float32) + shared.to(tl.float32)).to(out_ptr.dtype.element_ty)
    if ADDS >= 1:  # (out + shared expert) + residual, each sum rounded as the plain ops round it
        out = (out.to(tl.float32) + tl.load(a1_ptr + t * stride_a1 + cols, mask=ok, other=0.0).to(tl.float32)
               ).to(out_ptr.dtype.element_ty)
    if ADDS >= 2:
        out = (out.to(tl.float32) + tl.load(a2_ptr + t * stride_a2 + cols, mask=ok, other=0.0).to(tl.float32)
               ).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + t * stride_ot + cols * stride_oh, out, mask=ok)
    if NORM:  # the whole row is here (BLOCK_H >= H): the next sublayer's RMSNorm of it, rounded as the model's
        of = out.to(tl.float32)  # masked columns are 0
        r = 1.0 / tl.sqrt(tl.sum(of * of, axis=0) / H + eps)
        w = tl.load(nw_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        normed = (w * (of * r).to(out_ptr.dtype.element_ty).to(tl.float32)).to(out_ptr.dtype.element_ty)
        tl.store(n_ptr + t * stride_n + cols, normed, mask=ok)


def _check(x, w13, w13_scale, w2, w2_scale, ids, weights) -> None:
    T, H = x.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    assert w13.shape == (E, 2 * I, H) and w2.shape == (E, H, I), f"w13 {tuple(w13.shape)} w2 {tuple(w2.shape)}"
    assert ids.shape == weights.shape and ids.shape[0] == T, "ids and weights must both be (T, K)"
    if w13_scale is None:
        assert w13.dtype == w2.dtype and w13.dtype != FP8, "unscaled expert weights must share a float dtype"
        return
    assert w13.dtype == FP8 and w2.dtype == FP8, "expert weights must be float8_e4m3fn"
    assert w13_scale.shape == (E, triton.cdiv(2 * I, GROUP), triton.cdiv(H, GROUP)), "w13_scale shape"
    assert w2_scale.shape == (E, triton.cdiv(H, GROUP), triton.cdiv(I, GROUP)), "w2_scale shape"


def _check_shared(w13: torch.Tensor, w13_scale, shared, ids: torch.Tensor) -> None:
    E, I2, H = w13.shape
    assert w13_scale is None, "the shared expert runs in the grouped GEMM with unquantized weights only"
    s13, s2 = shared
    assert s13.shape == (I2, H) and s2.shape == (H, I2 // 2) and s13.dtype == s2.dtype == w13.dtype, \
        f"shared weights (2I, H), (H, I) like one expert's, got {tuple(s13.shape)} {tuple(s2.shape)}"
    assert ids.shape[1] >= 2, "with a shared expert ids are (T, K + 1), the last column its id E"


def plan_fused_moe(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor | None, w2: torch.Tensor,
                   w2_scale: torch.Tensor | None, ids: torch.Tensor, weights: torch.Tensor,
                   config: MoEConfig | None = None, adds: tuple = (), shared: tuple | None = None,
                   norm: tuple | None = None) -> tuple[torch.Tensor | tuple, list[Launch]]:
    """The output buffer (T, H) in x.dtype and the launches that fill it (see module doc).

    FP8 weights come with their tile scales; unquantized weights (bf16) pass None for both scales.
    `adds`: up to two (T, H) tensors in x.dtype the k-sum adds to the result, one rounding each.
    `shared`: the shared expert's (2I, H) gate|up and (H, I) down weights, run as expert E: then ids and
    weights are (T, K + 1) with id E, weight 1 in the last column (the router writes them so).
    `norm`: (weight (H,), eps): the output is (out, RMSNorm(out)), the next sublayer's input made by the k-sum.
    `config`, when given, is fitted to the device like the chosen one (`configs.fit_config`: fewer stages,
    then narrower tiles), so a table written for a larger GPU never launches a kernel that cannot load."""
    _check(x, w13, w13_scale, w2, w2_scale, ids, weights)
    if shared is not None:
        _check_shared(w13, w13_scale, shared, ids)
    assert len(adds) <= 2 and all(a.shape == x.shape and a.dtype == x.dtype and a.stride(-1) == 1
                                  for a in adds), "adds: up to two (T, H) tensors like x, unit last stride"
    (T, H), (E, I2, _), K = x.shape, w13.shape, ids.shape[1]
    I, scaled, n_shared = I2 // 2, w13_scale is not None, int(shared is not None)
    fp32_dot = not scaled and (w13.dtype == torch.float32 or knobs.runtime.interpret)  # see _scaled_dot
    spec, fp32 = device_spec(x.device), w13.dtype == torch.float32
    cfg = (fit_config(config, spec, scaled, fp32=fp32) if config is not None  # a caller's tiles fit the device too
           else choose_config(T, H, I, E + n_shared, K, spec, fp8=scaled, fp32=fp32))
    pairs, block_expert, align = plan_sort_by_expert(ids, E + n_shared, cfg.block_m)  # (P,), (P / BLOCK_M,)
    act = not scaled and cfg.up_split_k == 1  # silu(gate) * up in the gate/up GEMM's epilogue
    s13, s2 = shared if shared is not None else (w13[0], w2[0])  # unread without a shared expert
    a, a_s, quant, h, h_s, w13_scale, w2_scale = _operands(x, w13, w13_scale, w2, w2_scale, pairs.numel())
    gu = h[None] if act else torch.empty(cfg.up_split_k, pairs.numel(), 2 * I, dtype=torch.float32,
                                         device=x.device)  # (S, P, 2I), or h itself (1, P, I)
    y = torch.empty(T * K, H, dtype=torch.float32, device=x.device)  # one weighted row per pair
    out = torch.empty(T, H, dtype=x.dtype, device=x.device)
    tiles = block_expert.numel()
    up = Launch(_up_kernel, (tiles, triton.cdiv(I, cfg.up_n), cfg.up_split_k),
                (a, a_s, w13, w13_scale, s13, gu, pairs, block_expert, T * K, H, I, E, *a.stride(), *a_s.stride(),
                 *w13.stride(), *w13_scale.stride(), *s13.stride(), *gu.stride()),
                dict(TOP_K=K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.up_n, SPLIT_K=cfg.up_split_k,
                     SWAP_AB=cfg.swap_ab, GROUP=GROUP, SCALED=scaled, FP32_DOT=fp32_dot, SHARED=bool(n_shared),
                     ACT=act, num_warps=cfg.up_warps, num_stages=cfg.up_stages))
    silu = [] if act else [Launch(
        _silu_kernel, (tiles, triton.cdiv(I, GROUP)),
        (gu, h, h_s, pairs, block_expert, T * K, I, *gu.stride(), *h.stride(), *h_s.stride()),
        dict(BLOCK_M=cfg.block_m, SPLIT_K=cfg.up_split_k, GROUP=GROUP, QUANT=scaled, FP8_MAX=FP8_MAX,
             AMAX_FLOOR=AMAX_FLOOR, num_warps=4))]
    down = Launch(_down_kernel, (tiles, triton.cdiv(H, cfg.down_n)),
                  (h, h_s, w2, w2_scale, s2, y, pairs, block_expert, weights, T * K, H, I, E, *h.stride(),
                   *h_s.stride(), *w2.stride(), *w2_scale.stride(), *s2.stride(), *y.stride(), *weights.stride()),
                  dict(TOP_K=K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.down_n, SWAP_AB=cfg.swap_ab, GROUP=GROUP,
                       SCALED=scaled, FP32_DOT=fp32_dot, SHARED=bool(n_shared), num_warps=cfg.down_warps,
                       num_stages=cfg.down_stages))
    ksum, normed = _ksum(y, out, adds, norm, K, n_shared)
    return (out if norm is None else (out, normed)), [*align, *quant, up, *silu, down, ksum]


def _ksum(y: torch.Tensor, out: torch.Tensor, adds: tuple, norm: tuple | None, K: int, shared: int):
    """The k-sum's launch, and with `norm` = (weight (H,), eps) the RMSNorm of its output it also writes (T, H)."""
    (T, H), a1, a2 = out.shape, *(*adds, out, out)[:2]  # unread where there are fewer adds
    nw, eps = norm if norm is not None else (out, 0.0)
    normed = torch.empty_like(out) if norm is not None else out  # never written without a norm
    assert norm is None or nw.shape == (H,), f"norm weight must be (H,), got {tuple(nw.shape)}"
    block = triton.next_power_of_2(H) if norm is not None else 1024  # a norm needs the whole row in one program
    launch = Launch(_ksum_kernel, (T, triton.cdiv(H, block)),
                    (y, out, a1, a2, nw, normed, H, float(eps), *y.stride(), *out.stride(), a1.stride(0),
                     a2.stride(0), normed.stride(0)),
                    dict(TOP_K=K, SHARED=shared, ADDS=len(adds), NORM=norm is not None, BLOCK_H=block,
                         num_warps=4 if block <= 2048 else 8))
    return launch, normed


def _operands(x, w13, w13_scale, w2, w2_scale, P: int):
    """The GEMMs' activation operand and the intermediate h (P, I) in padded-row order: FP8 codes with their
    scales, or unquantized (then every scale pointer is any tensor: never read)."""
    I = w2.shape[-1]
    if w13_scale is not None:
        a, a_s, quant = plan_quantize_act(x)  # (T, H) fp8, (T, H/G)
        h = torch.empty(P, I, dtype=FP8, device=x.device)  # (P, I)
        h_s = torch.empty(P, triton.cdiv(I, GROUP), dtype=torch.float32, device=x.device)  # (P, I/G)
        return a, a_s, quant, h, h_s, w13_scale, w2_scale
    h = torch.empty(P, I, dtype=w13.dtype, device=x.device)  # (P, I)
    return x, x, [], h, h, w13, w2


def fused_moe_fp8(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                  w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                  config: MoEConfig | None = None, adds: tuple = ()) -> torch.Tensor:
    """Routed experts with FP8 weights: x (T, H), ids (T, K), weights (T, K) -> (T, H) in x.dtype [+ adds]."""
    if x.shape[0] == 0:
        _check(x, w13, w13_scale, w2, w2_scale, ids, weights)
        return torch.empty_like(x)
    out, launches = plan_fused_moe(x, w13, w13_scale, w2, w2_scale, ids, weights, config, tuple(adds))
    run(launches)
    return out


def fused_moe_bf16(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                   config: MoEConfig | None = None, adds: tuple = (), shared: tuple | None = None,
                   norm: tuple | None = None) -> torch.Tensor | tuple:
    """Routed experts with unquantized (bf16) weights, the same grouped GEMMs: (T, H) -> (T, H) in x.dtype
    [+ the shared expert, see `plan_fused_moe`] [+ adds] [, and its RMSNorm with `norm`]."""
    if x.shape[0] == 0:
        _check(x, w13, None, w2, None, ids, weights)
        return torch.empty_like(x) if norm is None else (torch.empty_like(x), torch.empty_like(x))
    out, launches = plan_fused_moe(x, w13, None, w2, None, ids, weights, config, tuple(adds), shared, norm)
    run(launches)
    return out


def device_spec(device: torch.device):
    """The `DeviceSpec` of a CUDA device (shared memory, SMs, FP8); None on CPU (the interpreter)."""
    from .devices import spec_of

    return spec_of(device) if device.type == "cuda" else None
