"""Readable PyTorch references for the FP8 kernels: same signatures and contracts as the Triton ones.

These are the definitions the Triton kernels are tested against, and the path the engine takes on
CPU. They favour clarity over speed: quantize by reshaping into tiles, dequantize, multiply in fp32.
Letter legend: M rows (tokens), N output features, K reduction dim, E experts, T tokens, H hidden,
I expert width, G = 128 the tile / group size. See `llada.fast.kernels.fp8` for the format itself, and
`llada.model.Router` for the reference of the routing kernels in `llada.fast.kernels.router`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...model import Router
from ...norm_rope import apply_rope as rope  # NeoX RoPE on the first R dims: the model's own op is the reference

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
GROUP = 128  # tile edge for weights, group length for activations
AMAX_FLOOR = 1e-12  # an all-zero tile gets a tiny scale instead of 0 (no 0/0)


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    """Zero-pad `dim` of x up to a multiple of `multiple` (zeros leave an amax unchanged)."""
    extra = -x.shape[dim] % multiple
    if not extra:
        return x
    pad = [0, 0] * (x.dim() - 1 - dim % x.dim()) + [0, extra]
    return F.pad(x, pad)


def _to_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale, saturated to +-448, rounded to nearest-even e4m3."""
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _scale_of(amax: torch.Tensor) -> torch.Tensor:
    return amax.clamp(min=AMAX_FLOOR) / FP8_MAX


def quantize_weight_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., N, K) -> fp8 (..., N, K) and fp32 scales (..., ceil(N/G), ceil(K/G)), one per GxG tile."""
    *lead, N, K = w.shape
    nN, nK = math.ceil(N / GROUP), math.ceil(K / GROUP)
    padded = _pad_to(_pad_to(w.float(), -1, GROUP), -2, GROUP)  # (..., nN*G, nK*G)
    tiles = padded.reshape(*lead, nN, GROUP, nK, GROUP)
    scale = _scale_of(tiles.abs().amax(dim=(-3, -1)))  # (..., nN, nK)
    q = _to_fp8(w.float(), expand_weight_scale(scale, N, K))
    return q, scale


def expand_weight_scale(scale: torch.Tensor, N: int, K: int) -> torch.Tensor:
    """Tile scales (..., nN, nK) -> one scale per element (..., N, K)."""
    return scale.repeat_interleave(GROUP, -2)[..., :N, :].repeat_interleave(GROUP, -1)[..., :K]


def dequantize_weight_fp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8 (..., N, K) with tile scales -> fp32 (..., N, K)."""
    return q.float() * expand_weight_scale(scale, q.shape[-2], q.shape[-1])


def quantize_act_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> fp8 (M, K) and fp32 scales (M, ceil(K/G)), one per token and 128-wide group."""
    M, K = x.shape
    groups = _pad_to(x.float(), -1, GROUP).view(M, math.ceil(K / GROUP), GROUP)  # (M, nK, G)
    scale = _scale_of(groups.abs().amax(dim=-1))  # (M, nK)
    q = _to_fp8(x.float(), scale.repeat_interleave(GROUP, -1)[:, :K])
    return q, scale


def dequantize_act_fp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8 (M, K) with group scales (M, nK) -> fp32 (M, K)."""
    return q.float() * scale.repeat_interleave(GROUP, -1)[:, :q.shape[-1]]


def fp8_linear(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ fp8 w (N, K)^T -> (..., N) in x.dtype; activations quantized per token group."""
    flat = x.reshape(-1, x.shape[-1])
    a = dequantize_act_fp8(*quantize_act_fp8(flat))  # (M, K) fp32
    y = a @ dequantize_weight_fp8(w, w_scale).T  # (M, N) fp32
    return y.to(x.dtype).view(*x.shape[:-1], w.shape[0])


def fused_moe_fp8(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor, w2: torch.Tensor,
                  w2_scale: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, adds: tuple = ()) -> torch.Tensor:
    """Routed experts with FP8 weights: x (T, H), ids (T, K), weights (T, K) -> (T, H) in x.dtype.

    w13 (E, 2I, H) fp8 = gate rows then up rows, w13_scale (E, ceil(2I/G), ceil(H/G));
    w2 (E, H, I) fp8, w2_scale (E, ceil(H/G), ceil(I/G)). out = sum_k weights[:, k] * expert_k(x),
    expert(x) = down(silu(gate(x)) * up(x)), with x and the intermediate quantized per token group."""
    T, H = x.shape
    I = w2.shape[-1]
    a = dequantize_act_fp8(*quantize_act_fp8(x))  # (T, H) fp32
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        token, slot = (ids == e).nonzero(as_tuple=True)  # pairs routed to expert e
        gate, up = (a[token] @ dequantize_weight_fp8(w13[e], w13_scale[e]).T).split(I, dim=-1)  # (n, I)
        h = dequantize_act_fp8(*quantize_act_fp8(F.silu(gate) * up))  # (n, I) fp32
        y = h @ dequantize_weight_fp8(w2[e], w2_scale[e]).T  # (n, H)
        out.index_add_(0, token, y * weights[token, slot, None].float())
    return add_all(out.to(x.dtype), adds)


def fused_moe_bf16(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor,
                   weights: torch.Tensor, adds: tuple = (), shared: tuple | None = None,
                   norm: tuple | None = None) -> torch.Tensor | tuple:
    """Routed experts with unquantized weights (the bf16 grouped GEMMs' contract): (T, H) -> (T, H).

    Products in fp32, the intermediate h = silu(gate) * up rounded once to the weights' dtype (the
    kernel stores it so), the weighted sum over the K experts in fp32, then x.dtype. `shared`: the
    shared expert's (2I, H) gate|up and (H, I) down weights, run as one more expert of the same
    contract; ids and weights are then (T, K + 1), the last column id E with weight 1, and its
    output is rounded to x.dtype and added to the routed sum (`out + shared` of `llada.model.MoE`).
    `norm` (weight (H,), eps): -> (out, rms_norm(out)), the next sublayer's input as well."""
    if norm is not None:
        out = fused_moe_bf16(x, w13, w2, ids, weights, adds, shared)
        return out, rms_norm(out, norm[0], norm[1])
    if shared is not None:
        routed = fused_moe_bf16(x, w13, w2, ids[:, :-1], weights[:, :-1])
        own = _expert_bf16(x, shared[0], shared[1]) * weights[:, -1:].float()  # (T, H) fp32
        return add_all(routed, (own.to(x.dtype), *adds))
    T, H = x.shape
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        token, slot = (ids == e).nonzero(as_tuple=True)  # pairs routed to expert e
        out.index_add_(0, token, _expert_bf16(x[token], w13[e], w2[e]) * weights[token, slot, None].float())
    return add_all(out.to(x.dtype), adds)


def _expert_bf16(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One unquantized expert on rows x (n, H): w13 (2I, H), w2 (H, I) -> (n, H) fp32."""
    gate, up = (x.float() @ w13.float().T).chunk(2, dim=-1)  # (n, I) each
    h = (F.silu(gate) * up).to(w2.dtype).float()  # (n, I), rounded as the kernel stores it
    return h @ w2.float().T


def add_all(out: torch.Tensor, adds) -> torch.Tensor:
    """out + adds[0] + adds[1] ..., left to right, each sum rounded to out's dtype (`adds` of the fused MoE)."""
    for a in adds:
        out = out + a
    return out


def padded_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Upper bound on rows after padding every non-empty expert run to a multiple of block_m."""
    worst = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    return -(-worst // block_m) * block_m


def sort_by_expert(ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (T, K) int -> sorted_pairs (P,) int32 and block_expert (P // block_m,) int32.

    Pair p = t*K + k; the pairs of each expert, in pair order, padded with the sentinel T*K to a
    multiple of block_m; experts in order; block_expert[i] = expert of tile i, -1 past the last
    run (rows of those tiles are never read); P = padded_rows(T*K, E, block_m) (see
    `llada.fast.kernels.routing`)."""
    flat = ids.reshape(-1).long()  # (T*K,)
    n = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)  # (E,) pairs per expert
    padded = (counts + block_m - 1) // block_m * block_m  # (E,) rows per expert after padding
    order = torch.argsort(flat, stable=True)  # pair indices grouped by expert
    expert_of = flat[order]
    rank = torch.arange(n, device=ids.device) - (torch.cumsum(counts, 0) - counts)[expert_of]
    dest = (torch.cumsum(padded, 0) - padded)[expert_of] + rank  # padded row of each sorted pair
    rows = padded_rows(n, num_experts, block_m)
    sorted_pairs = torch.full((rows,), n, dtype=torch.int32, device=ids.device)
    sorted_pairs[dest] = order.to(torch.int32)
    tile_ends = torch.cumsum(padded // block_m, 0)  # (E,) one past each expert's last tile
    tiles = torch.arange(rows // block_m, device=ids.device)
    block_expert = torch.searchsorted(tile_ends, tiles, right=True)  # E for tiles past the end
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_pairs, block_expert


def rel_rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative RMS error of `a` against `b`: the measure low-precision GEMMs are judged by."""
    return ((a.float() - b.float()).pow(2).mean().sqrt() / b.float().pow(2).mean().sqrt()).item()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., N) -> weight * (x * rsqrt(mean(x^2) + eps)) in fp32, rounded to x's dtype before the weight."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """s = x + residual -> (s, rms_norm(s)): the residual stream and the next sublayer's input."""
    s = x + residual
    return s, rms_norm(s, weight, eps)


def route(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
          scale: float, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`llada.model.Router` as a function: h (T, H) -> ids (T, K) int64, weights (T, K) fp32; shared: one more
    column, the shared expert's id E with weight 1 (`fused_moe_bf16`'s `shared`)."""
    router = Router.__new__(Router)
    nn.Module.__init__(router)
    router.weight, router.top_k, router.n_group, router.topk_group, router.scale = (weight, top_k, n_group,
                                                                                   topk_group, scale)
    router.register_buffer("expert_bias", bias)
    ids, w = router(h)
    if shared:
        ids = torch.cat([ids, ids.new_full((h.shape[0], 1), weight.shape[0])], dim=1)  # (T, K + 1)
        w = torch.cat([w, w.new_ones(h.shape[0], 1)], dim=1)
    return ids, w


def route_add_norm(h: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                   weight: torch.Tensor, bias: torch.Tensor, top_k: int, n_group: int, topk_group: int,
                   scale: float, shared: bool = False) -> tuple[torch.Tensor, ...]:
    """The post-attention half of an MoE layer up to the experts: s = residual + h (the residual stream),
    x = RMSNorm(s) (the experts' input) and the router on x -> (s, x, ids, weights)."""
    s, x = add_rms_norm(residual, h, norm_weight, eps)
    return (s, x, *route(x, weight, bias, top_k, n_group, topk_group, scale, shared))


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor,
                 sin: torch.Tensor) -> torch.Tensor:
    """x (B, T, heads, D) -> RMSNorm over D, heads first, RoPE: (B, heads, T, D)."""
    return rope(rms_norm(x, weight, eps).transpose(1, 2), cos, sin)


def qkv_rope_cache(qkv: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, eps: float, cos: torch.Tensor,
                   sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   start: torch.Tensor) -> torch.Tensor:
    """qkv (B, T, nH + 2 nKV, D) -> q (B, nH, T, D) QK-normed and rotated; k (normed, rotated) and v written
    into k_cache / v_cache (B, nKV, S, D) at slots start..start+T-1 (start a 0-d long tensor)."""
    nkv = k_cache.shape[1]
    q, k, v = qkv.split([qkv.shape[2] - 2 * nkv, nkv, nkv], dim=2)
    slots = start + torch.arange(qkv.shape[1], device=qkv.device)  # (T,)
    k_cache.index_copy_(2, slots, qk_norm_rope(k, wk, eps, cos, sin))
    v_cache.index_copy_(2, slots, v.transpose(1, 2))
    return qk_norm_rope(q, wq, eps, cos, sin)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation: silu(gate) * up, (..., I)."""
    return F.silu(gate) * up


def window_mask(bounds: torch.Tensor, T: int, S: int, block_length: int) -> torch.Tensor:
    """Bool (T, S): query i of the window [lo, hi) sees key slot j (`llada.fast.kernels.masks` has the rule)."""
    lo, hi, groups_hi = bounds[0], bounds[1], bounds[2]
    keys = torch.arange(S, device=bounds.device)  # (S,)
    query_group = torch.minimum((lo + torch.arange(T, device=bounds.device)) // block_length, groups_hi)  # (T,)
    key_group = torch.minimum(keys // block_length, groups_hi)  # (S,)
    in_window = (keys < hi) & (key_group[None, :] <= query_group[:, None])  # (T, S)
    return in_window | (keys < lo)[None, :]


def step_mask(bounds: torch.Tensor, T: int, S: int, block_length: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive form of `window_mask` in `dtype`, (T, S): 0 where a query sees a key, -inf elsewhere."""
    return torch.zeros((), dtype=dtype, device=bounds.device).masked_fill(
        ~window_mask(bounds, T, S, block_length), float("-inf"))
