"""Fused MoE with FP8 block-scaled weights: two grouped GEMMs over expert-sorted (token, expert) pairs.

Layout (E experts, T tokens, K experts per token, H hidden, I expert width, G = 128):

    x            (T, H)        activations, quantized once per token: x_q fp8 (T, H), x_s (T, H/G)
    w13          (E, 2I, H)    fp8, gate rows then up rows;  w13_s (E, 2I/G, H/G)
    w2           (E, H, I)     fp8;                          w2_s  (E, H/G, I/G)
    sorted_pairs (P,)          pair p = t*K + k in expert order, tiles of BLOCK_M rows (see routing.py)

Stage 1, `_up_kernel`, tile (BLOCK_M pairs of one expert) x (G intermediate columns): gathers token
rows of x_q, runs the gate and the up GEMM side by side over H in steps of G, applying both scales
at each step, then silu(gate) * up in fp32 and quantizes the G-wide row group it just made:
h_q fp8 (P, I), h_s (P, I/G). Stage 2, `_down_kernel`, tile (BLOCK_M pairs) x (BLOCK_N hidden
columns): h_q @ w2[e]^T with the same per-step scaling, times the pair's routing weight in the
epilogue, written to row p of y (T*K, H) fp32. Finally out = y.view(T, K, H).sum(1) in x.dtype.

Tiles whose expert is -1 (past the last expert's run) return at once; padding rows carry the
sentinel pair T*K and are masked on load and store. A dense FP8 linear is the one-expert case of
stage 2 (`fp8_linear`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import quantize_act_fp8, quantize_tile
from .reference import AMAX_FLOOR, FP8, FP8_MAX, GROUP
from .routing import sort_by_expert


@triton.jit
def _scaled_step(acc, a, a_s, w_ptrs, w_s_ptrs, w_mask, col_ok):
    """acc += (a @ w) * a_s[:, None] * w_s[None, :]: one 128-wide K step in fp32."""
    w = tl.load(w_ptrs, mask=w_mask, other=0.0)  # (BLOCK_K, BLOCK_N) fp8
    w_s = tl.load(w_s_ptrs, mask=col_ok, other=0.0)  # (BLOCK_N,) one tile scale per column
    return acc + tl.dot(a, w) * a_s[:, None] * w_s[None, :]


@triton.jit
def _up_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, h_ptr, hs_ptr, pairs_ptr, block_expert_ptr,
               num_pairs, H, I,
               stride_xm, stride_xk, stride_xsm, stride_xsk,
               stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk,
               stride_hm, stride_hn, stride_hsm, stride_hsn,
               TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, GROUP: tl.constexpr,
               FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)  # int64: expert * stride may pass 2^31
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows of this tile
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    token = pair // TOP_K
    cols = pid_n * GROUP + tl.arange(0, GROUP)  # intermediate columns: gate row c, up row I + c
    col_ok = cols < I
    w_base = w_ptr + expert * stride_we
    s_base = ws_ptr + expert * stride_wse
    gate = tl.zeros((BLOCK_M, GROUP), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, GROUP), dtype=tl.float32)
    for k0 in range(0, H, GROUP):
        ks = k0 + tl.arange(0, GROUP)
        k_ok = ks < H
        a = tl.load(x_ptr + token[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_M, GROUP) fp8
        a_s = tl.load(xs_ptr + token * stride_xsm + (k0 // GROUP) * stride_xsk, mask=row_ok, other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        g_rows, u_rows = cols, cols + I
        gate = _scaled_step(gate, a, a_s, w_base + g_rows[None, :] * stride_wn + ks[:, None] * stride_wk,
                            s_base + (g_rows // GROUP) * stride_wsn + (k0 // GROUP) * stride_wsk, w_mask, col_ok)
        up = _scaled_step(up, a, a_s, w_base + u_rows[None, :] * stride_wn + ks[:, None] * stride_wk,
                          s_base + (u_rows // GROUP) * stride_wsn + (k0 // GROUP) * stride_wsk, w_mask, col_ok)
    h = gate * tl.sigmoid(gate) * up  # silu(gate) * up, (BLOCK_M, GROUP) fp32; masked columns are 0
    q, scale = quantize_tile(h, tl.max(tl.abs(h), axis=1)[:, None], FP8_MAX, AMAX_FLOOR)
    tl.store(h_ptr + rows[:, None] * stride_hm + cols[None, :] * stride_hn, q, mask=col_ok[None, :])
    tl.store(hs_ptr + rows[:, None] * stride_hsm + pid_n * stride_hsn, scale)


@triton.jit
def _down_kernel(a_ptr, as_ptr, w_ptr, ws_ptr, y_ptr, pairs_ptr, block_expert_ptr, route_w_ptr,
                 num_pairs, N, K,
                 stride_am, stride_ak, stride_asm, stride_ask,
                 stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsk,
                 stride_ym, stride_yn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)  # int64: expert * stride may pass 2^31
    if expert < 0:
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # padded rows of a (already in expert order)
    pair = tl.load(pairs_ptr + rows)
    row_ok = pair < num_pairs
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # output features
    col_ok = cols < N
    w_base = w_ptr + expert * stride_we
    s_base = ws_ptr + expert * stride_wse
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, GROUP):
        ks = k0 + tl.arange(0, GROUP)
        k_ok = ks < K
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_M, GROUP) fp8
        a_s = tl.load(as_ptr + rows * stride_asm + (k0 // GROUP) * stride_ask, mask=row_ok, other=0.0)
        acc = _scaled_step(acc, a, a_s, w_base + cols[None, :] * stride_wn + ks[:, None] * stride_wk,
                           s_base + (cols // GROUP) * stride_wsn + (k0 // GROUP) * stride_wsk,
                           k_ok[:, None] & col_ok[None, :], col_ok)
    acc = acc * tl.load(route_w_ptr + pair, mask=row_ok, other=0.0)[:, None]  # top-k weight epilogue
    tl.store(y_ptr + pair[:, None] * stride_ym + cols[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _block_m(num_pairs: int, num_experts: int) -> int:
    """Tile height: 16 (the smallest tl.dot) while experts see few rows, larger when they see many."""
    per_expert = num_pairs / num_experts
    return 16 if per_expert <= 16 else 32 if per_expert <= 64 else 64


def _launch_down(a_q, a_s, w, w_s, y, pairs, block_expert, route_w, block_m):
    N, K = w.shape[1], w.shape[2]
    BLOCK_N = 64 if N <= 64 else 128
    grid = (block_expert.numel(), triton.cdiv(N, BLOCK_N))
    _down_kernel[grid](a_q, a_s, w, w_s, y, pairs, block_expert, route_w, route_w.numel(), N, K,
                       *a_q.stride(), *a_s.stride(), *w.stride(), *w_s.stride(), *y.stride(),
                       BLOCK_M=block_m, BLOCK_N=BLOCK_N, GROUP=GROUP, num_warps=4, num_stages=3)


def fused_moe_fp8(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                  w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Routed experts with FP8 weights: x (T, H), ids (T, K), weights (T, K) -> (T, H) in x.dtype."""
    T, H = x.shape
    E, I2, _ = w13.shape
    I, K = I2 // 2, ids.shape[1]
    assert w13.dtype == FP8 and w2.dtype == FP8, "expert weights must be float8_e4m3fn"
    assert w13.shape == (E, 2 * I, H) and w2.shape == (E, H, I), f"w13 {tuple(w13.shape)} w2 {tuple(w2.shape)}"
    assert w13_scale.shape == (E, triton.cdiv(2 * I, GROUP), triton.cdiv(H, GROUP)), "w13_scale shape"
    assert w2_scale.shape == (E, triton.cdiv(H, GROUP), triton.cdiv(I, GROUP)), "w2_scale shape"
    assert ids.shape == weights.shape and ids.shape[0] == T, "ids and weights must both be (T, K)"
    if T == 0:
        return torch.zeros_like(x)
    block_m = _block_m(T * K, E)
    pairs, block_expert = sort_by_expert(ids, E, block_m)  # (P,), (P / block_m,)
    x_q, x_s = quantize_act_fp8(x)  # (T, H) fp8, (T, H/G)
    P = pairs.numel()
    h_q = torch.zeros(P, I, dtype=FP8, device=x.device)  # zeros: tiles past the end stay finite
    h_s = torch.ones(P, triton.cdiv(I, GROUP), dtype=torch.float32, device=x.device)
    grid = (block_expert.numel(), triton.cdiv(I, GROUP))
    _up_kernel[grid](x_q, x_s, w13, w13_scale, h_q, h_s, pairs, block_expert, T * K, H, I,
                     *x_q.stride(), *x_s.stride(), *w13.stride(), *w13_scale.stride(),
                     *h_q.stride(), *h_s.stride(),
                     TOP_K=K, BLOCK_M=block_m, GROUP=GROUP, FP8_MAX=FP8_MAX, AMAX_FLOOR=AMAX_FLOOR,
                     num_warps=4, num_stages=3)
    y = torch.empty(T * K, H, dtype=torch.float32, device=x.device)  # one row per pair, weighted
    _launch_down(h_q, h_s, w2, w2_scale, y, pairs, block_expert, weights.reshape(-1).float(), block_m)
    return y.view(T, K, H).sum(dim=1).to(x.dtype)


def fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ fp8 w (N, K)^T -> (..., N) in x.dtype: stage 2 with one expert and unit weights."""
    N, K = w.shape
    assert w.dtype == FP8 and x.shape[-1] == K, f"x {tuple(x.shape)} vs w {tuple(w.shape)}"
    assert w_scale.shape == (triton.cdiv(N, GROUP), triton.cdiv(K, GROUP)), "w_scale shape"
    flat = x.reshape(-1, K)
    M = flat.shape[0]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M == 0:
        return y.view(*x.shape[:-1], N)
    block_m = 16 if M <= 16 else 64
    rows = triton.cdiv(M, block_m) * block_m
    pairs = torch.arange(rows, dtype=torch.int32, device=x.device).clamp_(max=M)  # M = padding sentinel
    block_expert = torch.zeros(rows // block_m, dtype=torch.int32, device=x.device)
    a_q, a_s = quantize_act_fp8(flat)
    ones = torch.ones(M, dtype=torch.float32, device=x.device)
    _launch_down(a_q, a_s, w[None], w_scale[None], y, pairs, block_expert, ones, block_m)
    return y.view(*x.shape[:-1], N)
