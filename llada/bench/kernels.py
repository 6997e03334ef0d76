"""One MoE layer at M tokens: the FP8 kernels against bf16 PyTorch and against the copy bandwidth.

Per M (tokens in the call; the mini shape: H 2048, I 512, 256 experts, top-8 in 4 of 8 groups):

    layer      router logits + top-k + sort + quantize + gate/up + down + k-sum (8 launches; 7 above 256 tokens)
    gemm       the gate/up and down GEMMs alone, on the same routed pairs
    reference  `llada.model.Experts` in bf16 (loop over touched experts) on the same routing
    grouped_mm `torch._grouped_mm` in bf16 (two grouped GEMMs), where this PyTorch and GPU have it

On CUDA each FP8 variant is recorded in a CUDA graph and timed with `triton.testing.do_bench`, which
zeroes a 256 MB buffer before every replay: the L2 cache holds no weights from the previous call.
Bytes: `weight_bytes` = fp8 weights + tile scales of the experts the routing touches (what a layer
must stream at least once); `layer_bytes` adds the bf16 router weight, x in and out. GB/s = bytes /
median time, reported as a share of the measured device copy bandwidth (read + write of 2 GB).

`--tune` measures the configurations of `llada.fast.kernels.configs.candidates` on the GEMMs at each M
(tile heights: the default's and the next; pipeline depths `--tune-stages`, 3 and 4 unless given;
each candidate first checked against the default configuration's output) and writes the winners, with
every candidate's time, to `llada/fast/kernels/tuned/<gpu>.json` (after each M, so a tune cut short
keeps what it measured), which the kernels then use.

    python -m llada.bench kernels [--tokens 1 8 32 128 512] [--impl auto] [--weights fp8|bf16] [--tune] [--out PATH]

`--weights bf16` measures (and tunes) the same grouped GEMMs on bf16 weights, the path of GPUs without
FP8 (sm80, sm86); its tuned entries are kept apart from the FP8 ones (shape key suffix "-bf16").

Without CUDA it runs the smoke shape (the reference kernels, or Triton's interpreter with
--impl triton and TRITON_INTERPRET=1) and says so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..fast import kernels
from ..fast.kernels import configs
from ..fast.kernels.launch import run
from ..fast.kernels.reference import rel_rmse
from ..model import Experts
from .timing import copy_gb_per_s, device_info, graphed, start, time_ms, write_report

SHAPES = {  # hidden H, expert width I, experts E, experts per token K, router groups
    "llada2.1-mini": {"hidden": 2048, "inner": 512, "experts": 256, "top_k": 8, "n_group": 8, "topk_group": 4},
    "smoke": {"hidden": 192, "inner": 40, "experts": 8, "top_k": 2, "n_group": 2, "topk_group": 1},  # partial tiles
}
ROUTED_SCALE = 2.5


@dataclass
class Layer:
    experts: Experts  # bf16 (fp32 on CPU) reference weights
    router_w: torch.Tensor  # (E, H)
    bias: torch.Tensor  # (E,)
    fused: tuple  # the fused kernels' experts: (w13, w13_scale, w2, w2_scale) in FP8, (w13, None, w2, None) bf16

    @property
    def fp8(self) -> bool:
        return self.fused[1] is not None

    @property
    def fp32(self) -> bool:
        """fp32 expert weights (the CPU stand-in): 4-byte tiles, no tensor cores (`configs.smem_bytes`)."""
        return self.fused[0].dtype == torch.float32


def build(shape: dict, device: torch.device, dtype: torch.dtype, impl: str, weights: str = "fp8") -> Layer:
    g = torch.Generator(device=device).manual_seed(0)
    E, H, I = shape["experts"], shape["hidden"], shape["inner"]
    experts = Experts(E, H, I).to(device=device, dtype=dtype).requires_grad_(False)
    experts.w13.normal_(0, H ** -0.5, generator=g)
    experts.w2.normal_(0, I ** -0.5, generator=g)
    router_w = torch.randn(E, H, device=device, generator=g).to(dtype) * H ** -0.5
    if weights == "fp8":
        fused = (*kernels.quantize_weight_fp8(experts.w13, impl=impl),
                 *kernels.quantize_weight_fp8(experts.w2, impl=impl))
    else:
        fused = (experts.w13, None, experts.w2, None)
    return Layer(experts, router_w, torch.zeros(E, device=device), fused)


def route_reference(x: torch.Tensor, layer: Layer, shape: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The routing the references use (the model's Router math): ids (M, K), weights (M, K)."""
    from ..config import ModelConfig
    from ..model import Router

    cfg = ModelConfig(vocab_size=2, hidden_size=shape["hidden"], num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1,
                      intermediate_size=1, moe_intermediate_size=shape["inner"], num_experts=shape["experts"],
                      num_experts_per_tok=shape["top_k"], n_group=shape["n_group"], topk_group=shape["topk_group"],
                      routed_scaling_factor=ROUTED_SCALE)
    router = Router(cfg).to(x.device)
    router.weight.data, router.expert_bias.data = layer.router_w.float(), layer.bias
    return router(x)


def fused_plan(x: torch.Tensor, layer: Layer, shape: dict, config=None) -> tuple[torch.Tensor, list, list]:
    """The output buffer, the layer's launches (8 in FP8 up to 256 tokens, 7 above) and its GEMM launches
    (gate/up, SiLU·mul, down)."""
    from ..fast.kernels import fused_moe, router

    ids, weights, routing, _ = router.plan_route(x, layer.router_w, layer.bias, shape["top_k"], shape["n_group"],
                                                 shape["topk_group"], ROUTED_SCALE)
    out, moe = fused_moe.plan_fused_moe(x, *layer.fused, ids, weights, config)
    gemm = [launch for launch in moe if launch.name in ("_up_kernel", "_silu_kernel", "_down_kernel")]
    return out, routing + moe, gemm


def layer_input(M: int, shape: dict, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Seeded activations (M, H) for a measurement at M tokens."""
    g = torch.Generator(device=device).manual_seed(M)
    return torch.randn(M, shape["hidden"], device=device, generator=g).to(dtype)


def weight_bytes(ids: torch.Tensor, shape: dict, fp8: bool = True) -> int:
    """Weights (+ fp32 tile scales in FP8) of the experts that `ids` touches: what a layer must stream."""
    H, I = shape["hidden"], shape["inner"]
    scales = 4 * (-(-2 * I // 128) * -(-H // 128) + -(-H // 128) * -(-I // 128))
    per_expert = 3 * H * I + scales if fp8 else 2 * 3 * H * I
    return int(ids.unique().numel()) * per_expert


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


def bench_tokens(M: int, layer: Layer, shape: dict, impl: str, iters: int) -> dict:
    device, dtype = layer.router_w.device, layer.router_w.dtype
    x = layer_input(M, shape, device, dtype)
    ids, weights = route_reference(x, layer, shape)
    row = {"tokens": M, "experts_touched": int(ids.unique().numel()),
           "weight_bytes": weight_bytes(ids, shape, layer.fp8)}
    row["layer_bytes"] = row["weight_bytes"] + layer.router_w.numel() * layer.router_w.element_size() + 2 * x.nbytes
    if impl == "triton":
        out, launches, gemm = fused_plan(x, layer, shape)
        run(launches)  # fills the routing and quantized buffers the GEMM-only timing reads
        row["config"] = configs.choose_config(M, shape["hidden"], shape["inner"], shape["experts"], shape["top_k"],
                                              _spec(device), layer.fp8).to_dict()
        row["layer_ms"] = time_ms(graphed(lambda: run(launches), device), device, iters)
        row["gemm_ms"] = time_ms(graphed(lambda: run(gemm), device), device, iters)
    else:  # the PyTorch reference kernels: no launch lists, so no GEMM-only time
        row["layer_ms"] = time_ms(lambda: fused_reference(x, layer, *route_reference(x, layer, shape), impl),
                                  device, iters)
        out = fused_reference(x, layer, ids, weights, impl)
    row["reference_ms"] = time_ms(lambda: layer.experts(x, ids, weights), device, iters)
    row["rel_rmse_vs_reference"] = rel_rmse(out, layer.experts(x, ids, weights))
    row["speedup_vs_reference"] = row["reference_ms"] / row["layer_ms"]
    refusal = grouped_mm_refusal(device)
    if refusal is None:  # the baseline runs here: any error of the timed call is a real one and ends the run
        row["grouped_mm_ms"] = time_ms(lambda: grouped_mm_moe(x, layer.experts.w13, layer.experts.w2, ids, weights),
                                       device, iters)
        row["speedup_vs_grouped_mm"] = row["grouped_mm_ms"] / row["layer_ms"]
    else:
        row["grouped_mm_ms"] = f"unavailable: {refusal}"
    return row


def grouped_mm_refusal(device: torch.device) -> str | None:
    """Why the grouped_mm baseline cannot run on `device` (None: it can).

    Asked once per row with a tiny well-formed bf16 product (two groups of 8 rows, 16 x 16), so what it catches
    is the op's own refusal, never a bug of the measured call: this PyTorch lacks `torch._grouped_mm`, the
    dispatcher has no kernel for the device's backend (NotImplementedError), or the op refuses the GPU (older
    PyTorch runs it on Hopper only: a RuntimeError from its device check). The timed call itself is not
    guarded: a wrong shape, an out-of-memory or a faulting kernel there fails the benchmark."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    a = torch.zeros(16, 16, dtype=torch.bfloat16, device=device)
    b = torch.zeros(2, 16, 16, dtype=torch.bfloat16, device=device)
    offs = torch.tensor([8, 16], dtype=torch.int32, device=device)
    try:
        torch._grouped_mm(a, b, offs=offs)
    except (NotImplementedError, RuntimeError) as err:
        return str(err).splitlines()[0][:120]
    return None


def add_bandwidth(row: dict, copy: float) -> dict:
    row["layer_gb_per_s"] = row["layer_bytes"] / (row["layer_ms"] / 1e3) / 1e9
    row["layer_share_of_copy"] = row["layer_gb_per_s"] / copy
    if "gemm_ms" in row:
        row["gemm_gb_per_s"] = row["weight_bytes"] / (row["gemm_ms"] / 1e3) / 1e9
        row["gemm_share_of_copy"] = row["gemm_gb_per_s"] / copy
    gemm = (f"gemm {row['gemm_ms']:.3f} ms ({100 * row['gemm_share_of_copy']:.1f}% of copy)  "
            if "gemm_ms" in row else "")
    print(f"[kernels] M={row['tokens']:4d}  layer {row['layer_ms']:.3f} ms {row['layer_gb_per_s']:.1f} GB/s "
          f"({100 * row['layer_share_of_copy']:.1f}% of copy)  {gemm}x{row['speedup_vs_reference']:.2f} vs bf16 "
          "reference", file=sys.stderr)
    return row


def fused_reference(x: torch.Tensor, layer: Layer, ids: torch.Tensor, weights: torch.Tensor, impl: str):
    """The fused kernels' contract through `llada.fast.kernels` (the PyTorch references with impl="torch")."""
    if layer.fp8:
        return kernels.fused_moe_fp8(x, *layer.fused, ids, weights, impl=impl)
    return kernels.fused_moe_bf16(x, layer.fused[0], layer.fused[2], ids, weights, impl=impl)


def tune_tokens(M: int, layer: Layer, shape: dict, iters: int, limit: int | None, spec=None,
                stages: tuple[int, ...] = configs.STAGES) -> dict:
    """Time every candidate configuration's GEMMs at M; returns the table row (winner + all times).

    A candidate that does not fit the device's shared memory (`configs.fits`) is skipped before it
    compiles; one that fails to compile, to launch or to agree with the default is skipped with the
    reason: the tuner never stops on a configuration."""
    device, dtype = layer.router_w.device, layer.router_w.dtype
    x = layer_input(M, shape, device, dtype)
    try:
        default = configs.choose_config(M, shape["hidden"], shape["inner"], shape["experts"], shape["top_k"], spec,
                                        layer.fp8, fp32=layer.fp32)
    except ValueError as err:  # no configuration fits this device at all: nothing to compare candidates with
        print(f"[tune] M={M}: {err}; nothing tuned", file=sys.stderr)
        return {"tokens": M, "config": None, "gemm_ms": None, "candidates": [], "skipped": [], "untimed": str(err)}
    expected, launches, _ = fused_plan(x, layer, shape, default)
    run(launches)
    timed, skipped = [], []
    block_ms = tuple(sorted({default.block_m, min(64, 2 * default.block_m)}))  # taller tiles only pad more
    for cfg in configs.candidates(block_ms, stages)[:limit]:
        reason = _try_candidate(cfg, x, layer, shape, expected, spec, iters, timed)
        if reason:
            skipped.append({"config": cfg.to_dict(), "reason": reason})
            print(f"[tune] M={M} skipped {cfg}: {reason}", file=sys.stderr)
    if not timed:  # nothing measured: the launchers keep their default, and the table gets no row for M
        print(f"[tune] M={M}: none of the {len(skipped)} candidates could be timed here; the default "
              f"{default} stays in use", file=sys.stderr)
        return {"tokens": M, "config": default.to_dict(), "gemm_ms": None, "candidates": [], "skipped": skipped,
                "untimed": f"all {len(skipped)} candidates skipped"}
    best = min(timed, key=lambda r: r["gemm_ms"])
    return {"tokens": M, "config": best["config"], "gemm_ms": best["gemm_ms"], "candidates": timed,
            "skipped": skipped}


def _try_candidate(cfg, x, layer: Layer, shape: dict, expected, spec, iters: int, timed: list) -> str | None:
    """Time one candidate into `timed`; the reason it was skipped, or None."""
    if not configs.fits(cfg, spec, layer.fp8, fp32=layer.fp32):
        if layer.fp8 and not spec.fp8:
            return f"FP8 weights need compute capability 8.9 or later; {spec.name} is sm{spec.arch}"
        need = configs.smem_bytes(cfg, layer.fp8, spec.arch, fp32=layer.fp32)
        kernel = max(need, key=need.get)
        return (f"does not fit: {kernel} needs ~{need[kernel]:,} B of shared memory per block, "
                f"{spec.name} has {spec.smem:,} B (not compiled)")
    device = x.device
    try:
        out, launches, gemm = fused_plan(x, layer, shape, cfg)
        run(launches)
        error = rel_rmse(out, expected)
        if not error < 1e-2:  # same fp8 codes; only fp32 sum order differs between configurations
            return f"disagrees with the default configuration (rel. RMSE {error:.3g})"
        timed.append({"config": cfg.to_dict(), "gemm_ms": time_ms(graphed(lambda: run(gemm), device), device, iters)})
    except Exception as err:  # noqa: BLE001  (OutOfResources, a compile error, a launch failure)
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    print(f"[tune] M={x.shape[0]:4d} {timed[-1]['gemm_ms']:.4f} ms  {cfg}", file=sys.stderr)
    return None


def write_tuned(path: Path, shape: dict, rows: list[dict], info: dict, command: str, fp8: bool = True) -> None:
    table = json.loads(path.read_text()) if path.exists() else {"shapes": {}}
    key = configs.shape_key(shape["hidden"], shape["inner"], shape["experts"], shape["top_k"])
    key += "" if fp8 else "-bf16"
    rows = [row for row in rows if row["gemm_ms"] is not None]  # a token count with nothing timed keeps the default
    kept = [r for r in table["shapes"].get(key, []) if r["tokens"] not in {row["tokens"] for row in rows}]
    table["shapes"][key] = sorted(kept + rows, key=lambda r: r["tokens"])
    table |= {"device": info.get("gpu", "cpu"), "date": info["date"], "command": command, "info": info}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")
    configs.load_tuned.cache_clear()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="M values (default 1 8 32 128 512)")
    parser.add_argument("--shape", choices=list(SHAPES), default="llada2.1-mini")
    parser.add_argument("--impl", choices=kernels.IMPLS, default="auto")
    parser.add_argument("--weights", choices=["fp8", "bf16"], default="fp8",
                        help="the experts' weights: FP8 (sm89+) or bf16 (the same grouped GEMMs, any GPU from sm80)")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per measurement on CPU")
    parser.add_argument("--smoke", action="store_true", help="small sizes (automatic without CUDA)")
    parser.add_argument("--tune", action="store_true", help="measure the candidate configurations, write the table")
    parser.add_argument("--tune-limit", type=int, default=None, help="only the first N candidates (smoke runs)")
    parser.add_argument("--tune-stages", type=int, nargs="+", default=list(configs.STAGES),
                        help="pipeline depths the tune tries (4 warps at each, 8 at the shallowest)")
    parser.add_argument("--tune-out", default=None,
                        help="tuned table path (default llada/fast/kernels/tuned/<gpu>.json)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/kernels-<device>.json)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    device = start(args.threads)
    smoke = args.smoke or device.type != "cuda"
    shape_name = "smoke" if smoke else args.shape
    shape, tokens = SHAPES[shape_name], args.tokens or ([1, 8, 32] if smoke else [1, 8, 32, 128, 512])
    iters = args.iters or (2 if smoke else 20)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # CPU bf16 matmuls are emulated
    impl = kernels.resolve_impl(args.impl, torch.empty(0, device=device))
    if args.tune and impl != "triton":
        raise SystemExit("--tune times the Triton kernels: run it on CUDA (or with --impl triton under "
                         "TRITON_INTERPRET=1 for a smoke run)")
    info = device_info(device)
    layer = build(shape, device, dtype, impl, args.weights)
    if args.tune:
        path = Path(args.tune_out or configs.TUNED_DIR / f"{configs.device_slug(info.get('gpu', 'cpu'))}.json")
        for M in tokens:  # the table written after each M: a tune cut short keeps what it measured
            row = tune_tokens(M, layer, shape, iters, args.tune_limit, _spec(device), tuple(args.tune_stages))
            write_tuned(path, shape, [row], info, "python -m llada.bench kernels " + " ".join(argv), layer.fp8)
            print(f"[tune] M={M}: wrote {path}", file=sys.stderr)
    copy = copy_gb_per_s(device, (8 if smoke else 1024) << 20, iters)
    print(f"[kernels] {info.get('gpu', 'cpu')} impl={impl} shape={shape_name} copy {copy:.1f} GB/s", file=sys.stderr)
    rows = [add_bandwidth(bench_tokens(M, layer, shape, impl, iters), copy) for M in tokens]
    report = info | {"bench": "kernels", "smoke": smoke, "impl": impl, "weights": args.weights,
                     "dtype": str(dtype).removeprefix("torch."),
                     "shape": shape_name, "sizes": shape, "tokens": tokens, "copy_gb_per_s": copy, "rows": rows,
                     "timing": "do_bench, L2 flushed, CUDA graph" if device.type == "cuda" else "wall clock (smoke)",
                     "reference": "llada.model.Experts (loop over experts) in " + str(dtype).removeprefix("torch.")}
    out = write_report(report, args.out, f"bench/results/kernels-{device.type}{'-smoke' if smoke else ''}.json")
    print(f"[kernels] wrote {out}", file=sys.stderr)
    return 0


def _spec(device: torch.device):
    from ..fast.kernels.devices import spec_of

    return spec_of(device) if device.type == "cuda" else None
