"""SwiGLU's activation, silu(gate) * up, in one Triton launch instead of two (dense layers, shared experts).

Reference: `llada.fast.kernels.reference.silu_mul`, exactly `F.silu(gate) * up` of `llada.model.SwiGLU`.
Both roundings are kept: silu(gate) is computed in fp32 and rounded to the activations' dtype, the
product of two such values in fp32 rounded again, as PyTorch does for bf16 tensors. One program per
row and BLOCK columns; gate and up may be the two halves of one product (strided rows).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launch, run

BLOCK = 1024


@triton.jit
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, I, stride_g, stride_u, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < I
    g = tl.load(gate_ptr + row * stride_g + cols, mask=ok, other=0.0)
    u = tl.load(up_ptr + row * stride_u + cols, mask=ok, other=0.0)
    gf = g.to(tl.float32)
    act = (gf / (1.0 + tl.exp(-gf))).to(g.dtype)  # F.silu, rounded
    tl.store(out_ptr + row * stride_o + cols, (act.to(tl.float32) * u.to(tl.float32)).to(g.dtype), mask=ok)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x (..., I) with unit last stride as (rows, I), a view where the layout allows."""
    assert x.stride(-1) == 1, "silu_mul reads rows of unit stride"
    flat = x.reshape(-1, x.shape[-1])
    return flat if flat.stride(-1) == 1 else flat.contiguous()


def plan_silu_mul(gate: torch.Tensor, up: torch.Tensor):
    """gate, up (..., I), one dtype, rows of unit stride (e.g. the two halves of one product) -> out, launches."""
    assert gate.shape == up.shape and gate.dtype == up.dtype, f"gate {tuple(gate.shape)} up {tuple(up.shape)}"
    g, u = _rows(gate), _rows(up)
    rows, I = g.shape
    out = torch.empty(rows, I, dtype=gate.dtype, device=gate.device)  # (rows, I)
    launch = Launch(_silu_mul_kernel, (rows, triton.cdiv(I, BLOCK)),
                    (g, u, out, I, g.stride(0), u.stride(0), out.stride(0)),
                    dict(BLOCK=BLOCK, num_warps=4))
    return out.view(gate.shape), [launch]


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Triton twin of `F.silu(gate) * up`: (..., I) -> (..., I)."""
    out, launches = plan_silu_mul(gate, up)
    run(launches)
    return out
