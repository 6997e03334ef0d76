"""One run at a time, as a playground visitor gets it: tokens/s of a model directory on held-out code.

Each of `--n` held-out functions of the installed Python source (the evaluation's code track, the same
items for the same seed) is decoded alone, in one mode (default S) at `--gen-length` (default 128), KV
cache on, EOS early stop, greedy, on `--threads` CPU threads (a small model's decode forwards run on one,
`llada.fast.team.alone_for`, as in the playground: the report says so). A run's tokens/s = its output tokens / its
wall time (prefill included); the report keeps every run, the median and the aggregate (all tokens / all
seconds), TPF, and the machine's load average before and after.

    python -m llada.bench stream [--model assets/model] [--mode S] [--gen-length 128] [--n 24] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from .batch import EMBEDDED
from .timing import device_info, start, sync, write_report


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench stream", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(EMBEDDED), help="model directory (default assets/model)")
    parser.add_argument("--mode", default="S", help="preset (default S)")
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--n", type=int, default=24, help="held-out functions, one run each (default 24)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/stream-<device>.json)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.gen_length < 1 or args.threads < 1:
        parser.error("--n, --gen-length and --threads must be positive")
    return args


def time_runs(pipe, prompts: list[list[int]], cfg) -> list[dict]:
    """Each prompt decoded alone: tokens, forwards and seconds of each run."""
    pipe.generate(prompts[0], cfg)  # warm-up, not kept
    runs = []
    for ids in prompts:
        sync(pipe.model.device)
        start = time.perf_counter()
        trace = pipe.generate(ids, cfg)
        sync(pipe.model.device)
        seconds = time.perf_counter() - start
        tokens = len(trace.output_ids)
        runs.append({"prompt_tokens": len(ids), "tokens": tokens, "forwards": trace.num_decode_forwards,
                     "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 2)})
    return runs


def main(argv: list[str]) -> int:
    from ..eval.codetrack import held_out_items
    from ..fast.team import alone_for
    from ..pipeline import Pipeline

    args = parse(argv)
    device = start(args.threads)
    pipe = Pipeline.load(args.model, device=device.type)
    items = held_out_items(args.n, args.seed)
    if not items:
        print("no held-out functions found in the installed Python source", file=sys.stderr)
        return 1
    cfg = pipe.config(args.mode, gen_length=args.gen_length)
    load_before = os.getloadavg()[0]
    runs = time_runs(pipe, [pipe.encode(item.prompt) for item in items], cfg)
    tokens, seconds = sum(r["tokens"] for r in runs), sum(r["seconds"] for r in runs)
    report = device_info(device) | {
        "bench": "stream", "model": str(args.model), "mode": args.mode, "settings": cfg.to_dict(),
        "threads": torch.get_num_threads(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "decode_forwards_alone": alone_for(pipe.model, cfg.block_length),  # on one thread whatever `threads` says
        "runs": runs, "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
        "aggregate_tokens_per_s": round(tokens / seconds, 2),
        "tpf": round(tokens / sum(r["forwards"] for r in runs), 3),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    out = write_report(report, args.out, f"bench/results/stream-{device.type}.json")
    alone = " (each decode forward alone on one)" if report["decode_forwards_alone"] else ""
    print(f"{args.mode} at gen_length {args.gen_length}, {len(runs)} runs one at a time on {report['threads']} "
          f"thread(s){alone}: median {report['median_tokens_per_s']:.1f} tokens/s, aggregate "
          f"{report['aggregate_tokens_per_s']:.1f}, TPF {report['tpf']:.2f}; wrote {out}")
    return 0
