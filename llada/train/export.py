"""Write a trained model as a Hugging Face checkpoint: sharded bf16 safetensors with an index.

    config.json                          the llada2_moe config (+ mask / EOS ids, "torch_dtype": "bfloat16")
    model-00001-of-00003.safetensors     tensors under Hugging Face names, experts unstacked
    ...                                  (`llada.weights.checkpoint.hf_state_dict`), each shard under max_bytes
    model.safetensors.index.json         {"metadata": {"total_size": bytes}, "weight_map": {name: shard}}

This is the layout of real LLaDA2.1 checkpoints, so `llada.weights.checkpoint.load_model` (and transformers'
own loaders) read it as they read those. Tensors go to shards in name order, a new shard starting when
the next tensor would pass `max_bytes`; a single tensor larger than that gets a shard of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..weights.checkpoint import INDEX, SINGLE, hf_state_dict
from ..model import LLaDA2MoE

MAX_SHARD_BYTES = 15 * 2**20  # every shard stays under 16 MB (Space uploads, quick partial downloads)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def plan_shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[list[str]]:
    """Tensor names per shard, in name order, each shard's bytes <= max_bytes (unless one tensor is bigger)."""
    shards, current, size = [], [], 0
    for name in sorted(tensors):
        n = _nbytes(tensors[name])
        if current and size + n > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += n
    return shards + [current] if current else shards


def save_sharded(model: LLaDA2MoE, out: str | Path, extra_config: dict | None = None,
                 dtype: torch.dtype = torch.bfloat16, max_bytes: int = MAX_SHARD_BYTES) -> list[Path]:
    """Write config.json, the shards and the index into `out`; returns the shard paths."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in hf_state_dict(model).items()}
    config = model.config.to_dict() | {"torch_dtype": str(dtype).removeprefix("torch.")} | (extra_config or {})
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for stale in [p for p in [root / SINGLE, *root.glob("model-*-of-*.safetensors")] if p.exists()]:
        stale.unlink()  # a previous save in this directory must not mix with this one
    plan = plan_shards(tensors, max_bytes)
    paths, weight_map = [], {}
    for i, names in enumerate(plan, start=1):
        path = root / f"model-{i:05d}-of-{len(plan):05d}.safetensors"
        save_file({n: tensors[n] for n in names}, str(path), metadata={"format": "pt"})
        path.chmod(0o644)  # readable like the other files of the directory
        weight_map |= {n: path.name for n in names}
        paths.append(path)
    index = {"metadata": {"total_size": sum(map(_nbytes, tensors.values()))}, "weight_map": weight_map}
    (root / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return paths
