"""FP8 checkpoints: a model's routed experts written once as float8_e4m3fn with tile scales, read back as they are.

`python -m llada.quantize SRC DST` (`convert`) loads SRC exactly as `load_model(SRC, quantize="fp8")`
does (each expert quantized as it is read: one fp32 scale per 128x128 tile, `llada.kernels`), then
writes DST: SRC's config.json with a `quantization_config` added, every other file of SRC copied
(tokenizer, presets, model card), and the weights. Dense tensors keep their Hugging Face names and the
checkpoint's dtype; each MoE layer's experts are stored in the runtime layout, stacked:

    model.layers.N.mlp.experts.w13        F8_E4M3 (E, 2I, H)                  gate rows, then up rows
    model.layers.N.mlp.experts.w13_scale  F32     (E, ceil(2I/128), ceil(H/128))   w ~ q * scale, per tile
    model.layers.N.mlp.experts.w2         F8_E4M3 (E, H, I)
    model.layers.N.mlp.experts.w2_scale   F32     (E, ceil(H/128), ceil(I/128))

Stacked, because a 128-row tile of w13 spans gate and up rows when I is not a multiple of 128: split per
projection, such tiles could not be read back as quantize-at-load makes them. Shards are at most
`SHARD_BYTES` (with a model.safetensors.index.json when there are several).

`load_model` reads such a directory (`stored_fp8`) into `FP8Experts` buffers directly: the fp8 bytes go
from the file to their final place on the device, nothing passes through bf16 and nothing is quantized.
It is refused on a CUDA GPU without FP8 (compute capability below 8.9: `fp8_refusal`) and, like every
load, when the weights do not fit (`llada.memory`, estimated from config.json before anything is read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

FP8 = torch.float8_e4m3fn
LAYOUT = "llada2-stacked-experts"
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128], "modules": "routed experts", "layout": LAYOUT}
SHARD_BYTES = 4 << 30  # one safetensors file at most (the Hub's guidance is a few GB per file)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


class FP8CheckpointError(RuntimeError):
    """A directory that cannot be converted or written (checkpoint.CheckpointError covers reading)."""


def stored_fp8(raw: dict, source: str) -> bool:
    """True for a directory this module wrote; ValueError for a quantization this loader does not read."""
    q = raw.get("quantization_config")
    if q is None:
        return False
    if not isinstance(q, dict) or q.get("quant_method") != "fp8" or q.get("layout") != LAYOUT:
        raise ValueError(f"{source}: quantization_config {json.dumps(q)[:200]} is not a format this loader reads "
                         f"(it reads FP8 checkpoints written by python -m llada.quantize, layout {LAYOUT!r})")
    return True


def fp8_refusal(device: torch.device) -> str | None:
    """Why FP8 weights cannot live on `device` (None: they can; the CPU runs them on the PyTorch reference)."""
    if device.type != "cuda":
        return None
    from .kernels.devices import spec_of

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


def fp8_state_dict(model) -> dict[str, torch.Tensor]:
    """The tensors of an FP8 directory: dense ones under Hugging Face names, experts stacked (module docstring)."""
    from .checkpoint import hf_name

    out = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if t.dtype == FP8 and ".mlp.experts." not in key:
            raise FP8CheckpointError(f"{key}: only the routed experts are stored in FP8 (quantize='fp8', not fp8-dense)")
        out[hf_name(key)] = t.detach().contiguous().cpu()
    return out


def write_shards(tensors: dict[str, torch.Tensor], root: Path, shard_bytes: int = SHARD_BYTES) -> list[Path]:
    """Write `tensors` as safetensors shards of at most `shard_bytes` (a tensor larger than that gets its own)."""
    from safetensors.torch import save_file

    groups, size = [[]], 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if groups[-1] and size + n > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    files = [root / WEIGHT_FILES[0]] if len(groups) == 1 else [
        root / f"model-{k:05d}-of-{len(groups):05d}.safetensors" for k in range(1, len(groups) + 1)]
    for names, path in zip(groups, files):
        save_file({n: tensors[n] for n in names}, str(path), metadata={"format": "pt"})
    if len(files) > 1:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total},
                 "weight_map": {n: path.name for names, path in zip(groups, files) for n in names}}
        (root / WEIGHT_FILES[1]).write_text(json.dumps(index, indent=2) + "\n")
    return files


def convert(src: str | Path, dst: str | Path, device: str = "cpu", shard_bytes: int = SHARD_BYTES,
            progress: bool = False) -> list[Path]:
    """Write the FP8 checkpoint of `src` to `dst` (new or empty); the weight files written."""
    from .checkpoint import load_model, read_config, shard_files

    src, dst = Path(src), Path(dst)
    cfg, raw = read_config(src)
    if stored_fp8(raw, str(src / "config.json")):
        raise FP8CheckpointError(f"{src}: already an FP8 checkpoint")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FP8CheckpointError(f"{dst}: exists and is not an empty directory; choose a new one")
    weights = {p.name for p in shard_files(src)} | set(WEIGHT_FILES)
    dtype = getattr(torch, cfg.dtype) if cfg.dtype else torch.bfloat16  # the checkpoint's own, as saved
    model = load_model(src, dtype=dtype, device=device, quantize="fp8", progress=progress)
    tensors = fp8_state_dict(model)
    del model
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in weights and f.name != "config.json":
            shutil.copy2(f, dst / f.name)
    config = raw | {"quantization_config": QUANTIZATION_CONFIG}
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return write_shards(tensors, dst, shard_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.quantize", description=(
        "Write a model's routed experts once as FP8 (e4m3, one fp32 scale per 128x128 tile); the app, the CLI "
        "and Pipeline.load then load DST as FP8 directly."))
    parser.add_argument("src", help="a llada2_moe model directory (bf16 or fp32 weights)")
    parser.add_argument("dst", help="a new (or empty) directory for the FP8 checkpoint")
    parser.add_argument("--device", default="cpu", help="where the experts are quantized: cpu or cuda")
    args = parser.parse_args(argv)
    from .checkpoint import CheckpointError

    try:
        files = convert(args.src, args.dst, args.device, progress=True)
    except (CheckpointError, FP8CheckpointError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in files) / 2**30
    print(f"wrote {args.dst}: {len(files)} file(s), {size:.2f} GiB, routed experts in FP8 (e4m3, 128x128 tiles)")
    return 0
