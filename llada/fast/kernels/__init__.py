"""FP8 kernels for the GPU engine, each with a readable PyTorch reference of the same contract.

    quantize_weight_fp8(w)        (..., N, K) -> fp8 codes + one fp32 scale per 128x128 tile
    quantize_act_fp8(x)           (M, K)      -> fp8 codes + one fp32 scale per token and 128 along K
    fused_moe_fp8(x, w13, w13_scale, w2, w2_scale, ids, weights)   routed experts, (T, H) -> (T, H)
    fused_moe_bf16(x, w13, w2, ids, weights)   the same grouped GEMMs on bf16 weights (sm80+, no FP8);
                                  `shared` runs the shared expert as expert E, `norm` makes the next norm
    fp8_linear(x, w, w_scale)     (..., K) @ w (N, K)^T -> (..., N)
    route(h, weight, bias, ...)   the MoE router, (T, H) -> ids (T, K), weights (T, K) (Triton only;
                                  its reference is `llada.model.Router`, as `reference.route`)
    route_add_norm(h, residual, norm_w, eps, weight, bias, ...)   x + h, its RMSNorm and the router
                                  on it in one launch (reference: `reference.route_add_norm`)
    rms_norm(x, w, eps) / add_rms_norm(x, res, w, eps)   RMSNorm, with the residual add, one launch
    qk_norm_rope(x, w, eps, cos, sin)   QK-norm + RoPE of q or k, (B, T, heads, D) -> (B, heads, T, D)
    qkv_rope_cache(qkv, wq, wk, eps, cos, sin, k_cache, v_cache, start)   q, k, v of the static
                                  forward in one launch: q returned, k and v written into the KV cache
    silu_mul(gate, up)            SwiGLU's silu(gate) * up (dense layers, shared experts)
    step_mask(bounds, T, S, B, dtype)   the static decode forward's additive attention mask

Every function takes `impl`: "torch" runs `llada.fast.kernels.reference`, "triton" the kernels in
`fp8.py` / `fused_moe.py` / `linear.py`, and "auto" picks triton for CUDA tensors and torch otherwise. Triton is
imported only when it is chosen, so this package imports without a GPU and without triton. The
format and the kernels are explained in `fp8.py`, `routing.py`, `router.py` and `fused_moe.py`,
the tile configurations in `configs.py` (fitted to the GPU of `devices.py`), the launch records in
`launch.py`, the ahead-of-time compile for sm80 / sm89 / sm90 in `aot.py`. One FP8 MoE layer costs
seven launches: router with top-k, sort by expert, activation quantization, gate/up GEMM, SiLU·mul +
re-quantization, down GEMM, k-sum (bf16 weights without split-K: five, nothing to quantize and SiLU·mul
in the gate/up GEMM; the shared expert among them, see `llada.fast.layers`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import torch

from . import reference

IMPLS = ("auto", "triton", "torch")


def resolve_impl(impl: str, x: torch.Tensor, fp8: bool = False) -> str:
    """'auto' -> 'triton' for CUDA tensors, 'torch' otherwise (and for an FP8 op on a GPU without FP8,
    sm80 / sm86, where Triton cannot compile e4m3); checks that the choice can run."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}; got {impl!r}")
    if impl == "auto":
        return auto_impl(x.device, fp8)
    if impl == "triton":
        if not triton_available():
            raise RuntimeError("impl='triton' needs the triton package (pip install triton)")
        if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("impl='triton' runs on CUDA tensors (on CPU only under Triton's "
                               "interpreter, TRITON_INTERPRET=1 set before triton is imported)")
    return impl


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def auto_impl(device: torch.device, fp8: bool = False) -> str:
    """What impl="auto" runs on `device`: Triton on CUDA (for FP8 ops only where the GPU has FP8)."""
    if device.type != "cuda" or not triton_available():
        return "torch"
    from .devices import spec_of

    return "triton" if not fp8 or spec_of(device).fp8 else "torch"


def _module(impl: str, x: torch.Tensor, name: str, fp8: bool = True):
    if resolve_impl(impl, x, fp8) == "torch":
        return reference
    return importlib.import_module(f".{name}", __name__)


def quantize_weight_fp8(w: torch.Tensor, impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., N, K) -> fp8 (..., N, K) and fp32 scales (..., ceil(N/128), ceil(K/128))."""
    return _module(impl, w, "fp8").quantize_weight_fp8(w)


def quantize_act_fp8(x: torch.Tensor, impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> fp8 (M, K) and fp32 scales (M, ceil(K/128))."""
    return _module(impl, x, "fp8").quantize_act_fp8(x)


def fused_moe_fp8(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                  w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                  impl: str = "auto", adds: tuple = ()) -> torch.Tensor:
    """x (T, H), fp8 w13 (E, 2I, H) / w2 (E, H, I) with tile scales, ids/weights (T, K) -> (T, H) [+ adds]."""
    return _module(impl, x, "fused_moe").fused_moe_fp8(x, w13, w13_scale, w2, w2_scale, ids, weights, adds=adds)


def fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """x (..., K) @ fp8 w (N, K)^T with tile scales -> (..., N) in x.dtype."""
    return _module(impl, x, "linear").fp8_linear(x, w, w_scale)


def fused_moe_bf16(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                   impl: str = "auto", adds: tuple = (), shared: tuple | None = None,
                   norm: tuple | None = None) -> torch.Tensor | tuple:
    """x (T, H), bf16 w13 (E, 2I, H) / w2 (E, H, I), ids/weights (T, K) -> (T, H): no FP8 anywhere.

    adds: up to two (T, H) tensors (the shared expert's output, the residual) summed into the result
    by the same launch, left to right, each sum rounded to x.dtype. shared: the shared expert's (2I, H)
    gate|up and (H, I) down weights, run as expert E of the same grouped GEMMs (ids, weights (T, K + 1)).
    norm: (weight (H,), eps) -> (out, RMSNorm(out)), the next sublayer's input written by the same launch."""
    return _module(impl, x, "fused_moe", fp8=False).fused_moe_bf16(x, w13, w2, ids, weights, adds=adds,
                                                                   shared=shared, norm=norm)


def route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int,
          topk_group: int, scale: float, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid router with group-limited top-k in Triton: h (T, H) -> ids (T, K) int64, weights (T, K);
    shared: (T, K + 1), the last column id E with weight 1 (a shared expert run by `fused_moe_bf16`)."""
    resolve_impl("triton", h)
    return importlib.import_module(".router", __name__).route(h, weight, bias, top_k, n_group, topk_group, scale,
                                                              shared)


def route_add_norm(h: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                   weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
                   scale: float, shared: bool = False) -> tuple[torch.Tensor, ...]:
    """s = residual + h, x = RMSNorm(s) and `route(x)` in one Triton launch -> (s, x, ids, weights)."""
    resolve_impl("triton", h)
    return importlib.import_module(".router", __name__).route_add_norm(h, residual, norm_weight, eps, weight, bias,
                                                                       top_k, n_group, topk_group, scale, shared)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, impl: str = "auto") -> torch.Tensor:
    """x (..., N) -> RMSNorm(x) * weight (..., N) (`llada.model.RMSNorm`)."""
    return _module(impl, x, "norms", fp8=False).rms_norm(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """s = x + residual (..., N) -> (s, RMSNorm(s) * weight)."""
    return _module(impl, x, "norms", fp8=False).add_rms_norm(x, residual, weight, eps)


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                 impl: str = "auto") -> torch.Tensor:
    """x (B, T, heads, D), cos/sin (T, R) fp32 -> normed over D and rotated, (B, heads, T, D)."""
    return _module(impl, x, "norms", fp8=False).qk_norm_rope(x, weight, eps, cos, sin)


def qkv_rope_cache(qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float, cos: torch.Tensor,
                   sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor,
                   impl: str = "auto") -> torch.Tensor:
    """qkv (B, T, nH + 2 nKV, D) -> q (B, nH, T, D) normed and rotated; k, v written into the caches
    (B, nKV, S, D) at slots start..start+T-1 (start: a 0-d long tensor on the device)."""
    return _module(impl, qkv, "qkv_cache", fp8=False).qkv_rope_cache(qkv, wq, wk, eps, cos, sin, k_cache, v_cache,
                                                                     start)


def silu_mul(gate: torch.Tensor, up: torch.Tensor, impl: str = "auto") -> torch.Tensor:
    """silu(gate) * up, (..., I) -> (..., I) (SwiGLU's activation)."""
    return _module(impl, gate, "swiglu", fp8=False).silu_mul(gate, up)


def step_mask(bounds: torch.Tensor, T: int, S: int, block_length: int, dtype: torch.dtype,
              impl: str = "auto") -> torch.Tensor:
    """bounds (lo, hi, groups_hi) long on the device -> additive attention mask (T, S) of a decode window."""
    return _module(impl, bounds, "masks", fp8=False).step_mask(bounds, T, S, block_length, dtype)


__all__ = ["IMPLS", "resolve_impl", "auto_impl", "triton_available", "quantize_weight_fp8", "quantize_act_fp8",
           "fused_moe_fp8", "fused_moe_bf16", "fp8_linear", "route", "route_add_norm", "rms_norm", "add_rms_norm",
           "qk_norm_rope", "qkv_rope_cache", "silu_mul", "step_mask", "reference"]
