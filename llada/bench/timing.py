"""How the benchmarks time things and say where they ran.

On CUDA, `time_ms` is `triton.testing.do_bench`: CUDA events around each call, with a 256 MB buffer
zeroed before every call so that the L2 cache (50 MB on an H100) holds nothing from the last one: a
decode-sized MoE layer at M = 1 reads ~25 MB of weights and would otherwise be timed from L2. The
median over the repetitions is reported. `graphed(fn)` records fn in a CUDA graph (after a warm-up on
a side stream) and returns its replay, so that host launch overhead is measured the way the decode
loop pays it. On CPU both fall back to wall-clock medians (smoke runs: the numbers only show that the
path works). `device_info` is the header every JSON report carries: GPU, driver, CUDA, versions, date.
Every benchmark's `main` opens with `start(threads)` (torch's thread count, the device) and ends with
`write_report(report, out, default)` (the JSON under bench/results/ unless `--out` names another file).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch


def start(threads: int | None) -> torch.device:
    """A benchmark's opening: torch's CPU threads set to `threads` (None: torch's choice); the device it
    measures, CUDA where there is one."""
    if threads:
        torch.set_num_threads(threads)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def write_report(report: dict, out: str | Path | None, default: str | Path) -> Path:
    """Write `report` as indented JSON to `out` (the `--out` argument), else to `default`; returns the path."""
    path = Path(out or default)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, iters: int = 20, warmup: int = 1) -> float:
    """Median milliseconds of fn(): on CUDA do_bench (L2 flushed, ~100 ms of repetitions), else `iters` calls."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """fn recorded as a CUDA graph (warmed up on a side stream first); returns its replay. CPU: fn."""
    if device.type != "cuda":
        return fn
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    sync(device)
    return graph.replay


def copy_gb_per_s(device: torch.device, nbytes: int, iters: int) -> float:
    """Measured device copy bandwidth: dst.copy_(src) moves nbytes in and nbytes out."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    return 2 * nbytes / (time_ms(lambda: dst.copy_(src), device, iters) / 1e3) / 1e9


def device_info(device: torch.device) -> dict:
    """Where a benchmark ran: GPU name, driver, CUDA, SMs, memory, versions, date (UTC)."""
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device.type,
            "torch": torch.__version__, "python": platform.python_version(), "host_cpu": platform.machine()}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {"gpu": props.name, "sms": props.multi_processor_count,
                 "memory_gb": round(props.total_memory / 2**30, 1),
                 "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda, "driver": _driver_version()}
    return info


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def figure(name: str, measured, target: str, paper: str = "-", ok: bool | None = None) -> dict:
    """One measured number beside what it should be and what the paper gives (a lease summary's `figures`)."""
    return {"figure": name, "measured": measured, "target": target, "paper": paper, "ok": ok}


def short_commit() -> str:
    """This checkout's short commit ("" outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip()
    except OSError:
        return ""


def cpu_report(bench: str, argv: list[str], began: float, threads: int, **fields) -> dict:
    """A CPU benchmark's JSON head (its command, commit, machine, load average, seconds since `began`) + fields."""
    return {"command": f"python -m llada.bench {bench} " + " ".join(argv), "commit": short_commit(),
            "machine": device_info(torch.device("cpu")) | {"threads": threads},
            "load_average": list(os.getloadavg()), "seconds": round(time.perf_counter() - began, 1)} | fields


def emit(report: dict, out: str | None) -> None:
    """Print a report as JSON, and write it to `out` when given."""
    text = json.dumps(report, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print(text)
