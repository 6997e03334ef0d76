"""Score | TPF sweeps: accuracy against tokens per forward over a grid of (τ_mask, τ_edit), MBE off and on.

    python -m llada.eval.sweep --model assets/model --n 10                # a readable table
    python -m llada.eval.sweep --model assets/model --n 10 --csv          # or --json; progress on stderr

The LLaDA2.1 paper reports each decoding setting as a pair (score, TPF) (its Tables 1 and 4). A sweep
measures that pair for every cell of a grid on the checkable tasks (`llada.eval.tasks`), so the trade-off
reads as a curve: the Pareto front is the set of cells that no other cell beats on both accuracy and TPF.

A cell is one decode setting: the model's S mode with τ_mask, τ_edit (None: editing off), MBE and the
block length set explicitly. The model's presets (S, Q, M2T) are cells too, each with its own values, so
they can be marked among the grid. MBE with editing off is not a cell: without T2T an earlier block has
nothing to edit. Every cell decodes the same held-out items (`eval_items`) with `eos_early_stop`, each
decode bounded by a `DecodeBudget` (a decode that passes it counts as wrong and as `cut`). The numbers
mean what they mean in `llada.eval.harness` (its `Tally` and `ModeReport` add them up): accuracy is the
mean of the per-task accuracies, TPF generated tokens over all forwards (cache refreshes included).

`sweep(pipe, spec)` is a generator of `Progress`, one after every decode and one with the `Point` of
each cell as it completes, so a caller can draw the chart as it grows, stop at any time or bound the time
(`max_seconds`). Given a `SweepCache` (llada/eval/sweep_cache.py), finished points are written as they
complete and read back by the next sweep of the same model and items: a second sweep is instant, a
stopped one continues where it stopped, and a grid that adds one value decodes only the new cells.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterator, NamedTuple

from .harness import ModeReport, Tally
from .split import check_split
from .tasks import TASKS, Item, eval_items

TAU_MASKS = (0.05, 0.3, 0.5, 0.7, 0.9)
TAU_EDITS = (None, 0.0, 0.5, 0.9)  # None: editing (T2T) off
PRESETS = ("S", "Q", "M2T")
GEN_LENGTH = 32  # answers are short; eos_early_stop ends a decode at the first finished block with EOS
MAX_DECODES = 20_000  # cells x tasks x items of one sweep (~25 min of the shipped model on one CPU thread)
MAX_ITEMS = 200  # items per task


@dataclass(frozen=True)
class DecodeBudget:
    """What one decode of a sweep may cost (a decode that passes it is counted wrong and `cut`)."""

    forwards: int = 256
    seconds: float = 10.0


@dataclass(frozen=True)
class Cell:
    """One decode setting of the sweep; `preset` names the model's preset it stands for ("" in the grid)."""

    tau_mask: float
    tau_edit: float | None
    mbe: bool
    block_length: int
    preset: str = ""

    @property
    def key(self) -> str:
        """A stable id: the cache's key of this cell's point."""
        edit = "off" if self.tau_edit is None else f"{self.tau_edit:g}"
        return f"{self.preset or 'grid'}|{self.tau_mask:g}|{edit}|{'mbe' if self.mbe else 'nombe'}|{self.block_length}"

    @property
    def series(self) -> str:
        return "MBE on" if self.mbe else "MBE off"

    @property
    def label(self) -> str:
        edit = "off" if self.tau_edit is None else f"{self.tau_edit:g}"
        name = f"{self.preset} preset: " if self.preset else ""
        return f"{name}τ_mask {self.tau_mask:g} · τ_edit {edit} · {self.series} · block {self.block_length}"

    def config(self, pipe, gen_length: int):
        """The DecodeConfig of this cell for `pipe` (its mode table for everything the cell leaves open)."""
        explicit = {"threshold": self.tau_mask, "editing_threshold": self.tau_edit, "mbe": self.mbe,
                    "block_length": self.block_length, "gen_length": gen_length, "eos_early_stop": True}
        return pipe.config(self.preset or "S", **explicit)

    def to_dict(self) -> dict:
        return {"preset": self.preset, "tau_mask": self.tau_mask, "tau_edit": self.tau_edit, "mbe": self.mbe,
                "block_length": self.block_length}


def _check_tau(name: str, values) -> None:
    for v in values:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0):
            raise ValueError(f"{name} values must be numbers in [0, 1], got {v!r}")


@dataclass(frozen=True)
class SweepSpec:
    """The grid and the items of a sweep (the grid's block length None: the model's S block length)."""

    tau_masks: tuple[float, ...] = TAU_MASKS
    tau_edits: tuple[float | None, ...] = TAU_EDITS
    mbe: tuple[bool, ...] = (False, True)
    presets: tuple[str, ...] = PRESETS
    tasks: tuple[str, ...] = tuple(TASKS)
    n: int = 10
    seed: int = 0
    split: str = "eval"
    block_length: int | None = None
    gen_length: int = GEN_LENGTH

    def __post_init__(self) -> None:
        _check_tau("tau_mask", self.tau_masks)
        _check_tau("tau_edit", self.tau_edits)
        if None in self.tau_masks:
            raise ValueError("tau_mask values must be numbers in [0, 1]; only tau_edit may be off")
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise ValueError(f"tasks must be some of {', '.join(TASKS)}, got {list(self.tasks)!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_ITEMS:
            raise ValueError(f"n (items per task) must be a whole number in [1, {MAX_ITEMS}], got {self.n!r}")
        if not set(self.mbe) <= {False, True}:
            raise ValueError(f"mbe values must be true or false, got {list(self.mbe)!r}")
        check_split(self.split)
        for name in ("tau_masks", "tau_edits", "mbe", "presets", "tasks"):  # one order, whatever was given
            object.__setattr__(self, name, _ordered(getattr(self, name), name))

    def cells(self, presets: dict[str, dict]) -> list[Cell]:
        """The grid's cells (MBE off first), then the presets' (unknown presets are an error)."""
        block = self.block_length or presets["S"]["block_length"]
        grid = [Cell(float(m), None if e is None else float(e), mbe, block)
                for mbe in self.mbe for e in self.tau_edits for m in self.tau_masks if not (mbe and e is None)]
        out = []
        for name in self.presets:
            if name not in presets:
                raise ValueError(f"unknown preset {name!r}; this model has {', '.join(presets)}")
            values = presets[name]
            out += [Cell(values["threshold"], values["editing_threshold"], mbe, values["block_length"], name)
                    for mbe in self.mbe if not (mbe and values["editing_threshold"] is None)]
        return grid + out

    def items(self) -> dict[str, list[Item]]:
        return {task: eval_items(task, self.n, self.seed, self.split) for task in self.tasks}

    def items_key(self) -> dict:
        """What decides the points besides the cell (the cache keys its files by this)."""
        return {"tasks": list(self.tasks), "n": self.n, "seed": self.seed, "split": self.split,
                "gen_length": self.gen_length}


def _ordered(values, name: str) -> tuple:
    values = tuple(dict.fromkeys(values))  # without duplicates
    if name == "tasks":
        return tuple(sorted(values, key=list(TASKS).index))
    if name in ("tau_masks", "tau_edits", "mbe"):
        return tuple(sorted(values, key=lambda v: -1.0 if v is None else float(v)))
    return values


@dataclass(frozen=True)
class Point:
    """The measured (accuracy, TPF) of one cell, with what explains it."""

    cell: Cell
    accuracy: float
    tpf: float
    tps: float
    edits_per_100: float
    items: int
    cut: int
    seconds: float
    tasks: dict[str, dict] = field(default_factory=dict)  # task -> {"accuracy": .., "tpf": ..}

    def to_dict(self) -> dict:
        return {**self.cell.to_dict(), "accuracy": self.accuracy, "tpf": self.tpf, "tps": self.tps,
                "edits_per_100": self.edits_per_100, "items": self.items, "cut": self.cut,
                "seconds": self.seconds, "tasks": self.tasks}

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        cell = Cell(d["tau_mask"], d["tau_edit"], d["mbe"], d["block_length"], d.get("preset", ""))
        return cls(cell, d["accuracy"], d["tpf"], d["tps"], d["edits_per_100"], d["items"], d["cut"],
                   d["seconds"], d.get("tasks", {}))


def point_of(cell: Cell, tallies: dict[str, Tally], cut: int) -> Point:
    report = ModeReport(cell.tau_mask, cell.tau_edit, tallies).to_dict()
    total = sum(t.items for t in tallies.values())
    seconds = sum(t.seconds for t in tallies.values())
    return Point(cell, report["accuracy"], report["tpf"], report["tps"], report["edits_per_100"], total, cut,
                 seconds, report["tasks"])


def dominates(a: Point, b: Point) -> bool:
    return a.accuracy >= b.accuracy and a.tpf >= b.tpf and (a.accuracy > b.accuracy or a.tpf > b.tpf)


def pareto_front(points: list[Point]) -> list[Point]:
    """The points no other point dominates (at least as accurate and as fast, better in one), by TPF."""
    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(front, key=lambda p: (p.tpf, -p.accuracy))


# ---- running -------------------------------------------------------------------------------------------

def score(pipe, item: Item, cfg, budget: DecodeBudget) -> tuple[Tally, bool]:
    """Decode one item within `budget`; its tally and whether the budget cut it."""
    ids = pipe.encode(item.prompt)
    trace = pipe.new_trace(ids, cfg)
    started, cut = time.monotonic(), False
    records = trace.follow(pipe.stream(ids, cfg))
    try:
        for _ in records:
            if trace.forwards > budget.forwards or time.monotonic() - started > budget.seconds:
                cut = True
                break
    finally:
        records.close()
    text = pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id])
    tally = Tally(correct=int(not cut and item.check(text)), items=1, tokens=len(trace.output_ids),
                  forwards=trace.forwards, seconds=trace.seconds, edits=trace.edits + trace.mbe_edits)
    return tally, cut


class Progress(NamedTuple):
    """One update of a sweep: how far it is, every point so far, and the point this update completed."""

    done: int  # decodes finished (a cached cell counts all its decodes)
    total: int  # decodes of the whole sweep
    cells: int  # cells of the whole sweep
    points: tuple[Point, ...]  # in the spec's cell order
    point: Point | None = None  # the point completed by this update
    cached: int = 0  # points read from the cache
    decoded: int = 0  # decodes run by this sweep so far (the rest came from the cache)
    status: str = "running"  # "running", "done" or "stopped"
    note: str = ""  # why the sweep stopped early
    seconds: float = 0.0  # wall time so far


def engine_of(pipe) -> str:
    """Where and in which number formats a pipeline decodes, e.g. "cpu/float32" (part of the cache's key)."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in pipe.model.parameters()})
    return f"{pipe.model.device.type}/{'+'.join(dtypes)}"


def sweep(pipe, spec: SweepSpec, cache=None, budget: DecodeBudget = DecodeBudget(),
          max_seconds: float | None = None, max_decodes: int = MAX_DECODES) -> Iterator[Progress]:
    """Measure every cell of `spec` on `pipe`, yielding `Progress`; the last update says done or stopped."""
    cells = spec.cells(pipe.presets)
    items = spec.items()
    per_cell = sum(map(len, items.values()))
    total = len(cells) * per_cell
    if total > max_decodes:
        raise ValueError(f"this sweep needs {total:,} decodes ({len(cells)} cells x {per_cell} items); at most "
                         f"{max_decodes:,}: choose fewer values or items")
    started = time.monotonic()
    where = (pipe.path, engine_of(pipe)) if cache is not None and pipe.path is not None else None
    known = cache.load(*where, spec, budget) if where else {}
    points = {c.key: known[c.key] for c in cells if c.key in known}
    state = _State(cells, points, total, per_cell, started, cached=len(points))
    yield state.update()
    todo = [c for c in cells if c.key not in points]
    if todo:
        pipe.generate(pipe.encode(items[spec.tasks[0]][0].prompt), todo[0].config(pipe, spec.gen_length))  # warm-up
    for cell in todo:
        point = _same_setting(pipe, cell, state, spec.gen_length)
        if point is None:
            point = yield from _measure(pipe, cell, items, spec, budget, state, max_seconds)
        if point is None:
            yield state.update(status="stopped", note=f"time budget reached: {max_seconds:g} s per sweep")
            return
        state.points[cell.key] = point
        if where:
            cache.save(*where, spec, budget, point)
        yield state.update(point=point)
    yield state.update(status="done")


def _same_setting(pipe, cell: Cell, state: "_State", gen_length: int) -> Point | None:
    """The point of a measured cell that decodes exactly as `cell` does (a preset equal to a grid cell)."""
    cfg = cell.config(pipe, gen_length)
    for other in state.cells:
        if other.key in state.points and other.config(pipe, gen_length) == cfg:
            state.copied += 1
            return replace(state.points[other.key], cell=cell)
    return None


@dataclass
class _State:
    cells: list[Cell]
    points: dict[str, Point]  # cell key -> point, filled as cells complete
    total: int
    per_cell: int
    started: float
    cached: int = 0  # points read from the cache
    copied: int = 0  # points copied from an equal cell (a preset that is also a grid cell)
    decoded: int = 0  # decodes run by this sweep

    def update(self, point: Point | None = None, status: str = "running", note: str = "") -> Progress:
        ordered = tuple(self.points[c.key] for c in self.cells if c.key in self.points)
        done = (self.cached + self.copied) * self.per_cell + self.decoded
        return Progress(done, self.total, len(self.cells), ordered, point, self.cached, self.decoded, status, note,
                        time.monotonic() - self.started)


def _measure(pipe, cell: Cell, items: dict[str, list[Item]], spec: SweepSpec, budget: DecodeBudget,
             state: _State, max_seconds: float | None):
    """Decode every item of one cell, yielding progress after each; returns its Point (None: out of time)."""
    cfg = cell.config(pipe, spec.gen_length)
    tallies, cut = {}, 0
    for task, task_items in items.items():
        tallies[task] = Tally()
        for item in task_items:
            if max_seconds is not None and time.monotonic() - state.started > max_seconds:
                state.decoded -= sum(t.items for t in tallies.values())  # this cell's decodes are dropped
                return None
            tally, was_cut = score(pipe, item, cfg, budget)
            tallies[task].add(tally)
            cut += was_cut
            state.decoded += 1
            yield state.update()
    return point_of(cell, tallies, cut)


if __name__ == "__main__":  # `python -m llada.eval.sweep`: the command line lives with the reports
    from .sweep_report import main

    main()
