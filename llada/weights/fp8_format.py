"""The FP8 checkpoint format as the loader reads it: which directories hold one, and where they may live.

A directory written by `python -m llada.weights.fp8_checkpoint SRC DST` (`llada.weights.fp8_checkpoint`, the writing
side) carries `QUANTIZATION_CONFIG` in its config.json and stores each MoE layer's routed experts stacked, as
they run: `experts.w13` / `experts.w2` in float8_e4m3fn with one fp32 `*_scale` per 128x128 tile.
`llada.weights.checkpoint` uses this module to recognise such a directory (`stored_fp8`), to refuse it on a GPU
without FP8 (`fp8_refusal`) and to check every expert tensor's stored dtype (`check_entries`).
"""

from __future__ import annotations

import json

import torch

FP8 = torch.float8_e4m3fn
LAYOUT = "llada2-stacked-experts"
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128], "modules": "routed experts", "layout": LAYOUT}


def stored_fp8(raw: dict, source: str) -> bool:
    """True for a directory this module wrote; ValueError for a quantization this loader does not read."""
    q = raw.get("quantization_config")
    if q is None:
        return False
    if not isinstance(q, dict) or q.get("quant_method") != "fp8" or q.get("layout") != LAYOUT:
        raise ValueError(f"{source}: quantization_config {json.dumps(q)[:200]} is not a format this loader reads "
                         f"(it reads FP8 checkpoints written by python -m llada.fast.quantize, layout {LAYOUT!r})")
    return True


def fp8_refusal(device: torch.device) -> str | None:
    """Why FP8 weights cannot live on `device` (None: they can; the CPU runs them on the PyTorch reference)."""
    if device.type != "cuda":
        return None
    from ..fast.kernels.devices import spec_of

    spec = spec_of(device)
    if spec.fp8:
        return None
    return (f"FP8 weights need a GPU of compute capability 8.9 or later; {spec.name} is sm{spec.arch}: "
            "load the bf16 checkpoint there (the fast engine runs bf16 experts)")


def check_entries(pairs) -> None:
    """Every expert tensor of an FP8 directory is stored as F8_E4M3 and its scales as F32 (no silent casts)."""
    for entry, slot in pairs:
        leaf = slot.key.rsplit(".", 1)[-1]
        want = FP8 if leaf in ("w13", "w2") else torch.float32 if leaf.endswith("_scale") else None
        if ".mlp.experts." in slot.key and want is not None and entry.dtype != want:
            raise ValueError(f"{entry.file}: tensor {entry.name} is {str(entry.dtype).removeprefix('torch.')}; "
                             f"an FP8 checkpoint stores it as {str(want).removeprefix('torch.')}")
