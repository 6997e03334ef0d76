"""Int8 checkpoints: a model's matrices written once as int8 with per-row bf16 scales, read back as they are.

`python -m llada.weights.int8_checkpoint SRC DST` (`convert`) writes DST: SRC's config.json with a
`quantization_config` added (`llada.weights.int8_format`), every other file of SRC copied (tokenizer,
presets, model card), and the weights, streamed as `llada.weights.fp8_checkpoint` streams them: the
output shards are laid out from the config before anything is read (`plan_shards`, `ShardWriter`), then
one source tensor at a time is read (cast to bf16, as `load_model(SRC, quantize="int8")` casts it),
quantized if int8 takes it (`llada.fast.int8.quantize_int8`: one scale per output row) and written at its
place. The result is bit for bit what quantizing at load gives; memory stays at one tensor plus a read
buffer, whatever the model's size. Quantized tensors:

    model.layers.N.attention.query_key_value.weight   I8 (N, K)     + .scale  BF16 (N,)   (likewise dense,
                                                                        the dense SwiGLU, the shared experts)
    model.layers.N.mlp.experts.w13                   I8 (E, 2I, H)  + .w13_scale BF16 (E, 2I)   gate, then up rows
    model.layers.N.mlp.experts.w2                    I8 (E, H, I)   + .w2_scale  BF16 (E, H)

`load_model(DST)` reads them straight into the int8 buffers on the CPU (nothing is quantized), and refuses,
from config.json alone, a model that does not fit (`llada.weights.memory`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

from . import int8_format
from .checkpoint import CheckpointError, _progress, hf_name, plan, read_config, shard_files
from .fp8_checkpoint import SHARD_BYTES, WEIGHT_FILES, FP8CheckpointError, ShardWriter, _write_index, output_tensors, \
    plan_shards
from .shards import ShardReader, staging_buffer
from ..model import LLaDA2MoE

DTYPE = torch.bfloat16  # what everything that is not int8 is stored in (the int8 load's default dtype)


class Int8CheckpointError(RuntimeError):
    """A directory that cannot be converted or written (checkpoint.CheckpointError covers reading)."""


def convert(src: str | Path, dst: str | Path, shard_bytes: int = SHARD_BYTES, progress: bool = False) -> list[Path]:
    """Write the int8 checkpoint of `src` to `dst` (new or empty), streaming; the weight files written."""
    src, dst = Path(src), Path(dst)
    cfg, raw = read_config(src)
    if raw.get("quantization_config") is not None:
        raise Int8CheckpointError(f"{src}: already quantized ({raw['quantization_config'].get('quant_method')}); "
                                  "convert the bf16 checkpoint")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise Int8CheckpointError(f"{dst}: exists and is not an empty directory; choose a new one")
    with torch.device("meta"):
        plain, quantized = LLaDA2MoE(cfg).to(DTYPE), LLaDA2MoE(cfg).to(DTYPE)
    int8_format.swap_modules(quantized)
    tensors = output_tensors(quantized)  # HF name -> (dtype, shape)
    slots, layout = plan(src, plain), plan_shards(tensors, dst, shard_bytes)
    weights = {p.name for p in shard_files(src)} | set(WEIGHT_FILES)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in weights and f.name != "config.json":
            shutil.copy2(f, dst / f.name)
    config = raw | {"quantization_config": int8_format.QUANTIZATION_CONFIG, "dtype": "bfloat16",
                    "torch_dtype": "bfloat16"}
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    with torch.no_grad(), ShardWriter(layout) as writer:
        _stream(slots, writer, tensors, progress)
    _write_index(layout)
    return layout.files


def _stream(slots, writer: ShardWriter, tensors: dict, progress: bool) -> None:
    from ..fast.int8 import quantize_int8

    by_file = {}
    for entry, slot in slots:
        by_file.setdefault(entry.file, []).append((entry, slot))
    staging = staging_buffer(torch.device("cpu"))
    for f in _progress(list(by_file), progress):
        with ShardReader(f, staging) as reader:
            for entry, slot in by_file[f]:
                t = torch.empty(slot.shape, dtype=DTYPE)  # one tensor (or one expert's rows), cast as the loader casts
                reader.copy_into(entry, t)
                name = hf_name(slot.key)
                if tensors[name][0] == torch.int8:
                    write_rows(writer, name, slot, tensors[name][1], *quantize_int8(t))
                else:
                    writer.write(name, t)


def write_rows(writer: ShardWriter, name: str, slot, shape: tuple[int, ...], q: torch.Tensor, s: torch.Tensor) -> None:
    """Write q (n, K) int8 and s (n,) bf16, the quantized rows of the int8 tensor `name` (shape (N, K) or
    (E, N, K)) that `slot` names, at their place: row r of expert e is row e * N + r of the flattened tensor."""
    rows = shape[-2]
    first = (slot.expert or 0) * rows + (slot.rows[0] if slot.rows else 0)
    writer.write(name, q, first * shape[-1])  # one byte per code
    writer.write(int8_format.scale_key(name), s, first * s.element_size())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.weights.int8_checkpoint", description=(
        "Write a model's experts and linear layers once as int8 (one bf16 scale per output row); the CLI, "
        "Pipeline.load and the app then load DST on the CPU as int8 directly."))
    parser.add_argument("src", help="a llada2_moe model directory (bf16 or fp32 weights)")
    parser.add_argument("dst", help="a new (or empty) directory for the int8 checkpoint")
    args = parser.parse_args(argv)
    try:
        files = convert(args.src, args.dst, progress=True)
    except (CheckpointError, Int8CheckpointError, FP8CheckpointError, ValueError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in files) / 2**30
    print(f"wrote {args.dst}: {len(files)} file(s), {size:.2f} GiB, experts and linear layers in int8 (row scales)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
