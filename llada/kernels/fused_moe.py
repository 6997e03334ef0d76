"""Fused MoE with FP8 block-scaled weights: grouped GEMMs over expert-sorted (token, expert) pairs.

Layout (E experts, T tokens, K experts per token, H hidden, I expert width, G = 128, S split-K):

    x            (T, H)        activations, quantized once per token: x_q fp8 (T, H), x_s (T, H/G)
    w13          (E, 2I, H)    fp8, gate rows then up rows;  w13_s (E, 2I/G, H/G)
    w2           (E, H, I)     fp8;                          w2_s  (E, H/G, I/G)
    sorted_pairs (P,)          pair p = t*K + k in expert order, runs padded to BLOCK_M (routing.py)

Five launches from routed ids to the output, none of them a fill, no host sync (graph-capturable):

    1. `_align_kernel` (routing.py)   sorted_pairs, block_expert
    2. `_act_kernel` (fp8.py)         x_q, x_s
    3. `_up_kernel`    tile = BLOCK_M pairs of one expert x BLOCK_N intermediate columns x one H slice.
       Gathers the pairs' token rows of x_q and runs the gate and the up GEMM side by side over its
       slice of H in 128-wide steps, scaling each step's fp32 product by the activation scales (one
       per pair) and the weight tile scales (one per row): acc += (a @ w^T) * a_s * w_s. Writes the
       fp32 pre-activations gate|up of its valid rows to gu (S, P, 2I).
    4. `_down_kernel`  tile = BLOCK_M pairs x BLOCK_N hidden columns. For each 128-wide step of I it
       sums the S slices of gate and up, forms h = silu(gate) * up, quantizes it per pair and group in
       registers (the scale the reference gets from `quantize_act_fp8(h)`), and multiplies by the
       w2 tile; the epilogue scales by the pair's routing weight and writes row p of y (T*K, H) fp32.
    5. `_ksum_kernel`  out[t] = sum_k y[t*K + k], cast to x.dtype (each pair row written exactly once,
       so nothing needs zeroing; the sum order is fixed, so results are deterministic).

Hopper. With fewer than 64 pairs per tile the GEMMs run swapped (SWAP_AB, see configs.py): the
weight tile (BLOCK_N, 128) is the MMA's A operand and the pairs' tile transposed its B operand, so
`tl.dot` lowers to `wgmma.m64n16k32.f32.e4m3.e4m3` at BLOCK_M 16 instead of an f16 `mma.sync` fed by
converted operands. The accumulator is then (BLOCK_N, BLOCK_M); `_rows` / `_cols` orient per-pair
and per-column vectors to match. Scales are loaded one step ahead (the next step's loads are issued
before this step's dot), so their latency hides behind the MMA; the weight and activation tiles are
pipelined by Triton (num_stages). Tiles whose expert is -1 return at once; padding rows carry the
sentinel T*K and are masked on load and store. A dense FP8 linear is `_linear_kernel`: the same
step over contiguous rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .configs import MoEConfig, choose_config
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
def _scaled_dot(a, a_s, w, w_s, SWAP_AB: tl.constexpr):
    """(a @ w^T) * a_s * w_s in fp32 for a (BLOCK_M, G) and w (BLOCK_N, G) fp8, oriented like acc."""
    if SWAP_AB:
        return tl.dot(w, tl.trans(a)) * w_s[:, None] * a_s[None, :]  # (BLOCK_N, BLOCK_M)
    else:
        return tl.dot(a, tl.trans(w)) * a_s[:, None] * w_s[None, :]  # (BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["num_pairs"])  # one compile for every token count
def _up_kernel(xq_ptr, xs_ptr, w_ptr, ws_ptr, gu_ptr, pairs_ptr, block_expert_ptr, num_pairs, H, I,
               stride_xm, stride_xk, stride_xsm, stride_xsk,
               stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk,
               stride_gs, stride_gm, stride_gn,
               TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
               SWAP_AB: tl.constexpr, GROUP: tl.constexpr):
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)  # int64: expert * stride may pass 2^31
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows of this tile
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    token = pair // TOP_K
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # intermediate columns: gate row c, up row I + c
    col_ok = cols < I
    steps = tl.cdiv(tl.cdiv(H, GROUP), SPLIT_K)
    last = tl.cdiv(H, GROUP) - 1
    g0 = pid_k * steps
    g1 = tl.minimum(g0 + steps, last + 1)  # this slice's 128-wide steps of H (none when g0 > last)
    w_gate = w_ptr + expert * stride_we + cols[:, None] * stride_wn  # (BLOCK_N, 1) row pointers
    w_up = w_gate + I * stride_wn
    s_gate = ws_ptr + expert * stride_wse + (cols // GROUP) * stride_wsn  # (BLOCK_N,) tile-scale rows
    s_up = ws_ptr + expert * stride_wse + ((cols + I) // GROUP) * stride_wsn
    first = tl.minimum(g0, last)  # scale indices are clamped, not masked: always in bounds
    a_s = tl.load(xs_ptr + token * stride_xsm + first * stride_xsk, mask=row_ok, other=0.0)
    sg = tl.load(s_gate + first * stride_wsk, mask=col_ok, other=0.0)
    su = tl.load(s_up + first * stride_wsk, mask=col_ok, other=0.0)
    gate = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(g0, g1):
        ks = g * GROUP + tl.arange(0, GROUP)
        k_ok = ks < H
        a = tl.load(xq_ptr + token[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_M, G) fp8
        w_mask = col_ok[:, None] & k_ok[None, :]
        wg = tl.load(w_gate + ks[None, :] * stride_wk, mask=w_mask, other=0.0)  # (BLOCK_N, G) fp8
        wu = tl.load(w_up + ks[None, :] * stride_wk, mask=w_mask, other=0.0)
        nxt = tl.minimum(g + 1, last)  # next step's scales, issued before this step's MMA
        a_s_next = tl.load(xs_ptr + token * stride_xsm + nxt * stride_xsk, mask=row_ok, other=0.0)
        sg_next = tl.load(s_gate + nxt * stride_wsk, mask=col_ok, other=0.0)
        su_next = tl.load(s_up + nxt * stride_wsk, mask=col_ok, other=0.0)
        gate += _scaled_dot(a, a_s, wg, sg, SWAP_AB)
        up += _scaled_dot(a, a_s, wu, su, SWAP_AB)
        a_s, sg, su = a_s_next, sg_next, su_next
    out = gu_ptr + pid_k * stride_gs + _rows(rows, SWAP_AB) * stride_gm + _cols(cols, SWAP_AB) * stride_gn
    ok = _rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB)
    tl.store(out, gate, mask=ok)
    tl.store(out + I * stride_gn, up, mask=ok)


@triton.jit
def _silu_mul_fp8(gu_ptr, rows, row_ok, ks, k_ok, I, stride_gs, stride_gm, stride_gn,
                  SPLIT_K: tl.constexpr, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    """h = silu(gate) * up over one 128-wide group of I, summed over the split slices, as fp8 + scale."""
    ptrs = gu_ptr + rows[:, None] * stride_gm + ks[None, :] * stride_gn  # (BLOCK_M, G)
    mask = row_ok[:, None] & k_ok[None, :]
    gate = tl.load(ptrs, mask=mask, other=0.0)
    up = tl.load(ptrs + I * stride_gn, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT_K):
        gate += tl.load(ptrs + s * stride_gs, mask=mask, other=0.0)
        up += tl.load(ptrs + s * stride_gs + I * stride_gn, mask=mask, other=0.0)
    h = gate * tl.sigmoid(gate) * up  # (BLOCK_M, G) fp32; masked entries are 0
    q, scale = quantize_rows(h, FP8_MAX, AMAX_FLOOR)  # per pair and group, like quantize_act_fp8(h)
    return q, tl.reshape(scale, (scale.shape[0],))


@triton.jit(do_not_specialize=["num_pairs"])
def _down_kernel(gu_ptr, w_ptr, ws_ptr, y_ptr, pairs_ptr, block_expert_ptr, route_w_ptr, num_pairs, N, I,
                 stride_gs, stride_gm, stride_gn,
                 stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk,
                 stride_ym, stride_yn, stride_rt, stride_rk,
                 TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                 SWAP_AB: tl.constexpr, GROUP: tl.constexpr, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows (gu is in expert order already)
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # hidden features
    col_ok = cols < N
    w_rows = w_ptr + expert * stride_we + cols[:, None] * stride_wn
    s_rows = ws_ptr + expert * stride_wse + (cols // GROUP) * stride_wsn
    w_s = tl.load(s_rows, mask=col_ok, other=0.0)
    steps = tl.cdiv(I, GROUP)
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, steps):
        ks = g * GROUP + tl.arange(0, GROUP)
        k_ok = ks < I
        w = tl.load(w_rows + ks[None, :] * stride_wk, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        w_s_next = tl.load(s_rows + tl.minimum(g + 1, steps - 1) * stride_wsk, mask=col_ok, other=0.0)
        a, a_s = _silu_mul_fp8(gu_ptr, rows, row_ok, ks, k_ok, I, stride_gs, stride_gm, stride_gn,
                               SPLIT_K, FP8_MAX, AMAX_FLOOR)
        acc += _scaled_dot(a, a_s, w, w_s, SWAP_AB)
        w_s = w_s_next
    route_w = tl.load(route_w_ptr + (pair // TOP_K) * stride_rt + (pair % TOP_K) * stride_rk,
                      mask=row_ok, other=0.0).to(tl.float32)
    out = y_ptr + _rows(pair.to(tl.int64), SWAP_AB) * stride_ym + _cols(cols, SWAP_AB) * stride_yn
    tl.store(out, acc * _rows(route_w, SWAP_AB), mask=_rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB))


@triton.jit
def _ksum_kernel(y_ptr, out_ptr, H, stride_ym, stride_yn, stride_ot, stride_oh,
                 TOP_K: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = cols < H
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for k in tl.static_range(TOP_K):  # fixed order: deterministic
        acc += tl.load(y_ptr + (t * TOP_K + k) * stride_ym + cols * stride_yn, mask=ok, other=0.0)
    tl.store(out_ptr + t * stride_ot + cols * stride_oh, acc.to(out_ptr.dtype.element_ty), mask=ok)


def _check(x, w13, w13_scale, w2, w2_scale, ids, weights) -> None:
    T, H = x.shape
    E, I2, _ = w13.shape
    I = I2 // 2
    assert w13.dtype == FP8 and w2.dtype == FP8, "expert weights must be float8_e4m3fn"
    assert w13.shape == (E, 2 * I, H) and w2.shape == (E, H, I), f"w13 {tuple(w13.shape)} w2 {tuple(w2.shape)}"
    assert w13_scale.shape == (E, triton.cdiv(2 * I, GROUP), triton.cdiv(H, GROUP)), "w13_scale shape"
    assert w2_scale.shape == (E, triton.cdiv(H, GROUP), triton.cdiv(I, GROUP)), "w2_scale shape"
    assert ids.shape == weights.shape and ids.shape[0] == T, "ids and weights must both be (T, K)"


def plan_fused_moe(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                   w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                   config: MoEConfig | None = None) -> tuple[torch.Tensor, list[Launch]]:
    """The output buffer (T, H) in x.dtype and the five launches that fill it (see module doc)."""
    _check(x, w13, w13_scale, w2, w2_scale, ids, weights)
    (T, H), (E, I2, _), K = x.shape, w13.shape, ids.shape[1]
    I = I2 // 2
    cfg = config or choose_config(T, H, I, E, K, _device_name(x.device), _sms(x.device))
    pairs, block_expert, align = plan_sort_by_expert(ids, E, cfg.block_m)  # (P,), (P / BLOCK_M,)
    x_q, x_s, quant = plan_quantize_act(x)  # (T, H) fp8, (T, H/G)
    gu = torch.empty(cfg.up_split_k, pairs.numel(), 2 * I, dtype=torch.float32, device=x.device)  # (S, P, 2I)
    y = torch.empty(T * K, H, dtype=torch.float32, device=x.device)  # one weighted row per pair
    out = torch.empty(T, H, dtype=x.dtype, device=x.device)
    tiles = block_expert.numel()
    up = Launch(_up_kernel, (tiles, triton.cdiv(I, cfg.up_n), cfg.up_split_k),
                (x_q, x_s, w13, w13_scale, gu, pairs, block_expert, T * K, H, I, *x_q.stride(), *x_s.stride(),
                 *w13.stride(), *w13_scale.stride(), *gu.stride()),
                dict(TOP_K=K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.up_n, SPLIT_K=cfg.up_split_k,
                     SWAP_AB=cfg.swap_ab, GROUP=GROUP, num_warps=cfg.up_warps, num_stages=cfg.up_stages))
    down = Launch(_down_kernel, (tiles, triton.cdiv(H, cfg.down_n)),
                  (gu, w2, w2_scale, y, pairs, block_expert, weights, T * K, H, I, *gu.stride(), *w2.stride(),
                   *w2_scale.stride(), *y.stride(), *weights.stride()),
                  dict(TOP_K=K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.down_n, SPLIT_K=cfg.up_split_k,
                       SWAP_AB=cfg.swap_ab, GROUP=GROUP, FP8_MAX=FP8_MAX, AMAX_FLOOR=AMAX_FLOOR,
                       num_warps=cfg.down_warps, num_stages=cfg.down_stages))
    ksum = Launch(_ksum_kernel, (T, triton.cdiv(H, 1024)), (y, out, H, *y.stride(), *out.stride()),
                  dict(TOP_K=K, BLOCK_H=1024, num_warps=4))
    return out, [*align, *quant, up, down, ksum]


def fused_moe_fp8(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                  w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                  config: MoEConfig | None = None) -> torch.Tensor:
    """Routed experts with FP8 weights: x (T, H), ids (T, K), weights (T, K) -> (T, H) in x.dtype."""
    if x.shape[0] == 0:
        _check(x, w13, w13_scale, w2, w2_scale, ids, weights)
        return torch.empty_like(x)
    out, launches = plan_fused_moe(x, w13, w13_scale, w2, w2_scale, ids, weights, config)
    run(launches)
    return out


@triton.jit(do_not_specialize=["M"])
def _linear_kernel(xq_ptr, xs_ptr, w_ptr, ws_ptr, y_ptr, M, N, K,
                   stride_xm, stride_xk, stride_xsm, stride_xsk, stride_wn, stride_wk, stride_wsn, stride_wsk,
                   stride_ym, stride_yn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SWAP_AB: tl.constexpr, GROUP: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < M, cols < N
    steps = tl.cdiv(K, GROUP)
    a_s = tl.load(xs_ptr + rows * stride_xsm, mask=row_ok, other=0.0)
    w_s = tl.load(ws_ptr + (cols // GROUP) * stride_wsn, mask=col_ok, other=0.0)
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, steps):
        ks = g * GROUP + tl.arange(0, GROUP)
        k_ok = ks < K
        a = tl.load(xq_ptr + rows[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_M, G) fp8
        w = tl.load(w_ptr + cols[:, None] * stride_wn + ks[None, :] * stride_wk,
                    mask=col_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_N, G) fp8
        nxt = tl.minimum(g + 1, steps - 1)  # clamped: the last step reloads its own scales
        a_s_next = tl.load(xs_ptr + rows * stride_xsm + nxt * stride_xsk, mask=row_ok, other=0.0)
        w_s_next = tl.load(ws_ptr + (cols // GROUP) * stride_wsn + nxt * stride_wsk, mask=col_ok, other=0.0)
        acc += _scaled_dot(a, a_s, w, w_s, SWAP_AB)
        a_s, w_s = a_s_next, w_s_next
    out = y_ptr + _rows(rows, SWAP_AB) * stride_ym + _cols(cols, SWAP_AB) * stride_yn
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=_rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB))


def plan_fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, list[Launch]]:
    """x (..., K) @ fp8 w (N, K)^T: the output (..., N) in x.dtype and its two launches."""
    N, K = w.shape
    assert w.dtype == FP8 and x.shape[-1] == K, f"x {tuple(x.shape)} vs w {tuple(w.shape)}"
    assert w_scale.shape == (triton.cdiv(N, GROUP), triton.cdiv(K, GROUP)), "w_scale shape"
    flat = x.reshape(-1, K)
    M = flat.shape[0]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    a_q, a_s, quant = plan_quantize_act(flat)
    block_m = 16 if M <= 16 else 32 if M <= 32 else 64
    swap = block_m < 64
    block_n = 64 if swap else 128
    gemm = Launch(_linear_kernel, (triton.cdiv(M, block_m), triton.cdiv(N, block_n)),
                  (a_q, a_s, w, w_scale, y, M, N, K, *a_q.stride(), *a_s.stride(), *w.stride(), *w_scale.stride(),
                   *y.stride()),
                  dict(BLOCK_M=block_m, BLOCK_N=block_n, SWAP_AB=swap, GROUP=GROUP, num_warps=4,
                       num_stages=4 if swap else 3))
    return y.view(*x.shape[:-1], N), [*quant, gemm]


def fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ fp8 w (N, K)^T -> (..., N) in x.dtype; activations quantized per token group."""
    if x.numel() == 0:
        return torch.empty(*x.shape[:-1], w.shape[0], dtype=x.dtype, device=x.device)
    y, launches = plan_fp8_linear(x, w, w_scale)
    run(launches)
    return y


def _device_name(device: torch.device) -> str | None:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def _sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132
