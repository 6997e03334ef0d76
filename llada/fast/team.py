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

    with alone():             this OS thread's ops, MKL's products included, on one thread

A whole forward of a small model runs `alone` (`alone_for`, used by the decode loop's rounds): its ops are too
small for a second thread to pay for the wake-ups. MKL keeps its own count beside OpenMP's, set per thread by
`MKL_Set_Num_Threads_Local` (0 gives the process's back). Measured on 2 cores, one run at a time (S, gen 128,
the 5.8 M embedded model): a median of 64 tokens/s on the team, 140 alone; a forward of an 86.5 M model over
32 tokens still gains a little alone, 32 rows of the embedded model's blocks no longer do
(bench/results/team-alone-9d77643.json).
"""

from __future__ import annotations

import ctypes
import threading
import weakref
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


ALONE_BELOW = 4e9  # a CPU forward of fewer parameters x tokens than this runs alone (measurements above)
_sizes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its tensors' elements, counted once


@cache
def _mkl_local():
    """MKL's per-thread count setter in torch's library (`MKL_Set_Num_Threads_Local`: returns the thread's
    previous count, 0 meaning the process's), or None where torch has no MKL."""
    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"  # Linux; elsewhere MKL keeps the process's
    try:
        setter = getattr(ctypes.CDLL(str(path)), "MKL_Set_Num_Threads_Local", None) if path.exists() else None
    except OSError:
        return None
    if setter is not None:
        setter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
    return setter


class alone:
    """`with alone():` this OS thread's torch ops run on one thread, MKL's products too; both counts are given
    back at the exit. Other threads keep theirs."""

    __slots__ = ("kept", "mkl")

    def __enter__(self) -> None:
        gomp, mkl = _libgomp(), _mkl_local()
        self.kept = gomp.omp_get_max_threads() if gomp is not None else None
        if gomp is not None:
            gomp.omp_set_num_threads(1)
        self.mkl = mkl(1) if mkl is not None else None

    def __exit__(self, *exc) -> None:
        if self.mkl is not None:
            _mkl_local()(self.mkl)
        if self.kept is not None:
            _libgomp().omp_set_num_threads(self.kept)


def alone_for(model: torch.nn.Module, tokens: int) -> bool:
    """Should a forward of `model` over `tokens` tokens run `alone`? On the CPU, below ALONE_BELOW parameters x
    tokens (an int8 model's weights are buffers: counted too)."""
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu":
        return False
    size = _sizes.get(model)
    if size is None:
        size = _sizes[model] = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    return size * tokens < ALONE_BELOW
