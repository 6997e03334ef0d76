"""Freed CPU buffers kept for reuse, so a decode forward does not map fresh pages for its buffers.

glibc's malloc serves a buffer above its mmap threshold (128 KiB at first, then the size of the largest
such buffer freed) with fresh pages from the kernel, and gives the top of its heap back once more than
twice that threshold lies free there. A row-batched forward's activations and logits are that size (8
rows of the shipped model: 200 KiB to 1 MiB each), so forwards kept paying a page fault per 4 KiB of them
(`llada.bench batch`'s 96-row workload at B = 8: 5,600-7,800 minor faults a pass of 28 rounds, against 5
at B = 1; measured with `resource.getrusage`). `keep_freed_memory` raises
both limits once per process (buffers up to 16 MiB from the heap, up to 64 MiB of free heap kept);
weights and KV caches above 16 MiB still get their own mappings. It changes no value, only where memory
comes from. Not on other C libraries, nor when the environment already sets glibc's malloc tunables or
`LLADA_KEEP_FREED_MEMORY=0`.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 16 << 20  # buffers at most this large come from the heap
TRIM_THRESHOLD = 64 << 20  # free heap kept before any goes back to the kernel

_done: bool | None = None  # whether it took effect (None: not tried yet)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once (module docstring); whether they are raised."""
    global _done
    if _done is None:
        _done = _apply()
    return _done


def _apply() -> bool:
    env = os.environ
    if (not sys.platform.startswith("linux") or env.get("LLADA_KEEP_FREED_MEMORY") == "0"
            or "malloc" in env.get("GLIBC_TUNABLES", "") or "MALLOC_MMAP_THRESHOLD_" in env
            or "MALLOC_TRIM_THRESHOLD_" in env):
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # not glibc
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
