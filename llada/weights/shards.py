"""Read safetensors shards straight into preallocated tensors, with plain file reads.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
(`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`) and then the raw
little-endian bytes, offsets counted from the end of the header. `read_header` parses and checks a
header without reading any data. `ShardReader.copy_into(entry, dest)` streams one tensor into `dest`
(any dtype, any device): on the CPU with the same dtype the bytes are read into `dest` itself; else
they pass through one reusable staging buffer of at most `CHUNK` bytes and are cast on the way.

Nothing is memory-mapped: file pages stay in the kernel's page cache and never count against the
process's resident memory, so loading a checkpoint costs the model plus one chunk, not the model
plus the file. (safetensors' own `safe_open` maps the file; a mapped page that has been read counts
as resident until the mapping closes.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "F8_E4M3": torch.float8_e4m3fn,  # F8_E4M3: the experts of an FP8 checkpoint (llada.weights.fp8_checkpoint)
          "I8": torch.int8}  # I8: the weights of an int8 checkpoint (llada.weights.int8_checkpoint)
CHUNK = 64 << 20  # staging buffer: large enough for full-speed reads, small beside any model
MAX_HEADER = 100 << 20  # the safetensors format's own limit on the JSON header


class ShardError(ValueError):
    """A safetensors file that cannot be read; the message names the file (and the tensor)."""


class Entry(NamedTuple):
    """Where one tensor's bytes are: file, dtype, shape and absolute byte range."""

    name: str
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_header(path: Path) -> dict[str, Entry]:
    """The tensors of one safetensors file, checked against the file's size (reads only the header)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            n = int.from_bytes(raw, "little") if len(raw) == 8 else -1
            if not 0 < n <= min(MAX_HEADER, size - 8):
                raise ShardError(f"{path}: cannot read safetensors file (no valid header)")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: cannot read safetensors file ({err})") from None
    if not isinstance(header, dict):
        raise ShardError(f"{path}: cannot read safetensors file (the header is not a JSON object)")
    start = 8 + n
    return {name: _entry(path, name, meta, start, size) for name, meta in header.items() if name != "__metadata__"}


def _entry(path: Path, name: str, meta, start: int, size: int) -> Entry:
    try:
        kind, shape, (begin, end) = meta["dtype"], tuple(meta["shape"]), meta["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in (*shape, begin, end)):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise ShardError(f"{path}: cannot read safetensors file (bad header entry for tensor {name})") from None
    if kind not in DTYPES:
        raise ShardError(f"{path}: tensor {name} has dtype {kind}; this loader reads {', '.join(DTYPES)} "
                         "(of pre-quantized checkpoints it reads those python -m llada.fast.quantize writes)")
    entry = Entry(name, path, DTYPES[kind], shape, start + begin, start + end)
    if end - begin != entry.numel * entry.dtype.itemsize or entry.end > size:
        raise ShardError(f"{path}: tensor {name} is truncated or its byte range does not match its shape {shape}")
    return entry


class ShardReader:
    """One open shard; `copy_into` fills destination tensors from it (use as a context manager)."""

    def __init__(self, path: Path, staging: torch.Tensor):
        self.path, self.staging = path, staging  # staging: (CHUNK,) uint8 on the CPU, reused for every tensor
        self.file = open(path, "rb", buffering=0)

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def copy_into(self, entry: Entry, dest: torch.Tensor) -> None:
        """Fill the contiguous tensor `dest` (same number of elements) with `entry`'s values."""
        assert dest.is_contiguous() and dest.numel() == entry.numel, (entry.name, tuple(dest.shape))
        flat = dest.view(-1)
        self.file.seek(entry.begin)
        if dest.device.type == "cpu" and dest.dtype == entry.dtype:
            self._read(flat.view(torch.uint8).numpy(), entry)  # the bytes land in the parameter itself
            return
        item = entry.dtype.itemsize
        step = self.staging.numel() // item
        for lo in range(0, entry.numel, step):
            n = min(step, entry.numel - lo)
            chunk = self.staging[: n * item]
            self._read(chunk.numpy(), entry)
            flat[lo:lo + n].copy_(chunk.view(entry.dtype))  # cast and move (host -> device) in one copy

    def _read(self, buffer, entry: Entry) -> None:
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view):
            got = self.file.readinto(view[done:])
            if not got:
                raise ShardError(f"{self.path}: tensor {entry.name} ends early (file truncated)")
            done += got


def staging_buffer(device: torch.device) -> torch.Tensor:
    """The reusable host buffer for chunked copies (pinned when the destination is a GPU)."""
    pin = device.type == "cuda"
    return torch.empty(CHUNK, dtype=torch.uint8, pin_memory=pin)
