"""What a GPU offers the kernels: compute capability, SM count, shared memory per block, FP8 support.

A tile configuration must fit the device it runs on, and the check must come *before* Triton
compiles: a kernel that needs more shared memory than a block may have compiles fine and then fails
to load (`OutOfResources`), which a tuner or a first forward would meet as a crash. The limits that
matter here, per block (the opt-in maximum, `cudaDevAttrMaxSharedMemoryPerBlockOptin`):

    sm80  A100            166,912 B (163 KB)   108 SMs   no FP8 (Triton's fp8e4nv needs sm89+)
    sm86  A10, RTX 30xx   101,376 B  (99 KB)    72 SMs   no FP8
    sm89  L4, L40S, RTX 40 101,376 B (99 KB)    58 SMs (L4)  FP8 via mma.sync e4m3
    sm90  H100, H200      232,448 B (227 KB)   132 SMs   FP8 via wgmma e4m3

`spec_of(device)` reads a real device's numbers from PyTorch; `KNOWN` holds the stand-ins the
ahead-of-time compile (`llada.fast.kernels.aot`) targets on a machine without a GPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

FP8_MIN_ARCH = 89  # Triton lowers float8e4nv from sm89 on; sm80 / sm86 refuse to compile it


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    arch: int  # compute capability as 10 * major + minor
    sms: int
    smem: int  # the most shared memory one block may use, bytes

    @property
    def fp8(self) -> bool:
        return self.arch >= FP8_MIN_ARCH


KNOWN = {
    80: DeviceSpec("NVIDIA A100-SXM4-80GB", 80, 108, 166_912),
    86: DeviceSpec("NVIDIA A10G", 86, 80, 101_376),
    89: DeviceSpec("NVIDIA L4", 89, 58, 101_376),
    90: DeviceSpec("NVIDIA H100 80GB HBM3", 90, 132, 232_448),
}
SMEM_BY_ARCH = {80: 166_912, 86: 101_376, 87: 166_912, 89: 101_376, 90: 232_448, 100: 232_448, 120: 101_376}


def spec_of(device: torch.device | int | None = None) -> DeviceSpec:
    """The spec of a CUDA device, from `torch.cuda.get_device_properties`."""
    return _spec(torch.cuda.current_device() if device is None or getattr(device, "index", 0) is None
                 else device if isinstance(device, int) else device.index)


@functools.lru_cache(maxsize=None)
def _spec(index: int) -> DeviceSpec:
    props = torch.cuda.get_device_properties(index)
    arch = 10 * props.major + props.minor
    smem = getattr(props, "shared_memory_per_block_optin", 0) or SMEM_BY_ARCH.get(arch, 101_376)
    return DeviceSpec(props.name, arch, props.multi_processor_count, int(smem))


def require_fp8(device: torch.device) -> None:
    """Refuse, before anything compiles, to run an FP8 kernel on a CUDA GPU without FP8 (sm80, sm86)."""
    if device.type != "cuda":
        return
    spec = spec_of(device)
    if not spec.fp8:
        raise RuntimeError(f"FP8 kernels need a GPU of compute capability 8.9 or later; {spec.name} is "
                           f"sm{spec.arch}: keep the weights in bf16 there (the fast engine runs bf16 experts)")
