"""Each launch of the FP8 MoE layer timed on its own: where the layer's time outside the GEMMs goes.

    python -m llada.bench.lease_engine moe-launches OUT.json [--dry-run]

The first lease (H200) timed the mini's FP8 MoE layer at M = 1, 8, 32 tokens at 108 / 158 / 249 us and its
GEMM launches alone (gate/up, SiLU·mul, down) at 24 / 73 / 156 us: 83 to 94 us per layer went elsewhere,
about 1.7 ms of a 20-layer forward. The second lease found the router at 68 us of them; since then the layer
is eight launches at these sizes (`bench.kernels.fused_plan`; above 256 tokens `_route_kernel` does both
router parts in one):

    router     `_route_logits_kernel`   router logits over 16-expert tiles, fp32 into a scratch buffer
    top-k      `_route_select_kernel`   sigmoid, group-limited top-k
    sort       `_align_kernel`          (token, expert) pairs sorted by expert, runs padded (one program)
    quantize   `_act_kernel`            the tokens' activations to FP8, one scale per 128
    up         `_up_kernel`             the gate/up grouped GEMM
    silu       `_silu_kernel`           SiLU·mul of gate and up, re-quantized to FP8
    down       `_down_kernel`           the down grouped GEMM, times the routing weight
    k-sum      `_ksum_kernel`           each token's K rows summed

Per M, the layer is run once (so that every launch's inputs hold real data), then each launch is timed
two ways (all launches are idempotent: each writes its outputs from its inputs):

    alone      the launch recorded in a CUDA graph of its own and timed as `bench kernels` times the
               layer (`timing.time_ms`: L2 flushed before every replay, median): its own cost
    in order   the whole layer run eagerly behind a sleep kernel long enough for the host to queue every
               launch (so Python's launch overhead is hidden), a CUDA event between launches, L2 flushed
               first, median over RUNS: each launch's time where it sits, the gap before it included

beside the layer's graph and its GEMM launches' graph timed as `bench kernels` does. `host_ahead` says in
how many of the runs the host had queued every launch before the GPU reached the first (else the in-order
times include host time and say so). `--dry-run`: the smoke shape on the CPU under Triton's interpreter,
wall clock per launch: the same code path, numbers that only show it works.
"""

from __future__ import annotations

import statistics
import time

import torch

TOKENS = (1, 8, 32)
RUNS = 30  # in-order runs per M on a GPU
SLEEP_CYCLES = 20_000_000  # ~10 ms at ~2 GHz: seven Triton launches take the host well under that
FLUSH_BYTES = 256 << 20  # what do_bench zeroes: more than an H100's or H200's L2
PARTS = {"_route_kernel": "router", "_route_logits_kernel": "router", "_route_select_kernel": "top-k",
         "_align_kernel": "sort", "_act_kernel": "quantize", "_up_kernel": "up",
         "_silu_kernel": "silu", "_down_kernel": "down", "_ksum_kernel": "k-sum"}
GEMMS = ("up", "silu", "down")


def in_order_ms(launches: list, device: torch.device, runs: int) -> tuple[list[float], int]:
    """Median ms of each launch run in order (see the module doc), and the runs where the host kept ahead."""
    if device.type != "cuda":
        times = []
        for _ in range(runs):
            row = []
            for launch in launches:
                begun = time.perf_counter()
                launch()
                row.append((time.perf_counter() - begun) * 1e3)
            times.append(row)
        return [statistics.median(col) for col in zip(*times)], runs
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(len(launches) + 1)]
    times, ahead = [], 0
    for _ in range(runs):
        flush.zero_()
        torch.cuda._sleep(SLEEP_CYCLES)  # the GPU waits while the host queues the launches below
        events[0].record()
        for launch, event in zip(launches, events[1:]):
            launch()
            event.record()
        ahead += not events[0].query()  # the GPU had not reached the first launch when the last was queued
        torch.cuda.synchronize(device)
        times.append([a.elapsed_time(b) for a, b in zip(events, events[1:])])
    return [statistics.median(col) for col in zip(*times)], ahead


def tokens_row(M: int, layer, shape: dict, device: torch.device, runs: int) -> dict:
    """One token count: each launch alone and in order, the layer and its GEMMs as `bench kernels` times them."""
    from .kernels import fused_plan, layer_input
    from .timing import graphed, sync, time_ms
    from ..fast.kernels.launch import run

    x = layer_input(M, shape, device, layer.router_w.dtype)
    _, launches, gemm = fused_plan(x, layer, shape)
    run(launches)  # every buffer a later launch reads now holds this layer's data
    sync(device)
    # on the CPU (a dry run: interpreted kernels, seconds a layer) one call each, the layer having just run
    iters, warmup = (20, 1) if device.type == "cuda" else (1, 0)
    names = [PARTS.get(launch.name, launch.name) for launch in launches]
    alone = [time_ms(graphed(launch, device), device, iters, warmup) for launch in launches]
    order, ahead = in_order_ms(launches, device, runs)
    layer_ms = time_ms(graphed(lambda: run(launches), device), device, iters, warmup)
    gemm_ms = time_ms(graphed(lambda: run(gemm), device), device, iters, warmup)
    return {"tokens": M, "launches": [{"part": n, "kernel": launch.name, "grid": list(launch.grid),
                                       "alone_us": round(1e3 * a, 2), "in_order_us": round(1e3 * o, 2)}
                                      for n, launch, a, o in zip(names, launches, alone, order)],
            "layer_us": round(1e3 * layer_ms, 2), "gemm_us": round(1e3 * gemm_ms, 2),
            "outside_gemms_us": round(1e3 * (layer_ms - gemm_ms), 2),
            "in_order_sum_us": round(1e3 * sum(order), 2), "host_ahead": f"{ahead} of {runs}"}


def launches_step(dry_run: bool) -> dict:
    """The FP8 MoE layer of the mini (smoke shape in a dry run) at M = 1, 8, 32, launch by launch."""
    from .kernels import SHAPES, build

    device = torch.device("cpu" if dry_run else "cuda")
    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("moe-launches times a CUDA GPU; --dry-run runs it on the CPU")
    shape = SHAPES["smoke" if dry_run else "llada2.1-mini"]
    dtype = torch.float32 if dry_run else torch.bfloat16  # CPU bf16 matmuls are emulated
    layer = build(shape, device, dtype, "triton", "fp8")
    rows = [tokens_row(M, layer, shape, device, 1 if dry_run else RUNS) for M in TOKENS]
    return {"shape": "smoke" if dry_run else "llada2.1-mini", "sizes": shape, "rows": rows,
            "timing": ("alone: do_bench of a one-launch CUDA graph, L2 flushed; in order: CUDA events behind a "
                       "sleep kernel, L2 flushed" if not dry_run else "wall clock (dry run)"),
            "figures": [f for row in rows for f in _figures(row, dry_run)]}


def _figures(row: dict, dry_run: bool) -> list[dict]:
    from .timing import figure

    label = "smoke" if dry_run else "mini"
    parts = lambda key: " / ".join(f"{r['part']} {r[key]:.1f}" for r in row["launches"])  # noqa: E731
    first = "the first lease: 108 / 158 / 249 us layer, 24 / 73 / 156 us GEMMs at M = 1 / 8 / 32 (H200)"
    return [figure(f"{label} FP8 MoE layer M={row['tokens']}, each launch alone (us)", parts("alone_us"),
                   f"layer {row['layer_us']:.1f} us, GEMMs {row['gemm_us']:.1f} us", first),
            figure(f"{label} FP8 MoE layer M={row['tokens']}, launches in order (us)", parts("in_order_us"),
                   f"sum {row['in_order_sum_us']:.1f} us; outside the GEMMs {row['outside_gemms_us']:.1f} us; "
                   f"host ahead {row['host_ahead']}", first)]
