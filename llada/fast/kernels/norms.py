"""RMSNorm (with the residual add) and QK-norm + RoPE, each one Triton launch instead of 7 to 15 ATen ops.

References (same contracts, in `llada.fast.kernels.reference`): `rms_norm`, `add_rms_norm`, `qk_norm_rope`;
they are exactly `llada.model.RMSNorm` and `apply_rope`. Per row of N features, in fp32:

    s      = x + residual                      rounded to x's dtype, stored (the new residual stream)
    normed = w * (s * rsqrt(mean(s^2) + eps)).to(dtype)            `_rmsnorm_kernel`, one program per row

QK-norm + RoPE reads one head of q (or k) straight from the fused qkv projection (B, T, heads, D),
normalises it, rotates its first R = rotary_dim dims (NeoX halves: dim j pairs with j +- R/2) and
writes it head-major, (B, heads, T, D), as attention wants it:

    rot[j] = normed[j] * cos[t, j] + sign(j) * normed[partner(j)] * sin[t, j]     j < R, then rounded
    out[j] = normed[j]                                                            j >= R

The partner's normed value is recomputed from its own load (registers cannot be gathered), so each
element goes through exactly the reference's roundings. `_qk_rope_kernel`: one program per (b, t, head).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch, run


@triton.jit
def _rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, N, eps,
                    stride_x, stride_r, stride_o, stride_s,
                    HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
    if HAS_RES:
        res = tl.load(res_ptr + row * stride_r + cols, mask=ok, other=0.0)
        x = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)  # one rounding, as `x + h` in torch
        tl.store(sum_ptr + row * stride_s + cols, x, mask=ok)
    xf = x.to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / N + eps)
    y = (xf * r).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (w * y).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _norm_rope_head(base, w_ptr, cos_row, sin_row, D, R, eps, BLOCK_D: tl.constexpr):
    """One head's D values at `base`: RMSNorm times w, the first R dims rotated (NeoX) -> (BLOCK_D,)."""
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    x = tl.load(base + cols, mask=ok, other=0.0)
    xf = x.to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / D + eps)
    normed = (tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
              * (xf * r).to(x.dtype).to(tl.float32)).to(x.dtype)
    half = R // 2
    rotary = cols < R
    partner = tl.where(cols < half, cols + half, cols - half)
    p_ok = rotary & ok
    xp = tl.load(base + partner, mask=p_ok, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=p_ok, other=0.0).to(tl.float32)
    partner_normed = (wp * (xp * r).to(x.dtype).to(tl.float32)).to(x.dtype).to(tl.float32)
    signed = tl.where(cols < half, -partner_normed, partner_normed)
    cos = tl.load(cos_row + cols, mask=p_ok, other=0.0)
    sin = tl.load(sin_row + cols, mask=p_ok, other=0.0)
    rot = (normed.to(tl.float32) * cos + signed * sin).to(x.dtype)
    return tl.where(rotary, rot, normed)


@triton.jit
def _qk_rope_kernel(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, T, NH, D, R, eps,
                    stride_xb, stride_xt, stride_xh, stride_ct, stride_ob, stride_oh, stride_ot,
                    BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)  # (b, t, head), head fastest
    head, t, b = pid % NH, (pid // NH) % T, pid // (NH * T)
    cols = tl.arange(0, BLOCK_D)
    out = _norm_rope_head(x_ptr + b * stride_xb + t * stride_xt + head * stride_xh, w_ptr,
                          cos_ptr + t * stride_ct, sin_ptr + t * stride_ct, D, R, eps, BLOCK_D)
    tl.store(out_ptr + b * stride_ob + head * stride_oh + t * stride_ot + cols, out, mask=cols < D)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x (..., N) as (rows, N) without a copy when its rows are evenly strided with unit columns."""
    flat = x.reshape(-1, x.shape[-1])
    return flat if flat.stride(-1) == 1 else flat.contiguous()


def plan_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """x (..., N) [+ residual (..., N)] -> normed (..., N), the sum (or None), launches."""
    N = x.shape[-1]
    assert weight.shape == (N,) and (residual is None or residual.shape == x.shape), "rms_norm shapes"
    xs = _rows(x)
    res = _rows(residual) if residual is not None else xs
    out_dtype = x.dtype if weight.dtype == x.dtype else torch.promote_types(weight.dtype, x.dtype)  # as `w * y`
    out = torch.empty(xs.shape, dtype=out_dtype, device=x.device)  # (rows, N)
    total = torch.empty_like(xs) if residual is not None else out
    launch = Launch(_rmsnorm_kernel, (xs.shape[0],),
                    (xs, res, weight, out, total, N, float(eps), xs.stride(0), res.stride(0), out.stride(0),
                     total.stride(0)),
                    dict(HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(N), num_warps=4))
    summed = total.view(x.shape) if residual is not None else None
    return out.view(x.shape), summed, [launch]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Triton twin of `llada.model.RMSNorm.forward`: x (..., N) -> (..., N)."""
    out, _, launches = plan_rms_norm(x, weight, eps)
    run(launches)
    return out


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """s = x + residual, then RMSNorm(s): -> (s, normed), both (..., N), one launch."""
    out, summed, launches = plan_rms_norm(x, weight, eps, residual)
    run(launches)
    return summed, out


def plan_qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor):
    """x (B, T, heads, D) with unit last stride, weight (D,), cos/sin (T, R) fp32 -> (B, heads, T, D), launches."""
    B, T, NH, D = x.shape
    R = cos.shape[-1]
    assert weight.shape == (D,) and cos.shape == sin.shape == (T, R) and R % 2 == 0 and R <= D, "qk_norm_rope shapes"
    assert x.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride() == cos.stride(), "unit last strides"
    assert weight.dtype == x.dtype, f"norm weight {weight.dtype} for {x.dtype} activations"
    out = torch.empty(B, NH, T, D, dtype=x.dtype, device=x.device)  # (B, heads, T, D)
    launch = Launch(_qk_rope_kernel, (B * T * NH,),
                    (x, weight, cos, sin, out, T, NH, D, R, float(eps), x.stride(0), x.stride(1), x.stride(2),
                     cos.stride(0), out.stride(0), out.stride(1), out.stride(2)),
                    dict(BLOCK_D=triton.next_power_of_2(D), num_warps=1))
    return out, [launch]


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor,
                 sin: torch.Tensor) -> torch.Tensor:
    """Triton twin of `apply_rope(RMSNorm(x).transpose(1, 2), cos, sin)`: (B, T, heads, D) -> (B, heads, T, D)."""
    out, launches = plan_qk_norm_rope(x, weight, eps, cos, sin)
    run(launches)
    return out
