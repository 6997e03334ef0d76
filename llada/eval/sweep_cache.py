"""Finished sweep points on disk, per model: a second sweep of the same settings is instant.

A cache file holds the points of one model and one set of items:

    <cache dir>/<model dir name>-<key>.json   {"version", "model", "fingerprint", "engine", "items", "budget",
                                              "points": {cell key: point}}

`key` hashes the model directory, a fingerprint of the files that decide its outputs (config, presets,
tokenizer, weights), the engine it runs on (device and dtypes: bf16 on a GPU decodes differently from fp32
on a CPU), the items (tasks, n, seed, split, generation length) and the per-decode budget. Points are
keyed by cell inside the file, so grids that share cells share their points, and a stopped sweep keeps
what it finished. Writes are atomic (a temporary file renamed over the old one).

The fingerprint reads small files whole; a weight file above `FULL_HASH_BYTES` is fingerprinted by its
size and its first and last `SAMPLE_BYTES` (where a safetensors file keeps its header and a tensor's
tail), so a 16 GB checkpoint is not read end to end on every visit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path

from ..budget import Budget
from .sweep_grid import Point, SweepSpec

VERSION = 2  # bump when a point's meaning changes: old files are then ignored
DEFAULT_DIR = Path("~/.cache/llada-playground/explorer")
MODEL_FILES = {"config.json", "presets.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
FULL_HASH_BYTES = 64 << 20
SAMPLE_BYTES = 4 << 20
_fingerprints: dict[tuple, str] = {}  # (path, size, mtime) of every file -> fingerprint: re-read only on change
_lock = threading.Lock()


def _file_digest(path: Path, size: int) -> str:
    h = hashlib.sha256(f"{path.name}:{size}".encode())
    with path.open("rb") as f:
        if size <= FULL_HASH_BYTES:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(f.read(SAMPLE_BYTES))
            f.seek(size - SAMPLE_BYTES)
            h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def model_fingerprint(root: str | Path) -> str:
    """A hash of the files of a model directory that decide its outputs."""
    root = Path(root)
    files = sorted(p for p in root.iterdir() if p.is_file() and (p.name in MODEL_FILES
                                                                 or p.name.endswith(WEIGHT_SUFFIXES)))
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    memo = (str(root.resolve()), stats)
    with _lock:
        if memo in _fingerprints:
            return _fingerprints[memo]
    h = hashlib.sha256()
    for p, (_, size, _) in zip(files, stats):
        h.update(_file_digest(p, size).encode())
    with _lock:
        _fingerprints[memo] = h.hexdigest()
    return _fingerprints[memo]


class SweepCache:
    """Points of finished cells, in JSON files under `root` (default ~/.cache/llada-playground/explorer)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root or DEFAULT_DIR).expanduser()

    def header(self, model_dir: str | Path, engine: str, spec: SweepSpec, budget: Budget) -> dict:
        return {"version": VERSION, "model": str(Path(model_dir).resolve()),
                "fingerprint": model_fingerprint(model_dir), "engine": engine, "items": spec.items_key(),
                "budget": asdict(budget)}

    def path(self, model_dir: str | Path, engine: str, spec: SweepSpec, budget: Budget) -> Path:
        """The file of this model, engine, items and budget: <directory name>-<hash of them all>.json."""
        header = self.header(model_dir, engine, spec, budget)
        key = hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()[:20]
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(model_dir).resolve().name)[:60]
        return self.root / f"{name}-{key}.json"

    def load(self, model_dir: str | Path, engine: str, spec: SweepSpec, budget: Budget) -> dict[str, Point]:
        """cell key -> Point of every cached point (empty when there is no usable file)."""
        try:
            data = json.loads(self.path(model_dir, engine, spec, budget).read_text(encoding="utf-8"))
            return {key: Point.from_dict(p) for key, p in data["points"].items()}
        except (OSError, ValueError, KeyError, TypeError):  # missing, unreadable or from another version
            return {}

    def save(self, model_dir: str | Path, engine: str, spec: SweepSpec, budget: Budget,
             point: Point) -> Path:
        """Add `point` to the file of its model, engine, items and budget."""
        path = self.path(model_dir, engine, spec, budget)
        points = {key: p.to_dict() for key, p in self.load(model_dir, engine, spec, budget).items()}
        points[point.cell.key] = point.to_dict()
        data = self.header(model_dir, engine, spec, budget) | {"points": points}
        _write_atomic(path, json.dumps(data, indent=1, ensure_ascii=False))
        return path


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
