"""How big a model is, where it fits, and which dtype it loads in — decided from config.json alone.

    need = weight_bytes(cfg, torch.bfloat16, quantize="fp8")   # bytes of the weights once loaded (or "int8")
    room = available_bytes("cpu")                              # what this process may still allocate
    why = does_not_fit(cfg, torch.bfloat16, "cpu")             # None, or a sentence saying why not

The estimate is exact arithmetic on the config's sizes (`ModelConfig.parameter_counts`), so a config
with huge dimensions is refused before a single byte is allocated. Host memory is the smaller of the
kernel's MemAvailable and the container's cgroup limit minus its usage (a Space reports the host's
RAM in /proc/meminfo but kills the container at its own limit). Device memory is CUDA's free memory.

Default dtype (`default_dtype`): on CUDA the dtype the checkpoint was saved in (bf16 for LLaDA2.1);
on the CPU fp32 for small models (up to `CPU_FP32_MAX_PARAMS`, where fp32 costs little and CPU
matmuls are fastest), the checkpoint's dtype above that; bf16 with int8 weights (`llada.fast.int8`:
its kernel takes bf16 activations).

int8 (`weight_bytes(..., quantize="int8")`): the routed and shared experts, the attention projections and
the dense SwiGLU hold one byte per weight and one bf16 scale per output row (`int8_rows`); the embeddings,
lm_head, router and norms keep `dtype`.
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


def default_dtype(cfg: ModelConfig, device: str | torch.device, quantize: str | None = None) -> torch.dtype:
    saved = getattr(torch, cfg.dtype) if cfg.dtype else torch.bfloat16
    if quantize == "int8":
        return torch.bfloat16
    if torch.device(device).type == "cpu" and sum(cfg.parameter_counts().values()) <= CPU_FP32_MAX_PARAMS:
        return torch.float32
    return saved


def weight_bytes(cfg: ModelConfig, dtype: torch.dtype, quantize: str | None = None, world: int = 1) -> int:
    """Bytes of the loaded weights: routed experts in fp8 (1 byte + tile scales) with "fp8" / "fp8-dense",
    every quantized matrix in int8 (1 byte + a bf16 scale per row) with "int8". world > 1: one rank's bytes
    when the routed experts are split across `world` ranks (`llada.dist.experts`; the rest is replicated)."""
    parts = cfg.parameter_counts()
    size = dtype.itemsize
    if quantize == "int8":
        weights, rows = int8_rows(cfg)
        whole = sum(parts.values()) * size - weights * (size - 1) + rows * 2
        experts = routed_int8_bytes(cfg)
        return whole - experts + experts // world
    experts = parts["routed_experts"] * size
    if quantize:  # fp8: one byte a weight, fp32 scales rounded up per expert
        experts = parts["routed_experts"] + parts["routed_experts"] // (FP8_TILE * FP8_TILE) * 4 + 4 * cfg.num_experts
    return (sum(parts.values()) - parts["routed_experts"]) * size + experts // world


def auto_quantize(cfg: ModelConfig, device: str | torch.device, dtype: torch.dtype | None = None,
                  room: int | None = None, world: int = 1) -> str | None:
    """"int8" on the CPU for a model that does not fit in `dtype` (default: `default_dtype`) but fits in int8;
    else None (it fits as it is, or not at all: loading then says why). world > 1: one rank's share of it."""
    if torch.device(device).type != "cpu":
        return None
    plain = dtype or default_dtype(cfg, device)
    if not does_not_fit(cfg, plain, device, room=room, world=world):
        return None
    fits = not does_not_fit(cfg, dtype or torch.bfloat16, device, "int8", room=room, world=world)
    return "int8" if fits else None


def routed_int8_bytes(cfg: ModelConfig) -> int:
    """Bytes of the routed experts in int8: a byte a weight, a bf16 scale per output row (w13's 2I, w2's H)."""
    moe = max(cfg.num_hidden_layers - cfg.first_k_dense_replace, 0)
    H, I = cfg.hidden_size, cfg.moe_intermediate_size
    return moe * cfg.num_experts * (3 * H * I + (2 * I + H) * 2)


def int8_rows(cfg: ModelConfig) -> tuple[int, int]:
    """(weights, output rows) of the matrices int8 quantizes (`llada.fast.int8.quantized_modules`)."""
    H, D, L = cfg.hidden_size, cfg.head_dim, cfg.num_hidden_layers
    moe = max(L - cfg.first_k_dense_replace, 0)
    qkv, heads = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * D, cfg.num_attention_heads * D
    I, S = cfg.moe_intermediate_size, cfg.moe_intermediate_size * cfg.num_shared_experts
    weights = L * (qkv + heads) * H + (L - moe) * 3 * H * cfg.intermediate_size
    weights += moe * (cfg.num_experts * 3 * H * I + 3 * H * S)
    rows = L * (qkv + H) + (L - moe) * (2 * cfg.intermediate_size + H)
    rows += moe * (cfg.num_experts * (2 * I + H) + (2 * S + H if S else 0))
    return weights, rows


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
                 room: int | None = None, world: int = 1) -> str | None:
    """None when the weights (one rank's of `world`) fit `device` (or `room` bytes) with HEADROOM to spare;
    else why not."""
    need = weight_bytes(cfg, dtype, quantize, world)
    room = available_bytes(device) if room is None else room
    if room is None or need + HEADROOM <= room:
        return None
    parts = cfg.parameter_counts()
    largest = max(parts, key=parts.get)
    return (f"the weights need {need / GIB:.1f} GiB{f' per rank of {world}' if world > 1 else ''} in "
            f"{str(dtype).removeprefix('torch.')}"
            f"{_WITH.get(quantize, '')} but {torch.device(device).type} has "
            f"{room / GIB:.1f} GiB available, {HEADROOM / GIB:.0f} GiB of it kept for the KV cache, activations and "
            f"the runtime (largest part: {largest}, {parts[largest]:,} parameters from "
            f"{_KEYS[largest]})")


_WITH = {"fp8": " with fp8 experts", "fp8-dense": " with fp8 experts", "int8": " with int8 weights"}
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
