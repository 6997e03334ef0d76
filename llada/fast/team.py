"""One OS thread's OpenMP team: the int8 forward's elementwise steps on one thread, its products on all.

torch's CPU ops split their work across an OpenMP team when they have more than 32768 elements. The process
sets `OMP_WAIT_POLICY=PASSIVE` (`llada/__init__.py`): between parallel regions the team's other threads sleep,
and each region wakes them. For an elementwise step of the int8 forward (a digit split, the scales of a
(256, 1024) product, a gather) the wake costs more than the half of the work it takes off: on this machine's
2 cores a (256, 1024) int32 -> fp32 multiply takes 117 us on the team and 39 us on one thread. The matrix
products still gain from the team (`torch._int_mm` of 24 x 1024 by 1024 x 1024: 127-133 us against 150 us;
bench/results/omp-team-3c539dc.json).

    with serial():            this OS thread's steps run on one thread (its own OpenMP team size: 1)
        ...
        with products():      the team size this thread had when `serial` was entered, for the products
            torch._int_mm(...)

The team size is an OpenMP setting of the calling thread alone (libgomp's `omp_set_num_threads` writes the
thread's own copy of it; torch reads it back through `omp_get_max_threads`): decode threads running side by side
do not see each other's. `torch.set_num_threads` is not used: it also writes a process-wide default that
threads starting in the meantime would take. Where torch runs on another threading library (no libgomp beside
it), both contexts do nothing.
"""

from __future__ import annotations

import ctypes
import threading
from functools import cache
from pathlib import Path

import torch

_local = threading.local()  # .depth: `serial` sections open on this thread; .full: its team size outside them


@cache
def _libgomp() -> ctypes.CDLL | None:
    """torch's own OpenMP runtime (the library torch loaded), or None where it runs on another."""
    path = Path(torch.__file__).parent / "lib" / "libgomp.so.1"
    if "OpenMP" not in torch.__config__.parallel_info() or not path.exists():
        return None
    return ctypes.CDLL(str(path))


class serial:
    """`with serial():` this OS thread's torch ops run on one thread; the team size it had is restored at the
    exit. Nested, the outermost size is the one `products` gives back."""

    __slots__ = ("kept",)

    def __enter__(self) -> None:
        gomp = _libgomp()
        if gomp is not None:
            self.kept = gomp.omp_get_max_threads()
            depth = getattr(_local, "depth", 0)
            if not depth:
                _local.full = self.kept
            _local.depth = depth + 1
            gomp.omp_set_num_threads(1)

    def __exit__(self, *exc) -> None:
        gomp = _libgomp()
        if gomp is not None:
            gomp.omp_set_num_threads(self.kept)
            _local.depth -= 1


class products:
    """`with products():` inside `serial`, this thread's ops get back the team size it had outside (elsewhere
    the size stays as it is); restored at the exit."""

    __slots__ = ("kept",)

    def __enter__(self) -> None:
        gomp = _libgomp()
        if gomp is not None:
            self.kept = gomp.omp_get_max_threads()
            if getattr(_local, "depth", 0):
                gomp.omp_set_num_threads(_local.full)

    def __exit__(self, *exc) -> None:
        gomp = _libgomp()
        if gomp is not None:
            gomp.omp_set_num_threads(self.kept)
