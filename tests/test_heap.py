"""The C heap's thresholds (`llada.fast.heap`): raised where the C library is glibc, a no-op elsewhere; checked
on glibc's own counters in a fresh process: a 1 MiB block comes from the heap, not from a mapping of its
own, and 8 MiB freed stay in the heap; with `LLADA_KEEP_FREED_MEMORY=0` glibc's defaults do neither."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from llada.fast.heap import keep_freed_memory

ROOT = Path(__file__).resolve().parent.parent
GLIBC = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")


@GLIBC
def test_freed_memory_is_kept_on_glibc():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # a second call changes nothing


PROBE = """
import ctypes, json, sys
from llada.fast.heap import keep_freed_memory
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
kept = keep_freed_memory()
mapped = libc.mallinfo2().hblkhd
big = libc.malloc(1 << 20)
mapped_for_big = libc.mallinfo2().hblkhd - mapped
small = [0] * 128  # sized first: a list growing among the blocks would take a chunk above them
for i in range(128):
    small[i] = libc.malloc(64 << 10)  # 8 MiB in buffers under any mmap threshold
for p in reversed(small):
    libc.free(p)
libc.free(big)
print(json.dumps({"kept": kept, "mapped_for_1mib": mapped_for_big, "free_at_top": libc.mallinfo2().keepcost}))
"""


def _probe(**env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LLADA_KEEP_FREED_MEMORY")}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean | env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@GLIBC
def test_freed_buffers_stay_in_the_heap():
    kept, default = _probe(), _probe(LLADA_KEEP_FREED_MEMORY="0")
    assert kept["kept"] and not default["kept"]
    assert default["mapped_for_1mib"] >= 1 << 20 and kept["mapped_for_1mib"] == 0
    assert default["free_at_top"] < 1 << 20 and kept["free_at_top"] >= 8 << 20  # not given back


@GLIBC
def test_malloc_settings_in_the_environment_are_left_alone():
    assert not _probe(GLIBC_TUNABLES="glibc.malloc.trim_threshold=1048576")["kept"]
    assert not _probe(MALLOC_TRIM_THRESHOLD_="1048576")["kept"]
