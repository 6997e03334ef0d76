"""Read and write Hugging Face `llada2_moe` model directories, without `trust_remote_code`.

A directory holds `config.json` and either `model.safetensors` or shards listed in
`model.safetensors.index.json`. Per-expert tensors `mlp.experts.E.{gate,up,down}_proj.weight` are
stacked into the runtime layout `w13 (E, 2I, H)` / `w2 (E, H, I)` on load and split again on save.
Every problem raises `CheckpointError` naming the file and the tensor or key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .config import ConfigError, ModelConfig
from .model import LLaDA2MoE

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
_EXPERT = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


class CheckpointError(RuntimeError):
    """A model directory that cannot be loaded; the message names the file and the key."""


def _shard_files(root: Path) -> list[Path]:
    if (root / INDEX).exists():
        try:
            weight_map = json.loads((root / INDEX).read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{root / INDEX}: not a valid safetensors index ({err})") from None
        files = [root / name for name in sorted(set(weight_map.values()))]
    elif (root / SINGLE).exists():
        files = [root / SINGLE]
    else:
        raise CheckpointError(f"{root}: no {SINGLE} or {INDEX} found")
    for f in files:
        if not f.exists():
            raise CheckpointError(f"{f}: shard listed in {INDEX} is missing")
    return files


def read_tensors(root: Path) -> dict[str, tuple[torch.Tensor, Path]]:
    """Every tensor of the checkpoint with the file it came from."""
    out = {}
    for f in _shard_files(root):
        try:
            with safe_open(str(f), framework="pt") as handle:
                for key in handle.keys():
                    out[key] = (handle.get_tensor(key), f)
        except (SafetensorError, OSError, RuntimeError) as err:
            raise CheckpointError(f"{f}: cannot read safetensors file ({err})") from None
    return out


def _hf_to_runtime(tensors: dict, cfg: ModelConfig) -> dict[str, tuple[torch.Tensor, Path]]:
    """Rename HF keys to module keys and stack experts: w13 = [gate; up] rows, w2 = down."""
    out, experts = {}, {}
    for key, (t, f) in tensors.items():
        m = _EXPERT.match(key)
        if m:
            experts[(int(m[1]), int(m[2]), m[3])] = (t, f, key)
        elif key.startswith("model."):
            out[key[len("model."):]] = (t, f)
        else:
            out[key] = (t, f)
    for layer in range(cfg.num_hidden_layers):
        if not cfg.is_moe_layer(layer):
            continue
        prefix = f"layers.{layer}.mlp.experts"
        parts = {}
        for name in ("gate_proj", "up_proj", "down_proj"):
            rows = []
            for e in range(cfg.num_experts):
                if (layer, e, name) not in experts:
                    raise CheckpointError(f"missing tensor model.{prefix}.{e}.{name}.weight")
                rows.append(experts.pop((layer, e, name)))
            parts[name] = rows
        for (tensors_, fname) in ((parts["gate_proj"], "gate"), (parts["up_proj"], "up"), (parts["down_proj"], "down")):
            shapes = {tuple(t.shape) for t, _, _ in tensors_}
            if len(shapes) != 1:
                raise CheckpointError(f"{tensors_[0][1]}: experts of model.{prefix}.*.{fname}_proj differ in shape {shapes}")
        gate = torch.stack([t for t, _, _ in parts["gate_proj"]])
        up = torch.stack([t for t, _, _ in parts["up_proj"]])
        f0 = parts["gate_proj"][0][1]
        out[f"{prefix}.w13"] = (torch.cat([gate, up], dim=1), f0)
        out[f"{prefix}.w2"] = (torch.stack([t for t, _, _ in parts["down_proj"]]), f0)
    if experts:
        (layer, e, name), (_, f, key) = next(iter(experts.items()))
        raise CheckpointError(f"{f}: unexpected tensor {key} (layer {layer} is not an MoE layer or expert "
                              f"{e} >= num_experts={cfg.num_experts})")
    return out


def load_state(model: LLaDA2MoE, tensors: dict[str, tuple[torch.Tensor, Path]]) -> None:
    expected = model.state_dict()
    for key, target in expected.items():
        if key not in tensors:
            raise CheckpointError(f"missing tensor {_hf_name(key)} (needed by the config)")
        t, f = tensors.pop(key)
        if tuple(t.shape) != tuple(target.shape):
            raise CheckpointError(f"{f}: tensor {_hf_name(key)} has shape {tuple(t.shape)}, "
                                  f"the config needs {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(t.to(target.dtype))
    if tensors:
        key, (_, f) = next(iter(tensors.items()))
        raise CheckpointError(f"{f}: unexpected tensor {_hf_name(key)} (not part of this config)")


def _hf_name(key: str) -> str:
    return key if key.startswith("lm_head") else f"model.{key}"


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> LLaDA2MoE:
    """Build the model from a Hugging Face directory: config.json + safetensors (single or sharded)."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: model directory not found")
    try:
        cfg = ModelConfig.from_json(root / "config.json")
    except ConfigError as err:
        raise CheckpointError(str(err)) from None
    tensors = read_tensors(root)
    if cfg.tie_word_embeddings and "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.word_embeddings.weight"]
    with torch.device("meta"):
        model = LLaDA2MoE(cfg)
    model = model.to_empty(device=device).to(dtype)
    load_state(model, _hf_to_runtime(tensors, cfg))
    return model.eval().requires_grad_(False)


def hf_state_dict(model: LLaDA2MoE) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face names, experts unstacked."""
    cfg, out = model.config, {}
    for key, t in model.state_dict().items():
        m = re.match(r"^layers\.(\d+)\.mlp\.experts\.(w13|w2)$", key)
        if not m:
            out[_hf_name(key)] = t.detach().contiguous()
            continue
        prefix = f"model.layers.{m[1]}.mlp.experts"
        for e in range(t.shape[0]):
            if m[2] == "w13":
                gate, up = t[e].chunk(2, dim=0)
                out[f"{prefix}.{e}.gate_proj.weight"] = gate.contiguous()
                out[f"{prefix}.{e}.up_proj.weight"] = up.contiguous()
            else:
                out[f"{prefix}.{e}.down_proj.weight"] = t[e].contiguous()
    return out


def save_model(model: LLaDA2MoE, path: str | Path, extra_config: dict | None = None) -> Path:
    """Write config.json + model.safetensors in the Hugging Face layout."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict() | {"torch_dtype": str(model.dtype).removeprefix("torch.")}
    config |= extra_config or {}
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(hf_state_dict(model), str(root / SINGLE), metadata={"format": "pt"})
    return root
