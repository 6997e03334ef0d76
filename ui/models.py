"""The models the playground offers, by name, and where they live while it runs.

Candidates, in order: `assets/model` (the embedded LLaDA2.1-format model), `assets/model22` (the small
LLaDA2.2-format model beside it, whose decoding deletes and inserts), every `--model DIR`, the
directories of `LLADA_MODELS` (os.pathsep-separated), then the Hugging Face checkpoints of
spaces.yaml's `preload_from_hub` that are in the local hub cache (a Space downloads them when it is
built; nothing is downloaded here), named by their repo id (`inclusionAI/LLaDA2.1-mini`). Every
candidate is checked before anything is loaded — config.json, presets.json, and whether its weights fit where
they would live (estimated from
config.json by `llada.weights.memory`) — and is either offered or withheld with the reason, shown under the
model selector. A broken model never stops the app from starting. On a GPU with FP8 (compute capability
8.9 or later; a ZeroGPU slice is an H200) a model whose weights do not fit in bf16 but do with FP8
experts is offered with them (quantized while it loads); an FP8 checkpoint (`python -m llada.fast.quantize`)
is sized in FP8 everywhere and withheld on a GPU without FP8. On the CPU a model whose weights do not fit
as saved but fit in int8 (`llada.fast.int8`) is offered in int8 (quantized while it loads); an int8
checkpoint (`python -m llada.weights.int8_checkpoint`) is offered on the CPU only. A `--model` that is a
hub repo id is downloaded first (`llada.weights.hub`, app.py).

Where the models live (`Runtime`):

* a ZeroGPU Space (`SPACES_ZERO_GPU` set; app.py imports `spaces` before anything touches CUDA):
  every offered model is loaded once, at start, in the main process, in its checkpoint's dtype, and
  moved to `cuda` — ZeroGPU's pattern: `spaces` keeps the weights and attaches them to a GPU inside
  each `@spaces.GPU` call, whose duration `gpu_seconds` sizes from the request (`ui.zerogpu`: the
  weights' transfer, the request's forwards at the measured forward time, never below its budget);
* a CUDA machine: loaded on first use (the default model in the background at start) onto the GPU;
* the CPU: the same on the CPU, fp32 for small models; a model that does not fit is not offered.

Loaded models are shared read-only by every session (decoding never mutates them).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from .zerogpu import CLOCK, ON_CALL, on_gpu, zero_gpu  # noqa: F401  (on_gpu: the handlers' decorator, from here too)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "assets" / "model"
MODEL22 = ROOT / "assets" / "model22"  # offered beside the embedded model (its examples name it)
ENV_VAR = "LLADA_MODELS"
SPACE_FILE = ROOT / "spaces.yaml"
ZEROGPU_ROOM = 70 * 2**30  # VRAM of one ZeroGPU workload (an H200 slice, huggingface.co/docs/hub/spaces-zerogpu)


@dataclass(frozen=True)
class Runtime:
    kind: str  # "zerogpu", "cuda" or "cpu"
    device: str  # where the weights are used
    room: int | None = None  # bytes the models may take there (None: ask the device when needed)
    fp8: bool = False  # the GPU runs FP8 kernels (sm89 and later)


@dataclass(frozen=True)
class Offered:
    name: str  # what the selector shows and the API's `model` argument takes
    path: str
    dtype: object  # torch.dtype the weights load in
    note: str  # "bfloat16, 16.3 B parameters, 30.4 GiB"
    quantize: str | None = None  # "fp8": routed experts in FP8; "int8": experts and linears (at load, or stored)


@dataclass(frozen=True)
class Withheld:
    name: str
    path: str
    reason: str


def runtime() -> Runtime:
    if zero_gpu():  # CUDA is not touched in the main process; the slice is an H200 (sm90: FP8)
        return Runtime("zerogpu", "cuda", ZEROGPU_ROOM, fp8=True)
    import torch

    if not torch.cuda.is_available():
        return Runtime("cpu", "cpu")
    from llada.fast.kernels.devices import spec_of

    return Runtime("cuda", "cuda", fp8=spec_of(torch.device("cuda")).fp8)


def model_dirs(cli: list[str] | None = None, env: str | None = None,
               default: Path | None = DEFAULT_MODEL, beside: tuple[Path, ...] = (MODEL22,)) -> list:
    """The candidates in order, without duplicates: local paths (a `cli` entry may be a (name, path) pair: a
    downloaded hub repo), then (repo, path) of hub snapshots. `beside`: the shipped models offered after
    the default one (none when there is no default)."""
    env = os.environ.get(ENV_VAR, "") if env is None else env
    shipped = [] if default is None else [d for d in (default, *beside) if d.exists()]
    local = [str(d) for d in shipped] + list(cli or [])
    local += [d for d in env.split(os.pathsep) if d.strip()]
    out, seen = [], set()
    for name, d in [d if isinstance(d, tuple) else ("", d) for d in local] + hub_snapshots(preloaded_repos()):
        key = str(Path(d).expanduser().resolve())
        if key not in seen:
            seen.add(key)
            out.append((name, key) if name else key)
    return out


def cli_models(names: list[str]) -> list:
    """`--model` values: a directory as it is, a hub repo id as (repo, its snapshot), downloaded now with a
    progress bar (`llada.weights.hub`; CheckpointError, one line, when it cannot be had)."""
    from llada.weights import hub

    return [(name, str(hub.model_path(name))) if hub.is_repo_id(name) else name for name in names]


def preloaded_repos(space_file: Path = SPACE_FILE) -> list[str]:
    """Repo ids of spaces.yaml's `preload_from_hub` (an entry may name files after the id)."""
    if not space_file.exists():
        return []
    import yaml

    entries = (yaml.safe_load(space_file.read_text(encoding="utf-8")) or {}).get("preload_from_hub") or []
    return [str(e).split()[0] for e in entries if str(e).strip()]


def hub_snapshots(repos: list[str]) -> list[tuple[str, str]]:
    """(repo, local snapshot directory) of the `repos` already in the hub cache (never downloads)."""
    from huggingface_hub import snapshot_download

    found = []
    for repo in repos:
        try:
            found.append((repo, snapshot_download(repo, local_files_only=True)))
        except Exception:  # noqa: BLE001 - not in the cache (or no cache): not a candidate
            continue
    return found


def check_model(name: str, path: str, rt: Runtime, room: int | None, world: int = 1) -> Offered | Withheld:
    """Offered when config.json and presets.json are valid and the weights fit `room` (one rank's of `world`,
    experts split across ranks: `ui.group`); else why not."""
    from llada.weights import memory
    from llada.weights.checkpoint import CheckpointError, read_config
    from llada.weights.fp8_format import stored_fp8
    from llada.weights.int8_format import stored_int8
    from llada.presets import PresetError, load_presets

    root = Path(path)
    try:
        cfg, raw = read_config(root)
        load_presets(root, cfg.version)
        source = str(root / "config.json")
        stored = "int8" if stored_int8(raw, source) else "fp8" if stored_fp8(raw, source) else None
    except (CheckpointError, PresetError, ValueError) as err:
        return Withheld(name or root.name, path, str(err))
    name = name or str(raw.get("name") or root.name)
    dtype = memory.default_dtype(cfg, rt.device, stored)
    quantize, why = _sized(cfg, dtype, rt, room, stored, world)
    dtype = memory.default_dtype(cfg, rt.device, quantize)
    if rt.kind == "zerogpu" and not why:  # the weights are read into host memory first
        why = memory.does_not_fit(cfg, dtype, "cpu", quantize)
    if why:
        return Withheld(name, path, f"not offered on this {rt.kind.upper()} machine: {why}")
    params = sum(cfg.parameter_counts().values())
    size = memory.weight_bytes(cfg, dtype, quantize, world) / 2**30
    held = {"fp8": " with FP8 experts", "int8": " with int8 weights"}.get(quantize, "")
    kind = str(dtype).removeprefix("torch.") + held + (" (quantized at load)" if quantize and not stored else "")
    per_rank = f" per rank of {world}" if world > 1 else ""
    return Offered(name, path, dtype, f"{kind}, {params / 1e9:.2f} B parameters, {size:.2f} GiB{per_rank}", quantize)


def _sized(cfg, dtype, rt: Runtime, room: int | None, stored: str | None,
           world: int = 1) -> tuple[str | None, str | None]:
    """(quantize, why not): as saved; FP8 experts on an FP8 GPU or int8 on the CPU where only they fit; why it
    cannot load. Across ranks (`world` > 1) the same, sized by one rank's share (its slice of the experts)."""
    from llada.weights import memory

    if stored == "fp8" and rt.kind != "cpu" and not rt.fp8:
        return "fp8", "an FP8 checkpoint needs a GPU of compute capability 8.9 or later"
    if stored == "int8" and rt.kind != "cpu":
        return "int8", "an int8 checkpoint runs on the CPU (PyTorch's CPU int8 kernel)"
    why = memory.does_not_fit(cfg, dtype, rt.device, stored, room=room, world=world)
    if not why or stored:
        return stored, why
    if rt.kind == "cpu":
        if memory.auto_quantize(cfg, "cpu", room=room, world=world) == "int8":
            return "int8", None
        need = memory.weight_bytes(cfg, memory.default_dtype(cfg, "cpu", "int8"), "int8", world) / memory.GIB
        per_rank = " per rank" if world > 1 else ""
        return None, f"{why}; with int8 weights they need {need:.1f} GiB{per_rank}, still too much"
    if not rt.fp8:
        return None, why
    why_fp8 = memory.does_not_fit(cfg, dtype, rt.device, "fp8", room=room, world=world)
    return ("fp8", None) if why_fp8 is None else (None, why_fp8)  # its sizes say "with fp8 experts"


@dataclass
class Models:
    """The offered models and their loaded Pipelines; `get` is safe to call from several threads."""

    candidates: list = field(default_factory=list)  # paths, or (name, path) pairs
    rt: Runtime | None = None
    world: int = 1  # ranks the routed experts are split across (`torchrun ... app.py`, ui/group.py)

    def __post_init__(self) -> None:
        self.rt = self.rt or runtime()
        self.offered, self.withheld = [], []
        self._loaded: dict[str, object] = {}
        self._lock = threading.Lock()
        room = self.rt.room if self.rt.room is not None else _room(self.rt.device)
        for c in self.candidates:
            name, path = c if isinstance(c, tuple) else ("", str(c))
            checked = check_model(name, path, self.rt, room, self.world)
            checked = replace(checked, name=_unique(checked.name, self.offered + self.withheld))
            (self.offered if isinstance(checked, Offered) else self.withheld).append(checked)
            if isinstance(checked, Offered) and room is not None:
                room -= _weights(checked)  # models stay loaded: each one takes from the room left

    @property
    def dirs(self) -> list[str]:
        return [m.path for m in self.offered]

    @property
    def default(self) -> str | None:
        return self.offered[0].path if self.offered else None

    def choices(self) -> list[tuple[str, str]]:
        """(name, path) for the model selector."""
        return [(m.name, m.path) for m in self.offered]

    def names(self) -> list[str]:
        return [m.name for m in self.offered]

    def note(self) -> str:
        """One line per withheld model and why (empty when every candidate is offered); on a group, first what
        it serves."""
        group = [f"{m.name}: split across {self.world} ranks (torchrun), the one model this group serves"
                 for m in self.offered if self.world > 1]
        return "\n".join(group + [f"{m.name}: {m.reason}" for m in self.withheld])

    def hold(self, pipe) -> None:
        """Keep `pipe`, loaded elsewhere (a group's ranks load together, `ui.group`), as its offered model's."""
        model = next((m for m in self.offered if m.name == pipe.name), None)
        if model is None:
            raise ValueError(f"model {pipe.name!r} is not offered here; offered: {', '.join(self.names()) or 'none'}")
        with self._lock:
            self._loaded[model.path] = pipe

    def checked_path(self, path) -> str | None:
        """`path` when it is an offered model's path (None or empty: None, the default); ValueError otherwise."""
        if path is None or path == "":
            return None
        if isinstance(path, str) and path in self.dirs:
            return path
        return self.path_of(path) if isinstance(path, str) else self.path_of(repr(path))

    def path_of(self, name: str | None) -> str | None:
        """The path of an offered model's name (None for the default); ValueError otherwise."""
        if name is None or (isinstance(name, str) and not name.strip()):
            return None
        for m in self.offered:
            if name == m.name:
                return m.path
        for m in self.withheld:
            if name == m.name:
                raise ValueError(f"model {name!r} is not offered: {m.reason}")
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(self.names()) or 'none offered'}")

    def get(self, path: str | None):
        """The Pipeline of an offered model (by path or name; None: the default), loaded on first use."""
        path = path or self.default
        if path is None:
            raise ValueError("no model is offered: " + (self.note() or "put a checkpoint in assets/model or "
                                                                        "start with --model DIR"))
        model = next((m for m in self.offered if path in (m.path, m.name)), None)
        if model is None:
            self.path_of(path)  # raises with the reason (withheld) or the offered names
        with self._lock:
            if model.path not in self._loaded:
                self._loaded[model.path] = self._load(model)
            return self._loaded[model.path]

    def load_resident(self) -> None:
        """Load every offered model now (ZeroGPU: at start, in the main process); a failure withholds it."""
        for model in list(self.offered):
            try:
                self.get(model.path)
            except (RuntimeError, ValueError, OSError) as err:  # CheckpointError, out of memory, ...
                self.offered.remove(model)
                self.withheld.append(Withheld(model.name, model.path, f"failed to load: {err}"))
        CLOCK.weights = sum(_weights(m) for m in self.offered)  # what a new GPU worker copies
        if self.rt.kind == "zerogpu" and self.engines_on_gpu not in ON_CALL:
            ON_CALL.append(self.engines_on_gpu)

    def engines_on_gpu(self) -> None:
        """Inside a ZeroGPU call: choose each loaded model's engine once per worker process (`ui.zerogpu`)."""
        from llada.decode import generate
        from llada.fast.engine import use_engine

        with self._lock:
            pipes = list(self._loaded.values())
        for pipe in pipes:
            if getattr(pipe, "engine_pid", None) != os.getpid():
                pipe.engine = use_engine(pipe.model, "auto", ids=(pipe.mask_id, pipe.eos_id), decode=generate)
                logging.getLogger("ui").info("%s: %s", pipe.name, pipe.engine.line())
                pipe.engine_pid = os.getpid()

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

    def _load(self, model: Offered):
        from llada.pipeline import Pipeline

        where = "cpu" if self.rt.kind == "zerogpu" else self.rt.device
        pipe = Pipeline.load(model.path, dtype=model.dtype, device=where, quantize=model.quantize, progress=True)
        if self.rt.kind == "zerogpu":
            pipe.model.to(self.rt.device)  # ZeroGPU: `spaces` takes the weights over and maps them into GPU calls
        pipe.name = model.name
        if pipe.engine is not None:  # the full reason stays in the log and the API's stats; visitors read a sentence
            logging.getLogger("ui").info("%s: %s", model.name, pipe.engine.line())
        return pipe


def warm_up(pipe) -> None:
    """One short decode, so the first visitor's run does not pay the one-time setup (allocations, kernel choice)."""
    pipe.generate([pipe.eos_id], pipe.config("S", gen_length=8, block_length=8))


def _unique(name: str, others: list) -> str:
    taken = {m.name for m in others}
    if name not in taken:
        return name
    k = 2
    while f"{name} ({k})" in taken:
        k += 1
    return f"{name} ({k})"


def _room(device: str) -> int | None:
    from llada.weights import memory

    return memory.available_bytes(device)


def _weights(model: Offered) -> int:
    from llada.weights import memory
    from llada.weights.checkpoint import read_config

    cfg, _ = read_config(Path(model.path))
    return memory.weight_bytes(cfg, model.dtype, model.quantize)


def gpu_seconds(gen_length, block_length, max_post_steps=16, runs: int = 1) -> int:
    """The GPU slot a request needs (`ui.zerogpu.SlotClock`): its most forwards (every block drafts one token
    per forward, then up to max_post_steps mask-free steps and a cache forward, within the request budget's
    forwards), never less than the request budget's seconds."""
    from . import runs as live

    block_length = 16 if block_length is None else block_length  # a preset's own: 16 or more here
    budget = live.BUDGET
    try:
        gen, block, post = int(gen_length), max(int(block_length), 1), max(int(max_post_steps), 0)
    except (TypeError, ValueError, OverflowError):
        return CLOCK.seconds(0, budget.seconds)  # the request will be refused before any forward
    blocks = -(-max(gen, 0) // block) + 1  # +1: the prompt's tail shares a block with the first tokens
    forwards = runs * min(blocks * (block + post + 2), budget.forwards)
    return CLOCK.seconds(forwards, budget.seconds)
