"""Calibrating a model's S and Q presets from a sweep of both tracks.

    python -m llada.eval.calibrate --model assets/model --n 100 --code-n 200 --out presets-sweep.json

The official LLaDA2.1 presets (S τ_mask 0.5 / τ_edit 0, Q 0.7 / 0.5) were set for 16B and 100B models
whose drafts are confident. A small model is rarely that sure of a token: at τ_mask 0.5 it drafts about
as few tokens per forward as at 0.7, and S shows no trade-off against Q. This command measures a grid of
(τ_mask, τ_edit) on both tracks, with the model's S preset for every other setting and MBE off:

    tasks  `llada.eval.sweep` on the checkable tasks (answers of a few tokens, gen_length 32)
    code   the held-out code track (`llada.eval.codetrack`, gen_length 128): parses, in scope, TPF

and chooses the presets as the paper describes them (`choose`):

    Q  the best quality: the cell with editing on whose quality (the mean of task accuracy and code
       parses) is highest, the faster one on a tie
    S  the best quality among the cells with editing on that draft at least `SPEEDUP` times Q's code TPF
       and that beat their own τ_mask without editing (editing recovers what eager drafting loses)

Code TPF decides speed: a task's answer is decoded in two or three forwards at any τ_mask (its TPF is
bounded by the answer's length), so the trade-off can only show on text as long as the code track's.

Both tracks keep finished cells on disk (`--cache-dir`): the tasks in the sweep cache
(`llada.eval.sweep_cache`), the code track per cell beside it, so a stopped calibration continues where it
stopped. The JSON report holds the command, the commit, the machine, the load average, every point of
both tracks and the choice; `--write` also writes the chosen S and Q into the model's presets.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..presets import OFFICIAL, load_presets, write_presets
from .sweep_cache import DEFAULT_DIR, SweepCache, _write_atomic, model_fingerprint
from .sweep_grid import Cell, SweepSpec

TAU_MASKS = (0.1, 0.15, 0.2, 0.3, 0.5, 0.7)
TAU_EDITS = (None, 0.0, 0.3, 0.5)  # None: editing off
SPEEDUP = 1.5  # S drafts at least this many times Q's tokens per forward (on the code track)
CODE_GEN_LENGTH = 128


@dataclass(frozen=True)
class Measured:
    """One grid cell on both tracks: task accuracy and TPF, code parses and TPF."""

    tau_mask: float
    tau_edit: float | None
    task_accuracy: float
    task_tpf: float
    code_parses: float
    code_in_scope: float
    code_tpf: float

    @property
    def quality(self) -> float:
        """The mean of the two tracks' scores: task accuracy and the share of code bodies that parse."""
        return (self.task_accuracy + self.code_parses) / 2

    def to_dict(self) -> dict:
        return {"tau_mask": self.tau_mask, "tau_edit": self.tau_edit, "task_accuracy": self.task_accuracy,
                "task_tpf": self.task_tpf, "code_parses": self.code_parses, "code_in_scope": self.code_in_scope,
                "code_tpf": self.code_tpf, "quality": self.quality}


@dataclass(frozen=True)
class Choice:
    """The chosen Q and S (S None when no cell drafts fast enough and gains from editing), and why."""

    q: Measured
    s: Measured | None
    s_noedit: Measured | None  # S's τ_mask with editing off
    reason: str


def choose(cells: list[Measured], speedup: float = SPEEDUP) -> Choice:
    """Q: the best quality with editing on; S: the best quality among the cells with editing on that draft
    `speedup` × Q's code TPF and beat their τ_mask without editing (see the module docstring)."""
    by_key = {(c.tau_mask, c.tau_edit): c for c in cells}
    editing = [c for c in cells if c.tau_edit is not None]
    if not editing:
        raise ValueError("the grid has no cell with editing on: add a τ_edit value other than off")
    q = max(editing, key=lambda c: (c.quality, c.code_tpf))
    fast = []
    for c in editing:
        plain = by_key.get((c.tau_mask, None))
        if c.code_tpf >= speedup * q.code_tpf and plain is not None and c.quality > plain.quality:
            fast.append((c, plain))
    if not fast:
        return Choice(q, None, None, f"no cell with editing on drafts {speedup:g}x Q's code TPF "
                                     f"({q.code_tpf:.2f}) and gains from editing")
    s, plain = max(fast, key=lambda pair: (pair[0].quality, pair[0].code_tpf))
    return Choice(q, s, plain, f"S: code TPF {s.code_tpf / q.code_tpf:.2f}x Q's; editing adds "
                               f"{100 * (s.quality - plain.quality):.1f} points of quality at τ_mask {s.tau_mask:g}")


# ---- the two tracks --------------------------------------------------------------------------------------

def task_points(pipe, spec: SweepSpec, cache: SweepCache | None) -> dict[tuple, object]:
    """(τ_mask, τ_edit) -> sweep Point of every grid cell on the task track (cached cells are not decoded)."""
    from tqdm import tqdm

    from .sweep import sweep

    bar = tqdm(desc="calibrate tasks", unit="decode", file=sys.stderr)
    for progress in sweep(pipe, spec, cache):
        bar.total = progress.total
        bar.update(progress.done - bar.n)
    bar.close()
    return {(p.cell.tau_mask, p.cell.tau_edit): p for p in progress.points if not p.cell.preset}


class CodeCache:
    """Finished code-track cells of one model, engine and set of items, in one JSON file (atomic writes)."""

    def __init__(self, root: Path, pipe, header: dict):
        from .sweep import engine_of

        self.header = {"version": 1, "model": str(Path(pipe.path).resolve()),
                       "fingerprint": model_fingerprint(pipe.path), "engine": engine_of(pipe), **header}
        key = hashlib.sha256(json.dumps(self.header, sort_keys=True).encode()).hexdigest()[:20]
        self.path = Path(root).expanduser() / f"code-{Path(pipe.path).resolve().name}-{key}.json"

    def load(self) -> dict[str, dict]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))["points"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def save(self, points: dict[str, dict]) -> None:
        """Add `points` to the file (cells another calibration of the same items saved meanwhile are kept)."""
        _write_atomic(self.path, json.dumps(self.header | {"points": self.load() | points}, indent=1))


def code_points(pipe, cells: list[Cell], items, cache: CodeCache | None, gen_length: int) -> dict[tuple, dict]:
    """(τ_mask, τ_edit) -> code-track summary of every cell, one τ_mask at a time (its τ_edit cells side by
    side, sharing forwards through the memo), each τ_mask's cells saved as they finish."""
    from .codetrack import evaluate_code_configs

    done = cache.load() if cache else {}
    for tau_mask in dict.fromkeys(c.tau_mask for c in cells):
        todo = [c for c in cells if c.tau_mask == tau_mask and c.key not in done]
        if not todo:
            continue
        report = evaluate_code_configs(pipe, items, {c.key: c.config(pipe, gen_length) for c in todo})
        done |= report["modes"]
        if cache:
            cache.save(done)
    return {(c.tau_mask, c.tau_edit): done[c.key] for c in cells}


def measure(pipe, spec: SweepSpec, code_items, cache_dir: str | None, gen_length: int = CODE_GEN_LENGTH,
            code_key: dict | None = None) -> list[Measured]:
    """Every grid cell of `spec` (MBE off) on both tracks."""
    grid = [c for c in spec.cells(pipe.presets) if not c.preset and not c.mbe]
    tasks = task_points(pipe, spec, SweepCache(cache_dir) if cache_dir is not None else None)
    cache = CodeCache(cache_dir, pipe, code_key or {}) if cache_dir is not None else None
    code = code_points(pipe, grid, code_items, cache, gen_length)
    out = []
    for c in grid:
        t, k = tasks[(c.tau_mask, c.tau_edit)], code[(c.tau_mask, c.tau_edit)]
        out.append(Measured(c.tau_mask, c.tau_edit, t.accuracy, t.tpf, k["parses"], k["in_scope"], k["tpf"]))
    return out


# ---- report and command line -------------------------------------------------------------------------

def machine() -> dict:
    """Where the calibration ran: date, CPU, threads, versions, the commit (with a + when the tree is dirty)."""
    import torch

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], capture_output=True, text=True, timeout=20).stdout.strip()
        except OSError:
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit + ("+" if dirty else ""),
            "host_cpu": platform.machine(), "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version()}


def format_table(cells: list[Measured], choice: Choice) -> str:
    """Markdown table of every cell; the chosen S and Q and the official ones marked."""
    marks = {}
    for name, values in OFFICIAL.items():
        marks.setdefault((values["threshold"], values["editing_threshold"]), []).append(f"{name} (official)")
    for name, c in (("Q", choice.q), ("S", choice.s)):
        if c is not None:
            marks.setdefault((c.tau_mask, c.tau_edit), []).insert(0, f"**{name}**")
    head = "| τ_mask | τ_edit | tasks % | tasks TPF | code parses % | code in scope % | code TPF | quality | |"
    lines = [head, "|" + "---|" * 9]
    for c in cells:
        edit = "off" if c.tau_edit is None else f"{c.tau_edit:g}"
        lines.append(f"| {c.tau_mask:g} | {edit} | {100 * c.task_accuracy:.1f} | {c.task_tpf:.2f} | "
                     f"{100 * c.code_parses:.1f} | {100 * c.code_in_scope:.1f} | {c.code_tpf:.2f} | "
                     f"{100 * c.quality:.1f} | {', '.join(marks.get((c.tau_mask, c.tau_edit), []))} |")
    return "\n".join(lines) + f"\n\n{choice.reason}"


def chosen_presets(root: str | Path, choice: Choice) -> dict:
    """The model's own presets.json with S and Q set to the choice (every other setting kept)."""
    path = Path(root) / "presets.json"
    own = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    for name, c in (("S", choice.s), ("Q", choice.q)):
        own[name] = own.get(name, {}) | {"threshold": c.tau_mask, "editing_threshold": c.tau_edit}
    return own


def _floats(text: str, allow_off: bool) -> tuple:
    return tuple(None if allow_off and v.strip().lower() == "off" else float(v) for v in text.split(",") if v.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m llada.eval.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="assets/model", help="model directory")
    ap.add_argument("--tau-mask", default=",".join(f"{v:g}" for v in TAU_MASKS), help="comma list of τ_mask")
    ap.add_argument("--tau-edit", default="off,0,0.3,0.5", help="comma list of τ_edit (off: editing off)")
    ap.add_argument("--n", type=int, default=100, help="task items per task")
    ap.add_argument("--code-n", type=int, default=200, help="held-out functions of the code track")
    ap.add_argument("--code-root", action="append", default=None,
                    help="directory of .py files for the code track (repeatable; default: the installed Python)")
    ap.add_argument("--code-gen-length", type=int, default=CODE_GEN_LENGTH, help="tokens per code completion")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speedup", type=float, default=SPEEDUP, help="S's code TPF at least this times Q's")
    ap.add_argument("--cache-dir", default=str(DEFAULT_DIR), help="where finished cells are kept")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write finished cells")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    ap.add_argument("--write", action="store_true", help="write the chosen S and Q into the model's presets.json")
    args = ap.parse_args(argv)
    try:
        args.tau_mask, args.tau_edit = _floats(args.tau_mask, False), _floats(args.tau_edit, True)
    except ValueError as err:
        ap.error(f"--tau-mask / --tau-edit: {err}")
    if args.code_n < 1 or args.code_gen_length < 1:
        ap.error("--code-n and --code-gen-length must be at least 1")
    if args.speedup <= 0:
        ap.error("--speedup must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    import torch

    from ..data.tasks import TASKS
    from ..fast.heap import keep_freed_memory
    from ..pipeline import Pipeline
    from .codetrack import held_out_items

    args = parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    load_before, started = os.getloadavg(), time.monotonic()
    pipe = Pipeline.load(args.model)
    try:
        spec = SweepSpec(args.tau_mask, args.tau_edit, (False,), (), tuple(TASKS), args.n, args.seed)
    except ValueError as err:
        sys.exit(f"error: {err}")
    items = held_out_items(args.code_n, args.seed, args.code_root)
    code_key = {"n": len(items), "seed": args.seed, "gen_length": args.code_gen_length, "roots": args.code_root}
    cells = measure(pipe, spec, items, None if args.no_cache else args.cache_dir, args.code_gen_length, code_key)
    choice = choose(cells, args.speedup)
    report = {"command": "python -m llada.eval.calibrate " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": machine(), "load_average": {"start": load_before, "end": os.getloadavg()},
              "seconds": round(time.monotonic() - started, 1), "model": pipe.name, "tasks": list(TASKS),
              "n": args.n, "code_n": len(items), "code_gen_length": args.code_gen_length, "seed": args.seed,
              "speedup": args.speedup, "official": OFFICIAL, "cells": [c.to_dict() for c in cells],
              "chosen": {"S": choice.s and choice.s.to_dict(), "Q": choice.q.to_dict(),
                         "S_noedit": choice.s_noedit and choice.s_noedit.to_dict(), "reason": choice.reason}}
    print(format_table(cells, choice))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.write:
        if choice.s is None:
            sys.exit(f"not written: {choice.reason}")
        write_presets(chosen_presets(args.model, choice), args.model)
        load_presets(args.model)  # the written table loads
        print(f"wrote S and Q into {Path(args.model) / 'presets.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
