"""Attention's inputs from the fused qkv projection in one Triton launch, keys and values straight into the cache.

Reference: `llada.fast.kernels.reference.qkv_rope_cache` (what the static forward does with plain ops:
split, QK-norm + RoPE of q and of k, two `index_copy_` into the cache at slots start..start+T-1,
with the `arange` and `add` that make the slots: seven launches). Per (b, t, head) of the
projection (B, T, nH + 2 nKV, D), one program:

    head < nH            q: RMSNorm (query weight), RoPE        -> q (B, nH, T, D), stored (B, T, nH, D)
    nH <= head < nH+nKV  k: RMSNorm (key weight), RoPE          -> k_cache (B, nKV, S, D) at slot start + t
    the rest             v: copied                              -> v_cache at slot start + t

`start` is a 0-d long tensor on the device (the static path of `llada.fast.graphs`: nothing depends on
its value on the host). A slot at or past the cache's S slots is not written (the reference's
`index_copy_` raises there; a graph cannot): the kernel never writes outside the cache. The norm and
rotation are `llada.fast.kernels.norms._norm_rope_head`, the very code of the QK-norm + RoPE kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch, run
from .norms import _norm_rope_head


@triton.jit
def _qkv_cache_kernel(x_ptr, wq_ptr, wk_ptr, cos_ptr, sin_ptr, q_ptr, kc_ptr, vc_ptr, start_ptr,
                      T, NH, NKV, D, R, S, eps, stride_xb, stride_xt, stride_xh, stride_ct,
                      stride_qb, stride_qh, stride_qt, stride_cb, stride_ch, stride_cs,
                      BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)  # (b, t, head), head fastest
    heads = NH + 2 * NKV
    head, t, b = pid % heads, (pid // heads) % T, pid // (heads * T)
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    base = x_ptr + b * stride_xb + t * stride_xt + head * stride_xh
    cos_row, sin_row = cos_ptr + t * stride_ct, sin_ptr + t * stride_ct
    if head < NH:
        q = _norm_rope_head(base, wq_ptr, cos_row, sin_row, D, R, eps, BLOCK_D)
        tl.store(q_ptr + b * stride_qb + head * stride_qh + t * stride_qt + cols, q, mask=ok)
    else:
        slot = tl.load(start_ptr) + t + tl.zeros_like(cols)  # (BLOCK_D,): the interpreter masks with vectors only
        kv = head - NH
        write = ok & (slot >= 0) & (slot < S)
        if kv < NKV:
            k = _norm_rope_head(base, wk_ptr, cos_row, sin_row, D, R, eps, BLOCK_D)
            tl.store(kc_ptr + b * stride_cb + kv * stride_ch + slot * stride_cs + cols, k, mask=write)
        else:
            v = tl.load(base + cols, mask=ok, other=0.0)
            tl.store(vc_ptr + b * stride_cb + (kv - NKV) * stride_ch + slot * stride_cs + cols, v, mask=write)


def plan_qkv_rope_cache(qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float, cos: torch.Tensor,
                        sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor):
    """qkv (B, T, nH + 2 nKV, D), caches (B, nKV, S, D), start 0-d long -> q (B, nH, T, D), launches."""
    B, T, heads, D = qkv.shape
    _, NKV, S, _ = k_cache.shape
    NH, R = heads - 2 * NKV, cos.shape[-1]
    assert NH > 0 and k_cache.shape == v_cache.shape == (B, NKV, S, D), "qkv_rope_cache shapes"
    assert wq.shape == wk.shape == (D,) and cos.shape == sin.shape == (T, R) and R % 2 == 0 and R <= D, "rope shapes"
    assert qkv.stride(-1) == 1 and cos.stride(-1) == 1 and sin.stride() == cos.stride(), "unit last strides"
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1, "caches laid out alike"
    assert wq.dtype == wk.dtype == qkv.dtype == k_cache.dtype == v_cache.dtype, "one dtype for qkv, weights, cache"
    assert start.numel() == 1 and not start.dtype.is_floating_point, "start: one integer on the device"
    # (B, nH, T, D) laid out as (B, T, nH, D): attention's output then comes back in that layout, so
    # merging its heads for the output projection is a view, not a copy
    q = torch.empty(B, T, NH, D, dtype=qkv.dtype, device=qkv.device).transpose(1, 2)
    launch = Launch(_qkv_cache_kernel, (B * T * heads,),
                    (qkv, wq, wk, cos, sin, q, k_cache, v_cache, start, T, NH, NKV, D, R, S, float(eps),
                     qkv.stride(0), qkv.stride(1), qkv.stride(2), cos.stride(0), q.stride(0), q.stride(1),
                     q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2)),
                    dict(BLOCK_D=triton.next_power_of_2(D), num_warps=1))
    return q, [launch]


def qkv_rope_cache(qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float, cos: torch.Tensor,
                   sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   start: torch.Tensor) -> torch.Tensor:
    """Triton twin of `reference.qkv_rope_cache`: q (B, nH, T, D); k, v written into the caches."""
    q, launches = plan_qkv_rope_cache(qkv, wq, wk, eps, cos, sin, k_cache, v_cache, start)
    run(launches)
    return q
