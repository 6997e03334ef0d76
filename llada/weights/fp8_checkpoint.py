"""FP8 checkpoints: a model's routed experts written once as float8_e4m3fn with tile scales, read back as they are.

`python -m llada.weights.fp8_checkpoint SRC DST` (`convert`) writes DST: SRC's config.json with a
`quantization_config` added, every other file of SRC copied (tokenizer, presets, model card), and the
weights, streamed: one tensor at a time is read from SRC's shards (cast to the checkpoint's dtype as
`load_model` casts it), each expert's gate + up and down are quantized as they arrive (one fp32 scale per
128x128 tile, `llada.fast.kernels`, bit for bit what `load_model(SRC, quantize="fp8")` makes), and every
tensor is written at its place in DST's shards, laid out from the config before anything is read
(`plan_shards`, `ShardWriter`). Memory stays at the largest single tensor plus one 64 MB read buffer,
whatever the model's size. Dense tensors keep their Hugging Face names and the checkpoint's dtype; each
MoE layer's experts are stored in the runtime layout, stacked:

    model.layers.N.mlp.experts.w13        F8_E4M3 (E, 2I, H)                  gate rows, then up rows
    model.layers.N.mlp.experts.w13_scale  F32     (E, ceil(2I/128), ceil(H/128))   w ~ q * scale, per tile
    model.layers.N.mlp.experts.w2         F8_E4M3 (E, H, I)
    model.layers.N.mlp.experts.w2_scale   F32     (E, ceil(H/128), ceil(I/128))

Stacked, because a 128-row tile of w13 spans gate and up rows when I is not a multiple of 128: split per
projection, such tiles could not be read back as quantize-at-load makes them. Shards are at most
`SHARD_BYTES` (with a model.safetensors.index.json when there are several).

`load_model` reads such a directory (`stored_fp8`) into `FP8Experts` buffers directly: the fp8 bytes go
from the file to their final place on the device, nothing passes through bf16 and nothing is quantized.
It is refused on a CUDA GPU without FP8 (compute capability below 8.9: `llada.weights.fp8_format.fp8_refusal`)
and, like every load, when the weights do not fit (`llada.weights.memory`, estimated from config.json before
anything is read).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import torch

from .checkpoint import CheckpointError, _fp8_experts as fp8_experts, _progress, hf_name, plan, read_config, shard_files
from .fp8_format import FP8, QUANTIZATION_CONFIG, stored_fp8
from ..model import LLaDA2MoE
from .shards import DTYPES, ShardReader, staging_buffer

SHARD_BYTES = 4 << 30  # one safetensors file at most (the Hub's guidance is a few GB per file)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
ST_DTYPES = {dtype: name for name, dtype in DTYPES.items()}  # torch dtype -> safetensors' name


class FP8CheckpointError(RuntimeError):
    """A directory that cannot be converted or written (checkpoint.CheckpointError covers reading)."""


class Layout(NamedTuple):
    """Where each tensor of the FP8 directory goes: its shard file and byte range inside that file's data."""

    files: list[Path]
    headers: list[bytes]  # each file's 8-byte length + JSON header, padded to 8 bytes
    place: dict[str, tuple[int, int, int]]  # name -> (file index, begin, end) relative to the data


def output_tensors(model) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """The tensors of an FP8 directory, by Hugging Face name: dense ones as in `model` (a meta model with FP8
    experts), experts stacked (module docstring). Nothing is allocated."""
    out = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if t.dtype == FP8 and ".mlp.experts." not in key:
            raise FP8CheckpointError(f"{key}: only the routed experts are stored in FP8 "
                                     "(quantize='fp8', not fp8-dense)")
        out[hf_name(key)] = (t.dtype, tuple(t.shape))
    return out


def plan_shards(tensors: dict[str, tuple[torch.dtype, tuple[int, ...]]], root: Path,
                shard_bytes: int = SHARD_BYTES) -> Layout:
    """Shards of at most `shard_bytes` (a tensor larger than that gets its own), in order, and their headers."""
    groups, size = [[]], 0
    for name, (dtype, shape) in tensors.items():
        n = _nbytes(dtype, shape)
        if groups[-1] and size + n > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    files = [root / WEIGHT_FILES[0]] if len(groups) == 1 else [
        root / f"model-{k:05d}-of-{len(groups):05d}.safetensors" for k in range(1, len(groups) + 1)]
    headers, place = [], {}
    for index, names in enumerate(groups):
        meta, at = {}, 0
        for name in names:
            dtype, shape = tensors[name]
            end = at + _nbytes(dtype, shape)
            meta[name] = {"dtype": ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [at, end]}
            place[name] = (index, at, end)
            at = end
        text = json.dumps({"__metadata__": {"format": "pt"}, **meta}, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
        headers.append(len(text).to_bytes(8, "little") + text)
    return Layout(files, headers, place)


class ShardWriter:
    """The FP8 directory's shard files, written in place tensor by tensor (use as a context manager).

    Each file is created at its final size with its header; `write(name, t, at)` puts the bytes of `t`
    at byte `at` of tensor `name` (an expert's slice of a stacked tensor), so no shard is ever held in memory."""

    def __init__(self, layout: Layout):
        self.layout, self.handles = layout, []

    def __enter__(self) -> "ShardWriter":
        for path, header, index in zip(self.layout.files, self.layout.headers, range(len(self.layout.files))):
            f = open(path, "wb")
            f.write(header)
            f.truncate(len(header) + max((e for i, _, e in self.layout.place.values() if i == index), default=0))
            self.handles.append(f)
        return self

    def __exit__(self, *exc) -> None:
        for f in self.handles:
            f.close()

    def write(self, name: str, t: torch.Tensor, at: int = 0) -> None:
        index, begin, end = self.layout.place[name]
        data = t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy()
        assert begin + at + data.nbytes <= end, f"{name}: {data.nbytes} bytes at {at} overflow the tensor"
        f = self.handles[index]
        f.seek(len(self.layout.headers[index]) + begin + at)
        f.write(memoryview(data))


class _ExpertWriter:
    """Quantizes each expert as its tensors arrive (gate and up together, as `load_model(quantize='fp8')` does)
    and writes it straight to its slice of the stacked w13 / w2 and their scales."""

    def __init__(self, writer: ShardWriter, dtype: torch.dtype, device: torch.device):
        self.writer, self.dtype, self.device, self.pending = writer, dtype, device, {}

    def put(self, reader: ShardReader, entry, slot) -> None:
        from ..fast.kernels import quantize_weight_fp8

        w = torch.empty(slot.shape, dtype=self.dtype, device=self.device)  # (I, H) or (H, I): one expert's matrix
        reader.copy_into(entry, w)
        name = hf_name(slot.key)  # ...experts.w13 or ...experts.w2
        if slot.rows is not None:  # gate or up: wait for the other half
            halves = self.pending.setdefault((name, slot.expert), {})
            halves[slot.rows[0]] = w
            if len(halves) < 2:
                return
            w = torch.cat([halves[k] for k in sorted(halves)])  # (2I, H)
            del self.pending[(name, slot.expert)]
        q, scale = quantize_weight_fp8(w)
        self.writer.write(name, q, slot.expert * q.numel())  # fp8: one byte per element
        self.writer.write(f"{name}_scale", scale, slot.expert * scale.numel() * scale.element_size())


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * dtype.itemsize


def _meta_models(cfg, dtype: torch.dtype):
    """The source's model (bf16 experts, per-expert slots) and the FP8 one (stacked experts), both on `meta`."""
    with torch.device("meta"):
        plain, quantized = LLaDA2MoE(cfg).to(dtype), LLaDA2MoE(cfg).to(dtype)
    fp8_experts(quantized)
    return plain, quantized


def convert(src: str | Path, dst: str | Path, device: str = "cpu", shard_bytes: int = SHARD_BYTES,
            progress: bool = False) -> list[Path]:
    """Write the FP8 checkpoint of `src` to `dst` (new or empty), streaming; the weight files written.

    One source tensor (or one expert's gate + up) is in memory at a time, never the model: each is read,
    cast to the checkpoint's dtype as `load_model` casts it, quantized if it is an expert, and written
    at its place in the output shards, which are laid out from the config before anything is read."""
    src, dst, device = Path(src), Path(dst), torch.device(device)
    cfg, raw = read_config(src)
    if stored_fp8(raw, str(src / "config.json")):
        raise FP8CheckpointError(f"{src}: already an FP8 checkpoint")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise FP8CheckpointError(f"{dst}: exists and is not an empty directory; choose a new one")
    dtype = getattr(torch, cfg.dtype) if cfg.dtype else torch.bfloat16  # the checkpoint's own, as saved
    plain, quantized = _meta_models(cfg, dtype)
    slots, layout = plan(src, plain), plan_shards(output_tensors(quantized), dst, shard_bytes)
    weights = {p.name for p in shard_files(src)} | set(WEIGHT_FILES)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in weights and f.name != "config.json":
            shutil.copy2(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps(raw | {"quantization_config": QUANTIZATION_CONFIG}, indent=2) + "\n",
                                     encoding="utf-8")
    with torch.no_grad(), ShardWriter(layout) as writer:
        _stream(slots, writer, _ExpertWriter(writer, dtype, device), dtype, progress)
    _write_index(layout)
    return layout.files


def _stream(slots, writer: ShardWriter, experts: _ExpertWriter, dtype: torch.dtype, progress: bool) -> None:
    by_file = {}
    for entry, slot in slots:
        by_file.setdefault(entry.file, []).append((entry, slot))
    staging = staging_buffer(torch.device("cpu"))
    for f in _progress(list(by_file), progress):
        with ShardReader(f, staging) as reader:
            for entry, slot in by_file[f]:
                if slot.expert is not None:
                    experts.put(reader, entry, slot)
                    continue
                t = torch.empty(slot.shape, dtype=dtype)  # one dense tensor, cast as the loader casts it
                reader.copy_into(entry, t)
                writer.write(hf_name(slot.key), t)
    if experts.pending:
        raise FP8CheckpointError(f"{len(experts.pending)} expert(s) with a gate but no up projection (or the reverse)")


def _write_index(layout: Layout) -> None:
    if len(layout.files) < 2:
        return
    total = sum(end - begin for _, begin, end in layout.place.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {name: layout.files[i].name for name, (i, _, _) in layout.place.items()}}
    (layout.files[0].parent / WEIGHT_FILES[1]).write_text(json.dumps(index, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.weights.fp8_checkpoint", description=(
        "Write a model's routed experts once as FP8 (e4m3, one fp32 scale per 128x128 tile); the app, the CLI "
        "and Pipeline.load then load DST as FP8 directly."))
    parser.add_argument("src", help="a llada2_moe model directory (bf16 or fp32 weights)")
    parser.add_argument("dst", help="a new (or empty) directory for the FP8 checkpoint")
    parser.add_argument("--device", default="cpu", help="where the experts are quantized: cpu or cuda")
    args = parser.parse_args(argv)
    try:
        files = convert(args.src, args.dst, args.device, progress=True)
    except (CheckpointError, FP8CheckpointError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in files) / 2**30
    print(f"wrote {args.dst}: {len(files)} file(s), {size:.2f} GiB, routed experts in FP8 (e4m3, 128x128 tiles)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
