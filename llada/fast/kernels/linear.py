"""A dense linear layer with FP8 block-scaled weights: y = x @ w^T, activations quantized per token group.

    x (M, K) -> x_q fp8 (M, K), x_s (M, K/128)        `_act_kernel` (fp8.py)
    w (N, K) fp8, w_s (N/128, K/128)
    y (M, N) = sum over 128-wide steps of (x_q @ w_q^T) * x_s * w_s       `_linear_kernel`

The tile heights follow the fused MoE's (configs.py): 16 or 32 rows swapped (the weight rows on the
wgmma M side), 64 plain; the K loop, the one-step-ahead scale loads and the masking are the MoE's.

Accumulation. Each 128-wide K step's product leaves `tl.dot` as its own fp32 partial, is scaled and
added to the fp32 accumulator: the per-128 promotion the DeepSeek-V3 report (section 3.3.2) asks of
FP8 GEMMs on Hopper, whose wgmma e4m3 keeps ~14 mantissa bits while it adds. Inside a step Triton lets
the four k32 wgmma's accumulate that way (sm90 default `max_num_imprecise_acc` = 2^30), so on an H200
the result is ~1e-4 rel. RMSE from the fp32 reference on the same codes (issue #33; tests/fp8_sums.py).
`tl.dot(..., max_num_imprecise_acc=32)` would promote every k32 wgmma too, at the price of waiting for
each one before its fp32 add; not measured on a GPU yet, so not taken.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8 import plan_quantize_act
from .fused_moe import _cols, _rows, _scaled_dot
from .devices import require_fp8
from .launch import Launch, run
from .reference import FP8, GROUP


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
        acc += _scaled_dot(a, a_s, w, w_s, SWAP_AB, True)
        a_s, w_s = a_s_next, w_s_next
    out = y_ptr + _rows(rows, SWAP_AB) * stride_ym + _cols(cols, SWAP_AB) * stride_yn
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=_rows(row_ok, SWAP_AB) & _cols(col_ok, SWAP_AB))


def plan_fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, list[Launch]]:
    """x (..., K) @ fp8 w (N, K)^T: the output (..., N) in x.dtype and its two launches."""
    require_fp8(x.device)
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
                  dict(BLOCK_M=block_m, BLOCK_N=block_n, SWAP_AB=swap, GROUP=GROUP, num_warps=4 if swap else 8,
                       num_stages=_stages(block_m + block_n, 4 if swap else 3, x.device)))
    return y.view(*x.shape[:-1], N), [*quant, gemm]


def _stages(rows: int, stages: int, device: torch.device) -> int:
    """Pipeline depth that fits the device: `rows` x 128 fp8 bytes per stage (see configs.smem_bytes)."""
    if device.type != "cuda":
        return stages
    from .configs import SMEM_SLACK, pipeline_bytes
    from .devices import spec_of

    spec = spec_of(device)
    while stages > 2 and pipeline_bytes(rows, stages, 1, spec.arch) + SMEM_SLACK > spec.smem:
        stages -= 1
    return stages


def fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ fp8 w (N, K)^T -> (..., N) in x.dtype; activations quantized per token group."""
    if x.numel() == 0:
        return torch.empty(*x.shape[:-1], w.shape[0], dtype=x.dtype, device=x.device)
    y, launches = plan_fp8_linear(x, w, w_scale)
    run(launches)
    return y
