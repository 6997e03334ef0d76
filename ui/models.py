"""The model directories the playground offers, loaded lazily and shared read-only by every user.

`python app.py` offers `assets/model`, then every `--model DIR`, then the directories of the
`LLADA_MODELS` environment variable (os.pathsep-separated), then, on a GPU, the Hugging Face
checkpoints that spaces.yaml's `preload_from_hub` put in the local hub cache (a Space downloads them
when it is built; nothing is downloaded here). A model is loaded on first use and kept, one
`Pipeline` per path (bf16 on CUDA, fp32 on CPU); decoding never mutates it, so all sessions share it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "assets" / "model"
ENV_VAR = "LLADA_MODELS"
SPACE_FILE = ROOT / "spaces.yaml"


def model_dirs(cli: list[str] | None = None, env: str | None = None, default: Path | None = DEFAULT_MODEL) -> list[str]:
    """The offered directories in order, without duplicates (the default first when it exists)."""
    env = os.environ.get(ENV_VAR, "") if env is None else env
    dirs = ([str(default)] if default is not None and default.exists() else []) + list(cli or [])
    dirs += [d for d in env.split(os.pathsep) if d.strip()]
    if has_gpu():
        dirs += hub_snapshots(preloaded_repos())
    seen, out = set(), []
    for d in dirs:
        key = str(Path(d).expanduser().resolve())
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def preloaded_repos(space_file: Path = SPACE_FILE) -> list[str]:
    """Repo ids of spaces.yaml's `preload_from_hub` (an entry may name files after the id)."""
    if not space_file.exists():
        return []
    import yaml

    entries = (yaml.safe_load(space_file.read_text(encoding="utf-8")) or {}).get("preload_from_hub") or []
    return [str(e).split()[0] for e in entries if str(e).strip()]


def hub_snapshots(repos: list[str]) -> list[str]:
    """Local snapshot directories of `repos` already in the hub cache (never downloads)."""
    from huggingface_hub import snapshot_download

    found = []
    for repo in repos:
        try:
            found.append(snapshot_download(repo, local_files_only=True))
        except Exception:  # noqa: BLE001 - not in the cache (or no cache): not offered
            continue
    return found


def has_gpu() -> bool:
    """CUDA now, or a ZeroGPU Space (the `spaces` package), where CUDA appears inside GPU handlers."""
    import importlib.util

    import torch

    return torch.cuda.is_available() or importlib.util.find_spec("spaces") is not None


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Models:
    """Lazy, cached `Pipeline`s by path; `get` is safe to call from several threads."""

    def __init__(self, dirs: list[str]):
        self.dirs = list(dirs)
        self._loaded: dict[str, object] = {}
        self._lock = threading.Lock()

    def choices(self) -> list[tuple[str, str]]:
        """(label, path) for the model selector."""
        return [(f"{Path(d).name} — {d}", d) for d in self.dirs]

    @property
    def default(self) -> str | None:
        return self.dirs[0] if self.dirs else None

    def get(self, path: str | None):
        """The Pipeline of `path` (loading it on first use); ValueError for an unknown path."""
        from llada.pipeline import Pipeline

        path = path or self.default
        if path is None:
            raise ValueError("no model is offered: put a checkpoint in assets/model or start with --model DIR")
        if path not in self.dirs:
            raise ValueError(f"unknown model {path!r}; choose one of the offered directories")
        with self._lock:
            if path not in self._loaded:
                self._loaded[path] = _load(Pipeline, path)
            return self._loaded[path]

    def warm(self) -> threading.Thread | None:
        """Load the default model in the background, so the first run starts at once."""
        if self.default is None:
            return None
        thread = threading.Thread(target=self._warm, daemon=True)
        thread.start()
        return thread

    def _warm(self) -> None:
        try:
            warm_up(self.get(self.default))
        except Exception:  # noqa: BLE001 - the first run reports the same error to the user
            pass


def warm_up(pipe) -> None:
    """One short decode, so the first visitor's run does not pay the one-time setup (allocations, kernel choice)."""
    pipe.generate([pipe.eos_id], pipe.config("S", gen_length=8, block_length=8))


def _load(pipeline_cls, path: str):
    import torch

    where = device()
    return pipeline_cls.load(path, device=where, dtype=torch.bfloat16 if where == "cuda" else torch.float32)


def on_gpu(fn):
    """`spaces.GPU(fn)` on a ZeroGPU Space (when the `spaces` package is present), else `fn` unchanged."""
    try:
        import spaces
    except ImportError:
        return fn
    return spaces.GPU(fn)
