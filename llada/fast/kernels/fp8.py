"""FP8 (e4m3) block quantization: the format, the scales, the layout, and the Triton kernels.

The format. `float8_e4m3fn` has 1 sign bit, 4 exponent bits (bias 7) and 3 mantissa bits: normal
numbers are (1 + m/8) * 2^(e-7) up to the largest finite value 448; below 2^-6 come subnormals in
steps of 2^-9. There is no infinity; 8 values per power of two means a relative step of 6-12%.

The scales. A tensor is cut into pieces and each piece gets one fp32 scale s = amax / 448, so that
its largest |value| maps onto 448: stored q = round(x / s), real value ~ q * s. Small pieces keep
an outlier from crushing its neighbours to zero.

    weights      (..., N, K): one scale per 128 x 128 tile      -> scale (..., ceil(N/128), ceil(K/128))
    activations  (M, K):      one scale per token and 128 along K -> scale (M, ceil(K/128))

Shapes need not be multiples of 128: the last tile is partial, its missing elements count as zero.
A GEMM that walks K in steps of 128 then meets exactly one activation scale per row and one weight
scale per output column at each step: acc += (q_a @ q_w^T) * s_a[:, None] * s_w[None, :], in fp32.

Rounding. x / s is saturated to +-448 and rounded to nearest-even on the e4m3 grid *in fp32*, then
cast; the cast is then exact on every backend. (Triton's CPU interpreter casts neither saturating
nor rounding like the GPU.) The division is IEEE (`div_rn`), so scales and codes match the PyTorch
reference in `llada.fast.kernels.reference` bit for bit.

Non-finite input propagates, it is never saturated away. A piece holding a NaN gets a NaN scale, one
holding an Inf an Inf scale, and every element whose x / s is not a number (a NaN or Inf element,
or any element of a NaN piece) gets the NaN code 0x7F: dequantized, the whole piece is NaN, and a
GEMM row that reads it comes out NaN, so a broken activation reaches the logits instead of turning
into a plausible +-448 * s. (GPU `max` reductions drop NaNs, hence the explicit NaN flag.)

Every launcher returns its outputs and the `Launch` list that fills them (`llada.fast.kernels.launch`):
`run` executes it, the ahead-of-time compile in `llada.fast.kernels.aot` compiles the same list.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .devices import require_fp8
from .launch import Launch, run
from .reference import AMAX_FLOOR, FP8, FP8_MAX, GROUP


@triton.jit
def round_e4m3(v):
    """fp32 -> the nearest-even float8_e4m3fn value, still in fp32 (saturates at +-448, NaN stays NaN)."""
    mag = tl.minimum(tl.abs(v), 448.0, propagate_nan=tl.PropagateNan.ALL)
    mag_bits = mag.to(tl.int32, bitcast=True)
    sign_bit = v.to(tl.int32, bitcast=True) ^ tl.abs(v).to(tl.int32, bitcast=True)
    exponent = tl.maximum((mag_bits >> 23) - 127, -6)  # below 2^-6 the step stays 2^-9 (subnormals)
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 2^(e-3): 3 mantissa bits
    magic = step * 12582912.0  # 1.5 * 2^23 * step: adding it rounds to a multiple of step (RNE)
    rounded = (mag + magic) - magic
    return (rounded.to(tl.int32, bitcast=True) | sign_bit).to(tl.float32, bitcast=True)  # sign kept, -0 too


@triton.jit
def nan_amax(x, axis: tl.constexpr):
    """max |x| along `axis` (kept as a size-1 dim), NaN where that slice holds a NaN, Inf where an Inf."""
    amax = tl.max(tl.abs(x), axis=axis, keep_dims=True)
    has_nan = tl.max((x != x).to(tl.int32), axis=axis, keep_dims=True)
    return tl.where(has_nan > 0, float("nan"), amax)


@triton.jit
def quantize_tile(x, amax, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    """x (fp32) with its amax (broadcastable) -> (codes as float8e4nv, scale fp32); see "Non-finite"."""
    scale = tl.math.div_rn(tl.maximum(amax, AMAX_FLOOR, propagate_nan=tl.PropagateNan.ALL), FP8_MAX)
    v = tl.math.div_rn(x, scale)
    nan_code = tl.full(v.shape, 0x7F, tl.uint8).to(tl.float8e4nv, bitcast=True)
    return tl.where(v == v, round_e4m3(v).to(tl.float8e4nv), nan_code), scale


@triton.jit
def quantize_rows(x, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    """x (R, G) fp32 -> codes (R, G) and one scale per row (R, 1): a group along the last axis."""
    return quantize_tile(x, nan_amax(x, 1), FP8_MAX, AMAX_FLOOR)


@triton.jit
def _weight_kernel(w_ptr, q_ptr, s_ptr, N, K,
                   stride_we, stride_wn, stride_wk, stride_qe, stride_qn, stride_qk,
                   stride_se, stride_sn, stride_sk,
                   TILE: tl.constexpr, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    e, tn, tk = tl.program_id(0).to(tl.int64), tl.program_id(1), tl.program_id(2)  # one program per tile
    rows = tn * TILE + tl.arange(0, TILE)
    cols = tk * TILE + tl.arange(0, TILE)
    mask = (rows < N)[:, None] & (cols < K)[None, :]
    w = tl.load(w_ptr + e * stride_we + rows[:, None] * stride_wn + cols[None, :] * stride_wk,
                mask=mask, other=0.0).to(tl.float32)  # (TILE, TILE)
    q, scale = quantize_tile(w, nan_amax(nan_amax(w, 1), 0), FP8_MAX, AMAX_FLOOR)  # (1, 1) scale
    tl.store(q_ptr + e * stride_qe + rows[:, None] * stride_qn + cols[None, :] * stride_qk, q, mask=mask)
    tl.store(s_ptr + e * stride_se + tn * stride_sn + tk * stride_sk + tl.zeros((1, 1), tl.int32), scale)


def plan_quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Launch]]:
    """w (E, N, K) -> the fp8 (E, N, K) and scale (E, ceil(N/128), ceil(K/128)) buffers and their launch."""
    require_fp8(w.device)
    E, N, K = w.shape
    q = torch.empty(E, N, K, dtype=FP8, device=w.device)
    s = torch.empty(E, triton.cdiv(N, GROUP), triton.cdiv(K, GROUP), dtype=torch.float32, device=w.device)
    launch = Launch(_weight_kernel, (E, s.shape[1], s.shape[2]), (w, q, s, N, K, *w.stride(), *q.stride(), *s.stride()),
                    dict(TILE=GROUP, FP8_MAX=FP8_MAX, AMAX_FLOOR=AMAX_FLOOR))
    return q, s, [launch] if q.numel() else []


def quantize_weight_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., N, K) -> fp8 (..., N, K) and fp32 scales (..., ceil(N/128), ceil(K/128))."""
    assert w.dim() in (2, 3), f"weights are (N, K) or (E, N, K), got {tuple(w.shape)}"
    q, s, launches = plan_quantize_weight(w if w.dim() == 3 else w[None])
    run(launches)
    return (q, s) if w.dim() == 3 else (q[0], s[0])


@triton.jit(do_not_specialize=["M"])  # token counts vary per call: one compile
def _act_kernel(x_ptr, q_ptr, s_ptr, M, K,
                stride_xm, stride_xk, stride_qm, stride_qk, stride_sm, stride_sk,
                BLOCK_M: tl.constexpr, GROUP: tl.constexpr, FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr):
    pid_m, g = tl.program_id(0), tl.program_id(1)  # BLOCK_M tokens x one group of GROUP along K
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = g * GROUP + tl.arange(0, GROUP)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xk,
                mask=mask, other=0.0).to(tl.float32)  # (BLOCK_M, GROUP)
    q, scale = quantize_rows(x, FP8_MAX, AMAX_FLOOR)  # (BLOCK_M, GROUP), (BLOCK_M, 1)
    tl.store(q_ptr + rows[:, None] * stride_qm + cols[None, :] * stride_qk, q, mask=mask)
    tl.store(s_ptr + rows[:, None] * stride_sm + g * stride_sk, scale, mask=(rows < M)[:, None])


def plan_quantize_act(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[Launch]]:
    """x (M, K) -> the fp8 (M, K) and scale (M, ceil(K/128)) buffers and the launch that fills them."""
    assert x.dim() == 2, f"activations are (M, K), got {tuple(x.shape)}"
    require_fp8(x.device)
    M, K = x.shape
    q = torch.empty(M, K, dtype=FP8, device=x.device)
    s = torch.empty(M, triton.cdiv(K, GROUP), dtype=torch.float32, device=x.device)
    block_m = 16
    launch = Launch(_act_kernel, (triton.cdiv(M, block_m), s.shape[1]),
                    (x, q, s, M, K, *x.stride(), *q.stride(), *s.stride()),
                    dict(BLOCK_M=block_m, GROUP=GROUP, FP8_MAX=FP8_MAX, AMAX_FLOOR=AMAX_FLOOR))
    return q, s, [launch] if q.numel() else []


def quantize_act_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> fp8 (M, K) and fp32 scales (M, ceil(K/128)), one per token and 128-wide group."""
    q, s, launches = plan_quantize_act(x)
    run(launches)
    return q, s
