"""Loading a real-format checkpoint: time, peak host and device memory; then decode speed at S and Q.

    python -m llada.bench load --shape load --device cpu --dtype bfloat16 --gen-length 0   # ~2.2 GB, CPU
    python -m llada.bench load --shape mini --device cuda                                    # full mini, bf16
    python -m llada.bench load --shape mini --device cuda --quantize fp8                     # full mini, fp8

Without `--model`, a replica of `--shape` (`llada.weights.replica`: the published config keys, sharded bf16
with per-expert names, the tokenizer; random weights) is written to `--workdir` first, or reused.
The load is measured in a fresh child process that does nothing else: it imports the engine, notes
its resident memory, then loads the directory the way the playground does (`Pipeline.load` with the
app's device and the default dtype: the checkpoint's on CUDA, fp32 on the CPU for small models), and
reports the load's wall time, the process's peak RSS (VmHWM), the peak CUDA memory, and the
ratios to the checkpoint's size and to the loaded weights. It then decodes a chat prompt in the S and
Q modes and reports forwards/s, TPF and TPS (random weights: the model never becomes confident, so
TPF is near 1 and every block spends its post steps; forwards/s is the figure that carries over).
JSON goes to bench/results/load-<device>[-<quantize>].json with the date and the device's name.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch

from .timing import write_report

PROMPT = "Write a Python function that returns the n-th Fibonacci number."
GIB = float(1 << 30)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench load", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a model directory (default: a replica of --shape)")
    parser.add_argument("--shape", default="load", help="replica shape: tiny, load (~2.2 GB) or mini (~32 GB)")
    parser.add_argument("--workdir", default="/tmp/llada-replicas", help="where replicas are written and reused")
    parser.add_argument("--device", default="auto", help="cpu, cuda; auto: cuda when available")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"))
    parser.add_argument("--quantize", default="none", choices=("none", "fp8", "fp8-dense", "int8"))
    parser.add_argument("--gen-length", type=int, default=128, help="tokens per decode run (0: load only)")
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/load-<device>.json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # the measuring process
    args = parser.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    model = Path(args.model) if args.model else replica(args.shape, Path(args.workdir))
    child = [sys.executable, "-m", "llada.bench", "load", "--child", "--model", str(model), "--device", args.device,
             "--dtype", args.dtype, "--quantize", args.quantize, "--gen-length", str(args.gen_length),
             "--block-length", str(args.block_length)] + (["--threads", str(args.threads)] if args.threads else [])
    print(f"[load] measuring in a fresh process: {' '.join(child[1:])}", file=sys.stderr)
    done = subprocess.run(child, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=False, text=True)
    if done.returncode:
        print(f"[load] the measuring process failed (exit {done.returncode})", file=sys.stderr)
        return done.returncode
    report = {"bench": "load", "date": date.today().isoformat(), "shape": None if args.model else args.shape,
              **json.loads(done.stdout.strip().splitlines()[-1])}
    suffix = "" if args.quantize == "none" else f"-{args.quantize}"
    out = write_report(report, args.out, f"bench/results/load-{args.device}{suffix}.json")
    print(summary(report) + f"; wrote {out}", file=sys.stderr)
    return 0


def replica(shape: str, workdir: Path, version: str = "2.1") -> Path:
    """The replica of `shape` (and LLaDA `version`) in `workdir`, written once (its index is written last:
    present = complete)."""
    from ..weights.replica import write_replica

    out = workdir / f"llada{version}-{shape}-replica"
    if not (out / "model.safetensors.index.json").exists() or not (out / "tokenizer.json").exists():
        print(f"[load] writing a {shape} replica to {out}", file=sys.stderr)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        write_replica(out, shape, shard_bytes=1 << 30 if shape != "tiny" else None, device=device, progress=True,
                      version=version)
    return out


def measure(args: argparse.Namespace) -> dict:
    """In the child: load as the app does, then decode; every figure of the report but the date."""
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..pipeline import Pipeline

    root, device = Path(args.model), torch.device(args.device)
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    quantize = None if args.quantize == "none" else args.quantize
    baseline = _rss_now()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    pipe = Pipeline.load(root, dtype=dtype, device=str(device), quantize=quantize, progress=True,
                         decode_check=False)  # a replica's random weights tie everywhere: the layer check only
    _sync(device)
    report = load_report(pipe, root, device, quantize, time.perf_counter() - start, baseline)
    if args.gen_length > 0:
        report["decode"] = {mode: decode(pipe, mode, args.gen_length, args.block_length, device)
                            for mode in ("S", "Q")}
        if device.type == "cuda":
            report["peak_cuda_bytes_with_decode"] = torch.cuda.max_memory_allocated(device)
    return report


def load_report(pipe, root: Path, device: torch.device, quantize: str | None, seconds: float, baseline: int) -> dict:
    from ..weights.memory import weight_bytes

    cfg, dtype, peak = pipe.model.config, pipe.model.dtype, _peak_rss()
    checkpoint = sum(f.stat().st_size for f in root.glob("*.safetensors"))
    weights = weight_bytes(cfg, dtype, quantize)
    report = {"device": _device_name(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "model": str(root), "dtype": str(dtype).removeprefix("torch."), "quantize": quantize or "none",
              "parameters": sum(cfg.parameter_counts().values()), "checkpoint_bytes": checkpoint,
              "weights_bytes": weights, "load_seconds": round(seconds, 3), "rss_before_load_bytes": baseline,
              "peak_rss_bytes": peak, "peak_rss_over_checkpoint": round(peak / checkpoint, 3)}
    if device.type == "cuda":
        top = torch.cuda.max_memory_allocated(device)
        report |= {"peak_cuda_bytes": top, "peak_cuda_over_weights": round(top / weights, 3)}
    return report


def decode(pipe, mode: str, gen_length: int, block_length: int, device: torch.device) -> dict:
    ids = pipe.encode(PROMPT) if pipe.tokenizer is not None else list(range(1, 17))
    cfg = pipe.config(mode, gen_length=gen_length, block_length=block_length)
    pipe.generate(ids, cfg.with_(gen_length=block_length))  # warm-up (kernels, caches)
    _sync(device)
    start = time.perf_counter()
    trace = pipe.generate(ids, cfg)
    _sync(device)
    seconds = time.perf_counter() - start
    return {"threshold": cfg.threshold, "editing_threshold": cfg.editing_threshold, "prompt_tokens": len(ids),
            "gen_length": gen_length, "block_length": block_length, "tokens": len(trace.output_ids),
            "forwards": trace.forwards, "seconds": round(seconds, 3),
            "forwards_per_s": round(trace.forwards / seconds, 2), "tpf": round(trace.tpf, 3),
            "tps": round(len(trace.output_ids) / seconds, 2)}


def summary(r: dict) -> str:
    line = (f"[load] {r['checkpoint_bytes'] / GIB:.2f} GiB checkpoint -> {r['dtype']} on {r['device']}: "
            f"{r['load_seconds']:.1f} s, peak RSS {r['peak_rss_bytes'] / GIB:.2f} GiB "
            f"({r['peak_rss_over_checkpoint']:.2f}x the checkpoint)")
    if "peak_cuda_bytes" in r:
        line += f", peak CUDA {r['peak_cuda_bytes'] / GIB:.2f} GiB ({r['peak_cuda_over_weights']:.2f}x the weights)"
    for mode, d in r.get("decode", {}).items():
        line += f"; {mode}: {d['forwards_per_s']} forwards/s, TPS {d['tps']}"
    return line


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def _peak_rss() -> int:
    """This process image's peak resident memory: VmHWM (ru_maxrss would carry a forking parent's over exec)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
