"""The static decode forward's attention mask in one Triton launch instead of fifteen ops.

Reference: `llada.fast.kernels.reference.step_mask` (the rule of `llada.fast.graphs`, spelled with plain ops).
For the window [lo, hi) of a run in blocks of B tokens whose blocks from `groups_hi` on see each
other (MBE), query i (position lo + i) may see key slot j of the cache's S slots iff

    j < lo  or  (j < hi  and  min(j // B, groups_hi) <= min((lo + i) // B, groups_hi))

and the mask is additive, in the model's dtype: 0 where it may, -inf where it may not. bounds =
(lo, hi, groups_hi) is a long tensor on the device, read by the kernel: nothing waits for the host.
One program per query row, BLOCK_S key slots at a time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch, run

BLOCK_S = 256


@triton.jit
def _step_mask_kernel(bounds_ptr, out_ptr, S, block_length, stride_ot,
                      BLOCK_S: tl.constexpr):
    i = tl.program_id(0)
    lo, hi, groups_hi = tl.load(bounds_ptr), tl.load(bounds_ptr + 1), tl.load(bounds_ptr + 2)
    query_group = tl.minimum((lo + i) // block_length, groups_hi)
    for s0 in range(0, S, BLOCK_S):
        keys = s0 + tl.arange(0, BLOCK_S)
        key_group = tl.minimum(keys // block_length, groups_hi)
        visible = (keys < lo) | ((keys < hi) & (key_group <= query_group))
        value = tl.where(visible, 0.0, float("-inf"))
        tl.store(out_ptr + i * stride_ot + keys, value.to(out_ptr.dtype.element_ty), mask=keys < S)


def plan_step_mask(bounds: torch.Tensor, T: int, S: int, block_length: int, dtype: torch.dtype):
    """bounds (3,) long (lo, hi, groups_hi) -> additive mask (T, S) in `dtype`, launches."""
    assert bounds.shape == (3,) and not bounds.dtype.is_floating_point, "bounds: (lo, hi, groups_hi)"
    assert T >= 1 and S >= 1 and block_length >= 1, f"T={T} S={S} block_length={block_length}"
    out = torch.empty(T, S, dtype=dtype, device=bounds.device)  # (T, S)
    launch = Launch(_step_mask_kernel, (T,), (bounds, out, S, block_length, out.stride(0)),
                    dict(BLOCK_S=BLOCK_S, num_warps=4))
    return out, [launch]


def step_mask(bounds: torch.Tensor, T: int, S: int, block_length: int, dtype: torch.dtype) -> torch.Tensor:
    """Triton twin of `reference.step_mask`: (T, S), 0 where query i sees key j, -inf elsewhere."""
    out, launches = plan_step_mask(bounds, T, S, block_length, dtype)
    run(launches)
    return out
