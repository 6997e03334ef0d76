"""The C heap of a long CPU run: keep freed memory for the next forward instead of returning it.

A row-batched forward allocates and frees megabytes of activations each time (the logits of 32 rows
of 32 tokens alone are 4 MB). glibc's malloc serves blocks this large with `mmap` or hands a freed
heap top back to the kernel, so the next forward touches fresh pages and the kernel zeroes each one:
~350,000 page faults and 0.5 s of system time in the explorer's default grid, 7 % of its CPU time.
With both thresholds raised (`mallopt`), the same memory is reused: 57,000 faults, the same peak RSS.
A batch of 8 rows of the shipped model (`llada.bench batch`, 96 rows) faulted 5,600-7,800 times a pass
of 28 rounds (1 row: 5), none once the thresholds are raised, and ran about 5% faster; but a batch of 32
rows of the random 86 M model (157,184-token vocabulary) ran about 10% slower with them (37-42 against
45-46 tokens/s, depending on what the heap held before), so decoding does not raise them by itself.

Called once per process by the command lines that decode many rows of the shipped model (`llada.eval`,
`llada.eval.sweep`), never at import. Left alone where the C library is not glibc, where the environment
already sets glibc's malloc tunables, or with `LLADA_KEEP_FREED_MEMORY=0`.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_ABOVE = 32 << 20  # blocks from this size get their own mapping (glibc's largest allowed threshold)
TRIM_ABOVE = 128 << 20  # a free heap top larger than this goes back to the kernel
ENV_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")  # glibc's own variables for the two

_kept: bool | None = None  # whether the thresholds are raised (None: not tried yet)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); whether they are raised (False where
    the C library has no mallopt, or the environment sets the heap itself or says LLADA_KEEP_FREED_MEMORY=0)."""
    global _kept
    if _kept is None:
        _kept = _raise()
    return _kept


def _raise() -> bool:
    env = os.environ
    if env.get("LLADA_KEEP_FREED_MEMORY") == "0" or "malloc" in env.get("GLIBC_TUNABLES", "") or \
            any(name in env for name in ENV_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (only glibc has it: musl's mallopt does nothing)
    except (OSError, AttributeError, TypeError):  # not glibc (macOS, Windows, musl): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE))
