"""One MoE layer at M tokens: FP8 fused MoE against bf16 PyTorch, and against the copy bandwidth.

Routing is uniform top-K. A layer at batch M touches some experts; their fp8 weights (+ scales) and
the activations are the bytes it must move, so bytes / time is its achieved bandwidth, reported
next to a measured device copy (read + write of a large buffer). Baselines on the same routing: the
bf16 `llada.model.Experts` loop and, where PyTorch has it, `torch._grouped_mm` in bf16.

    python -m llada.bench kernels [--tokens 1 8 32 128 512] [--impl auto] [--out PATH]

On a machine without CUDA it runs a smoke size with the PyTorch reference and says so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import kernels
from ..model import Experts

SHAPES = {  # hidden H, expert width I, experts E, experts per token K
    "llada2.1-mini": {"hidden": 2048, "inner": 512, "experts": 256, "top_k": 8},
    "smoke": {"hidden": 192, "inner": 40, "experts": 8, "top_k": 2},  # partial 128-tiles on purpose
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timeit(fn, device: torch.device, iters: int, warmup: int = 2) -> float:
    """Median seconds of fn() over `iters` calls, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def copy_bandwidth(device: torch.device, nbytes: int, iters: int) -> float:
    """GB/s of dst.copy_(src): nbytes read + nbytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    return 2 * nbytes / timeit(lambda: dst.copy_(src), device, iters) / 1e9


def grouped_mm_moe(x, w13, w2, ids, weights):
    """bf16 baseline with torch._grouped_mm: sort pairs by expert, two grouped GEMMs, weighted sum."""
    T, K = ids.shape
    flat = ids.reshape(-1)
    order = flat.argsort()
    counts = torch.zeros(w13.shape[0], dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    gate, up = torch._grouped_mm(x[order // K], w13.transpose(1, 2), offs=offs).chunk(2, dim=-1)  # (T*K, I)
    y = torch._grouped_mm(F.silu(gate) * up, w2.transpose(1, 2), offs=offs)  # (T*K, H)
    y = y * weights.reshape(-1)[order, None].to(y.dtype)
    return torch.zeros_like(y).index_copy_(0, order, y).view(T, K, -1).sum(1)


def layer_bytes(ids: torch.Tensor, shape: dict, act_bytes: int) -> int:
    """Bytes one FP8 MoE layer must move: touched experts' fp8 weights and scales, x in, out."""
    H, I = shape["hidden"], shape["inner"]
    touched = ids.unique().numel()
    weights = 3 * H * I + 4 * (-(-2 * I // 128) * -(-H // 128) + -(-H // 128) * -(-I // 128))
    return touched * weights + 2 * ids.shape[0] * H * act_bytes


def bench_tokens(M: int, experts: Experts, fp8: tuple, shape: dict, impl: str, iters: int) -> dict:
    device, dtype = experts.w13.device, experts.w13.dtype
    g = torch.Generator(device=device).manual_seed(M)
    x = torch.randn(M, shape["hidden"], device=device, dtype=dtype, generator=g)
    scores = torch.rand(M, shape["experts"], device=device, generator=g)
    ids = scores.topk(shape["top_k"], dim=-1).indices  # (M, K) uniform routing
    weights = torch.rand(M, shape["top_k"], device=device, generator=g)
    t_fp8 = timeit(lambda: kernels.fused_moe_fp8(x, *fp8, ids, weights, impl=impl), device, iters)
    t_ref = timeit(lambda: experts(x, ids, weights), device, iters)
    row = {"tokens": M, "experts_touched": int(ids.unique().numel()), "fp8_ms": t_fp8 * 1e3,
           "reference_ms": t_ref * 1e3, "speedup_vs_reference": t_ref / t_fp8,
           "bytes": layer_bytes(ids, shape, x.element_size())}
    row["fp8_gb_per_s"] = row["bytes"] / t_fp8 / 1e9
    try:
        t_gmm = timeit(lambda: grouped_mm_moe(x, experts.w13, experts.w2, ids, weights), device, iters)
        row |= {"grouped_mm_ms": t_gmm * 1e3, "speedup_vs_grouped_mm": t_gmm / t_fp8}
    except (AttributeError, RuntimeError, NotImplementedError) as err:
        row["grouped_mm_ms"] = f"unavailable: {str(err).splitlines()[0][:120]}"
    return row


def build(shape: dict, device: torch.device, dtype: torch.dtype, impl: str) -> tuple[Experts, tuple]:
    torch.manual_seed(0)
    E, H, I = shape["experts"], shape["hidden"], shape["inner"]
    experts = Experts(E, H, I).to(device=device, dtype=dtype).requires_grad_(False)
    experts.w13.normal_(0, H ** -0.5)
    experts.w2.normal_(0, I ** -0.5)
    w13 = kernels.quantize_weight_fp8(experts.w13, impl=impl)
    w2 = kernels.quantize_weight_fp8(experts.w2, impl=impl)
    return experts, (*w13, *w2)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="M values (default 1 8 32 128 512)")
    parser.add_argument("--shape", choices=list(SHAPES), default="llada2.1-mini")
    parser.add_argument("--impl", choices=kernels.IMPLS, default="auto")
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="small sizes (automatic without CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/kernels-<device>.json)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    smoke = args.smoke or device.type != "cuda"
    shape_name = "smoke" if smoke else args.shape
    shape, tokens = SHAPES[shape_name], args.tokens or ([1, 8, 32] if smoke else [1, 8, 32, 128, 512])
    iters = args.iters or (2 if smoke else 50)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # CPU bf16 matmuls are emulated
    impl = kernels.resolve_impl(args.impl, torch.empty(0, device=device))
    experts, fp8 = build(shape, device, dtype, impl)
    copy = copy_bandwidth(device, (8 if smoke else 1024) << 20, iters)
    print(f"[kernels] {device.type} impl={impl} shape={shape_name} copy {copy:.1f} GB/s", file=sys.stderr)
    rows = [_progress(bench_tokens(M, experts, fp8, shape, impl, iters), copy) for M in tokens]
    report = {"bench": "kernels", "date": date.today().isoformat(), "device": _device_name(device),
              "smoke": smoke, "impl": impl, "dtype": str(dtype).removeprefix("torch."), "shape": shape_name,
              "sizes": shape, "tokens": tokens, "iters": iters, "copy_gb_per_s": copy, "rows": rows,
              "reference": "llada.model.Experts (loop over experts) in dtype", "torch": torch.__version__}
    out = Path(args.out or f"bench/results/kernels-{device.type}{'-smoke' if smoke else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[kernels] wrote {out}", file=sys.stderr)
    return 0


def _progress(row: dict, copy: float) -> dict:
    row["share_of_copy_bandwidth"] = row["fp8_gb_per_s"] / copy
    print(f"[kernels] M={row['tokens']:4d}  fp8 {row['fp8_ms']:.3f} ms  {row['fp8_gb_per_s']:.2f} GB/s "
          f"({100 * row['share_of_copy_bandwidth']:.1f}% of copy)  x{row['speedup_vs_reference']:.2f} "
          "vs reference", file=sys.stderr)
    return row


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
