"""How big a model is, where it fits, and which dtype it loads in — decided from config.json alone.

    need = weight_bytes(cfg, torch.bfloat16, quantize="fp8")   # bytes of the weights once loaded
    room = available_bytes("cpu")                              # what this process may still allocate
    why = does_not_fit(cfg, torch.bfloat16, "cpu")             # None, or a sentence saying why not

The estimate is exact arithmetic on the config's sizes (`ModelConfig.parameter_counts`), so a config
with huge dimensions is refused before a single byte is allocated. Host memory is the smaller of the
kernel's MemAvailable and the container's cgroup limit minus its usage (a Space reports the host's
RAM in /proc/meminfo but kills the container at its own limit). Device memory is CUDA's free memory.

Default dtype (`default_dtype`): on CUDA the dtype the checkpoint was saved in (bf16 for LLaDA2.1);
on the CPU fp32 for small models (up to `CPU_FP32_MAX_PARAMS`, where fp32 costs little and CPU
matmuls are fastest), the checkpoint's dtype above that.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..config import ModelConfig

CPU_FP32_MAX_PARAMS = 1_000_000_000  # 4 GB in fp32: above this a CPU load keeps the checkpoint's dtype
HEADROOM = 1 << 30  # activations, KV cache, the runtime itself: never plan to fill memory to the last GiB
FP8_TILE = 128  # one fp32 scale per 128x128 tile of an fp8 weight (llada.fast.kernels)
GIB = float(1 << 30)


def default_dtype(cfg: ModelConfig, device: str | torch.device) -> torch.dtype:
    saved = getattr(torch, cfg.dtype) if cfg.dtype else torch.bfloat16
    if torch.device(device).type == "cpu" and sum(cfg.parameter_counts().values()) <= CPU_FP32_MAX_PARAMS:
        return torch.float32
    return saved


def weight_bytes(cfg: ModelConfig, dtype: torch.dtype, quantize: str | None = None) -> int:
    """Bytes of the loaded weights: routed experts in fp8 (1 byte + tile scales) when quantized."""
    parts = cfg.parameter_counts()
    size = dtype.itemsize
    total = sum(parts.values()) * size
    if quantize:
        experts = parts["routed_experts"]
        total -= experts * (size - 1)
        total += experts // (FP8_TILE * FP8_TILE) * 4 + 4 * cfg.num_experts  # fp32 scales, rounded up per expert
    return total


def available_bytes(device: str | torch.device) -> int | None:
    """Memory this process can still allocate on `device` (None when it cannot be told)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    candidates = [n for n in (_meminfo_available(), _cgroup_room()) if n is not None]
    return min(candidates) if candidates else None


def does_not_fit(cfg: ModelConfig, dtype: torch.dtype, device: str | torch.device, quantize: str | None = None,
                 room: int | None = None) -> str | None:
    """None when the weights fit `device` (or `room` bytes) with HEADROOM to spare; else why not."""
    need = weight_bytes(cfg, dtype, quantize)
    room = available_bytes(device) if room is None else room
    if room is None or need + HEADROOM <= room:
        return None
    parts = cfg.parameter_counts()
    largest = max(parts, key=parts.get)
    return (f"the weights need {need / GIB:.1f} GiB in {str(dtype).removeprefix('torch.')}"
            f"{' with fp8 experts' if quantize else ''} but {torch.device(device).type} has "
            f"{room / GIB:.1f} GiB available (largest part: {largest}, {parts[largest]:,} parameters from "
            f"{_KEYS[largest]})")


_KEYS = {"embeddings": "vocab_size x hidden_size", "lm_head": "vocab_size x hidden_size",
         "attention": "num_hidden_layers x num_attention_heads x head_dim x hidden_size",
         "dense_mlp": "first_k_dense_replace x intermediate_size x hidden_size",
         "routed_experts": "num_hidden_layers x num_experts x moe_intermediate_size x hidden_size",
         "shared_experts": "num_hidden_layers x num_shared_experts x moe_intermediate_size x hidden_size",
         "router": "num_hidden_layers x num_experts x hidden_size"}


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> int | None:
    """limit - usage of this container's memory cgroup (v2, then v1); None without a limit."""
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap = Path(limit).read_text().strip()
            if cap == "max" or int(cap) >= 1 << 60:  # v1 reports "no limit" as a huge number
                return None
            return int(cap) - int(Path(usage).read_text().strip())
        except (OSError, ValueError):
            continue
    return None
