"""A kernel launch as a value, and a counter of the kernels a piece of code launches.

Every Triton launcher in this package allocates its outputs, builds a list of `Launch`es (kernel,
grid, arguments, meta-parameters) and runs it. Keeping the launch as data lets three callers share
one description of what the engine does:

    run(launches)          the normal path (also inside a CUDA graph capture: no host work between)
    llada.fast.kernels.aot      compiles exactly these specializations for sm80 / sm89 / sm90 ahead of time, on a CPU
    count_launches()       counts them, with the ATen ops in between, so that a test pins the cost

`count_launches` counts device work, not Python calls: Triton launches, plus ATen ops that run a
kernel on a GPU (views and bare allocations run none), plus, apart, everything that would make the
host wait for the GPU, which a CUDA graph cannot hold:

    reads to the host   `.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `.to("cpu")`, `bool(t)`, `int(t)`
    data-dependent shapes   `nonzero`, `unique`, `masked_select`, `bincount`, `x[bool_mask]`, ...

The reads are seen at the Python level (a `TorchFunctionMode`), so they count on a CPU run too, where
`.cpu()` and `.tolist()` reach no ATen op at all. It works on CPU (under Triton's interpreter, whose
own host copies are not counted) and on CUDA.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_COUNTER: contextvars.ContextVar["LaunchCount | None"] = contextvars.ContextVar("launch_counter", default=None)

NO_KERNEL = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
             "aten::new_empty_strided", "aten::lift_fresh", "aten::_unsafe_view"}  # memory / metadata only
HOST_SYNCS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim",
              "aten::unique_consecutive", "aten::masked_select", "aten::bincount",
              "aten::repeat_interleave", "aten::equal", "aten::is_nonzero"}  # the GPU must answer first
MASK_INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}  # sync with bools
HOST_READS = {torch.Tensor.item: "item", torch.Tensor.tolist: "tolist", torch.Tensor.cpu: "cpu",
              torch.Tensor.numpy: "numpy", torch.Tensor.__bool__: "bool", torch.Tensor.__int__: "int",
              torch.Tensor.__float__: "float", torch.Tensor.__index__: "index"}  # a value the host must have


class Launch(NamedTuple):
    """One kernel launch: `kernel[grid](*args, **meta)`."""

    kernel: Any  # a @triton.jit function (or the interpreter's stand-in for one)
    grid: tuple[int, ...]
    args: tuple
    meta: dict  # constexpr meta-parameters, num_warps, num_stages

    @property
    def name(self) -> str:
        return self.kernel.__name__

    def __call__(self) -> None:
        counter = _COUNTER.get()
        if counter is None:
            self.kernel[self.grid](*self.args, **self.meta)
            return
        counter.triton.append(self.name)
        counter.paused += 1  # the interpreter's host copies are not device work
        try:
            self.kernel[self.grid](*self.args, **self.meta)
        finally:
            counter.paused -= 1


def run(launches: list[Launch]) -> None:
    for launch in launches:
        launch()


@dataclass
class LaunchCount:
    """Kernels launched inside `count_launches()`, by name, in order."""

    triton: list[str] = field(default_factory=list)
    aten: list[str] = field(default_factory=list)
    syncs: list[str] = field(default_factory=list)  # ATen ops that wait for the device
    paused: int = 0

    @property
    def total(self) -> int:
        return len(self.triton) + len(self.aten)


class _AtenCounter(TorchDispatchMode):
    def __init__(self, count: LaunchCount):
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if not self.count.paused and not func.is_view and name not in NO_KERNEL:
            if name in MASK_INDEXING and _bool_index(args):
                self.count.syncs.append(name.removeprefix("aten::") + "[bool mask]")  # data-dependent shape
            else:
                sync = name in HOST_SYNCS or _to_host(name, args, kwargs)
                (self.count.syncs if sync else self.count.aten).append(name.removeprefix("aten::"))
        return func(*args, **kwargs)


class _HostReads(TorchFunctionMode):
    """Tensor methods that hand a value to Python or move data to the host (CPU tensors included)."""

    def __init__(self, count: LaunchCount):
        super().__init__()
        self.count = count

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = HOST_READS.get(func)
        if name is None and func is torch.Tensor.to and _to_cpu(args, kwargs):
            name = "to(cpu)"
        if name is None or self.count.paused:
            return func(*args, **kwargs)
        self.count.syncs.append(name)
        self.count.paused += 1  # the ATen op underneath (_local_scalar_dense, _to_copy) is the same sync
        try:
            return func(*args, **kwargs)
        finally:
            self.count.paused -= 1


def _to_cpu(args: tuple, kwargs: dict) -> bool:
    """`tensor.to(...)` names the CPU as its target device."""
    try:
        device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
    except (TypeError, RuntimeError):
        return False
    return device is not None and torch.device(device).type == "cpu"


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


def _to_host(name: str, args: tuple, kwargs: dict) -> bool:
    """A copy from a GPU tensor into CPU memory (`.cpu()`, `.tolist()` on CUDA): the host waits for it."""
    if name == "aten::_to_copy":
        source, target = args[0], kwargs.get("device")
        return source.device.type != "cpu" and target is not None and torch.device(target).type == "cpu"
    if name == "aten::copy_":
        return args[0].device.type == "cpu" and args[1].device.type != "cpu"
    return False


@contextmanager
def count_launches() -> Iterator[LaunchCount]:
    """Count the kernels the code inside launches (see the module docstring for what counts)."""
    count = LaunchCount()
    token = _COUNTER.set(count)
    try:
        with _AtenCounter(count), _HostReads(count):
            yield count
    finally:
        _COUNTER.reset(token)
