"""Batched decoding speed: aggregate tokens/s and per-row latency at each batch size B.

One workload of `--rows` prompts is decoded with B rows at once (`llada.decode.BatchDecoder`,
continuous batching: a finished row's slot goes to the next prompt), for every B, on two models:

* `embedded`: the shipped model (assets/model, fp32) on held-out items of its evaluation tasks, in one
  mode (`--mode`, default S, gen_length 32, the evaluation's settings);
* `random-86m`: LLaDA2.1-mini's proportions with its real vocabulary (157184) and 4 layers, 86.5 M
  parameters, random weights, fp32; random prompts of 8 to 40 tokens, editing off, τ_mask 0.9 (a
  random model drafts one token per forward).

Aggregate tokens/s = output tokens of the workload / its wall time. A row's latency is the wall time
from the round it joined to the round of its last record. Batch sizes run interleaved (each repeat
runs every B in turn), so a load that changes over time shows in every B alike; every run's numbers
are kept with the machine's load average, and the medians. Every run also checks that each row's
output equals its B = 1 output.

    python -m llada.bench batch [--models embedded random-86m] [--sizes 1 2 4 8 16 32] [--threads 2]

On a CPU shared with other jobs, OpenMP threads that spin while they wait for each other make a
2-thread forward up to ~60x slower than one thread (measured: 583 ms against 8.7 ms for the same
forward); `OMP_WAIT_POLICY=PASSIVE` in the environment lets them sleep instead, and the report keeps
the setting it ran under.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from ..decode import BatchDecoder
from ..config import DecodeConfig, ModelConfig
from ..trace import Trace
from .decode import MINI_PROPORTIONS
from .forward import random_model
from .timing import device_info, start, sync, write_report

EMBEDDED = Path(__file__).resolve().parents[2] / "assets" / "model"
RANDOM_86M = MINI_PROPORTIONS | {"vocab_size": 157184, "num_hidden_layers": 4}
MODELS = ("embedded", "random-86m")


def workload(name: str, rows: int, mode: str, device: torch.device):
    """(model, prompts, settings, mask id, eos id) of one model's workload."""
    if name == "embedded":
        from ..data.tasks import TASKS, eval_items
        from ..pipeline import Pipeline

        pipe = Pipeline.load(EMBEDDED, device=str(device))
        per_task = -(-rows // len(TASKS))
        items = [item for task in TASKS for item in eval_items(task, per_task, seed=0)]
        items = [items[i] for i in random.Random(0).sample(range(len(items)), rows)]  # tasks mixed in every batch
        cfg = pipe.config(mode, gen_length=32)
        return pipe.model, [pipe.encode(item.prompt) for item in items], cfg, pipe.mask_id, pipe.eos_id
    cfg_model = ModelConfig(**RANDOM_86M)
    model = random_model(cfg_model, device, torch.float32)
    vocab = cfg_model.vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(vocab - 2) for _ in range(rng.randint(8, 40))] for _ in range(rows)]
    cfg = DecodeConfig(threshold=0.9, editing_threshold=None, gen_length=16, block_length=16)
    return model, prompts, cfg, vocab - 1, vocab - 2


def run_one(model, prompts, cfg, mask_id: int, eos_id: int, size: int) -> tuple[dict, list[list[int]]]:
    """Decode the workload `size` rows at a time; its numbers and every row's output."""
    traces = [Trace(prompt_ids=p, settings=cfg, mask_id=mask_id, eos_id=eos_id) for p in prompts]
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=size)
    for p in prompts:
        batch.add(p, cfg)
    joined, ended, rounds = {}, {}, 0
    sync(model.device)
    start = time.perf_counter()
    while not batch.finished:
        began = time.perf_counter()
        records = batch.step()
        sync(model.device)
        now = time.perf_counter()
        rounds += 1
        for row, record in records:
            joined.setdefault(row, began)
            ended[row] = now
            traces[row].add(record)
    seconds = time.perf_counter() - start
    tokens = sum(len(t.output_ids) for t in traces)
    latency = sorted(ended[i] - joined[i] for i in range(len(prompts)))
    return {"batch": size, "rows": len(prompts), "tokens": tokens, "seconds": round(seconds, 4),
            "tokens_per_s": round(tokens / seconds, 2), "model_calls": rounds,
            "row_forwards": sum(t.forwards for t in traces),
            "latency_mean_s": round(statistics.mean(latency), 4), "latency_p50_s": round(latency[len(latency) // 2], 4),
            "latency_p90_s": round(latency[int(0.9 * (len(latency) - 1))], 4),
            "load_average_1min": round(os.getloadavg()[0], 2)}, [t.output_ids for t in traces]


def bench_model(name: str, args, device: torch.device) -> dict:
    model, prompts, cfg, mask_id, eos_id = workload(name, args.rows, args.mode, device)
    params = sum(p.numel() for p in model.parameters())
    print(f"[batch] {name}: {params / 1e6:.1f} M parameters, {len(prompts)} rows", file=sys.stderr)
    run_one(model, prompts[:2], cfg, mask_id, eos_id, 2)  # warm-up, not kept
    runs, reference = [], None
    for repeat in range(args.repeats):
        for size in args.sizes:
            result, outputs = run_one(model, prompts, cfg, mask_id, eos_id, size)
            reference = outputs if reference is None and size == 1 else reference
            result |= {"repeat": repeat, "outputs_equal_b1": None if reference is None else outputs == reference}
            runs.append(result)
            print(_line(name, result), file=sys.stderr)
    medians = {size: statistics.median(r["tokens_per_s"] for r in runs if r["batch"] == size) for size in args.sizes}
    base = medians.get(1)
    return {"model": name, "parameters": params, "settings": cfg.to_dict(), "runs": runs,
            "median_tokens_per_s": medians,
            "speedup_vs_b1": {s: round(m / base, 2) for s, m in medians.items()} if base else None}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench batch", description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--rows", type=int, default=32, help="prompts in the workload (default 32)")
    parser.add_argument("--mode", default="S", help="the embedded model's mode (default S)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved passes over the sizes (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/batch-<device>.json)")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or args.rows < 1 or args.repeats < 1:
        parser.error("--sizes, --rows and --repeats must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    device = start(args.threads)
    report = device_info(device) | {"bench": "batch", "threads": torch.get_num_threads(),
                                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "rows": args.rows,
                                    "repeats": args.repeats, "models": [bench_model(m, args, device)
                                                                        for m in args.models]}
    out = write_report(report, args.out, f"bench/results/batch-{device.type}.json")
    for m in report["models"]:
        line = ", ".join(f"B={s}: {v:.1f}" for s, v in m["median_tokens_per_s"].items())
        print(f"{m['model']}: median aggregate tokens/s {line}; vs B=1: {m['speedup_vs_b1']}")
    print(f"wrote {out}")
    return 0


def _line(name: str, r: dict) -> str:
    return (f"{name} B={r['batch']:2d}: {r['tokens_per_s']:8.1f} tokens/s, {r['tokens']} tokens in "
            f"{r['seconds']:.2f} s, {r['model_calls']} model calls, row latency mean {r['latency_mean_s']:.3f} s "
            f"p90 {r['latency_p90_s']:.3f} s, "
            f"same outputs as B=1: {r['outputs_equal_b1']}")
