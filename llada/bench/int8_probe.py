"""What the int8 benchmarks measure with: random token ids, timed forwards over a KV cache, the bytes a model
holds, this process's RSS and its peak, and where a measurement was taken (commit, machine, load).

Shared by `llada.bench int8` (int8 against bf16) and `llada.bench int8_only` (the int8 model alone).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time

import torch


def random_ids(vocab: int, n: int, seed: int, avoid: tuple[int, ...] = ()) -> torch.Tensor:
    """n token ids below the LLaDA2.x special tokens (156891), none of `avoid`: (n,) long."""
    ids = torch.randint(0, min(vocab, 156891), (n,), generator=torch.Generator().manual_seed(seed))
    for token in avoid:
        ids[ids == token] = 0
    return ids


def forward_seconds(model, cache, ids: torch.Tensor, prefix: int, iters: int) -> list[float]:
    """Each of `iters` forwards (after one warm-up) of the block over the cache, as the decode loop calls it."""
    return interleaved([(model, cache)], ids, prefix, iters)[0]


def interleaved(pairs, ids: torch.Tensor, prefix: int, iters: int) -> list[list[float]]:
    """Seconds of each (model, cache)'s forward, the models taking turns (a busy machine's noise hits both)."""
    from ..model import RowInput

    times = [[] for _ in pairs]
    with torch.inference_mode():
        for i in range(iters + 1):
            for (model, cache), out in zip(pairs, times):
                t = time.perf_counter()
                model.forward_rows([RowInput(ids, start=prefix, cache=cache)])
                out.append(round(time.perf_counter() - t, 3))
    return [t[1:] for t in times]  # the first call of each warms up


def held_bytes(model) -> int:
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def where() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit.stdout.strip() or None,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_average": load_now(), "torch": torch.__version__}


def load_now() -> list[float]:
    """The machine's load average (1, 5, 15 minutes) now: beside every timing, a shared machine's noise."""
    return [round(x, 2) for x in os.getloadavg()]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def reset_peak() -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5), so the decode's peak is its own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
