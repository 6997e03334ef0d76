"""The grid of a Score | TPF sweep: its cells (decode settings), the spec of grid and items, and points.

A cell is one decode setting: the model's S mode with τ_mask, τ_edit (None: editing off), MBE and the
block length set explicitly. The model's presets (S, Q, M2T) are cells too, each with its own values, so
they can be marked among the grid. MBE with editing off is not a cell: without T2T an earlier block has
nothing to edit. A `Point` is the measured (accuracy, TPF) of a cell; the Pareto front is the set of
points that no other point beats on both. Running a sweep is `llada.eval.sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..presets import tau_text
from .tally import ModeReport, Tally
from ..data.split import check_split
from ..data.tasks import TASKS, Item, eval_items

HUMANEVAL = "humaneval+"  # HumanEval+ problems, checked in the sandbox (llada/eval/humaneval_task.py)
TASK_SETS = (*TASKS, HUMANEVAL)

TAU_MASKS = (0.05, 0.3, 0.5, 0.7, 0.9)
TAU_EDITS = (None, 0.0, 0.5, 0.9)  # None: editing (T2T) off
PRESETS = ("S", "Q", "M2T")
GEN_LENGTH = 32  # answers are short; eos_early_stop ends a decode at the first finished block with EOS
MAX_ITEMS = 200  # items per task


@dataclass(frozen=True)
class Cell:
    """One decode setting of the sweep; `preset` names the model's preset it stands for ("" in the grid)."""

    tau_mask: float
    tau_edit: float | None
    mbe: bool
    block_length: int
    preset: str = ""

    @cached_property
    def key(self) -> str:
        """A stable id: the cache's key of this cell's point (kept: a sweep's progress reads it often)."""
        mbe = "mbe" if self.mbe else "nombe"
        return f"{self.preset or 'grid'}|{self.tau_mask:g}|{tau_text(self.tau_edit)}|{mbe}|{self.block_length}"

    @property
    def series(self) -> str:
        return "MBE on" if self.mbe else "MBE off"

    @property
    def label(self) -> str:
        name = f"{self.preset} preset: " if self.preset else ""
        return (f"{name}τ_mask {self.tau_mask:g} · τ_edit {tau_text(self.tau_edit)} · {self.series} · "
                f"block {self.block_length}")

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
        bad = [t for t in self.tasks if t not in TASK_SETS]
        if bad or not self.tasks:
            raise ValueError(f"tasks must be some of {', '.join(TASK_SETS)}, got {list(self.tasks)!r}")
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
        """The items of each task (HumanEval+: its first n problems, whatever the seed and split)."""
        from .humaneval_task import humaneval_items  # the evaluator reads its canonical outputs on first use

        return {task: humaneval_items(self.n) if task == HUMANEVAL else eval_items(task, self.n, self.seed, self.split)
                for task in self.tasks}

    def items_key(self) -> dict:
        """What decides the points besides the cell (the cache keys its files by this)."""
        return {"tasks": list(self.tasks), "n": self.n, "seed": self.seed, "split": self.split,
                "gen_length": self.gen_length}


def _ordered(values, name: str) -> tuple:
    values = tuple(dict.fromkeys(values))  # without duplicates
    if name == "tasks":
        return tuple(sorted(values, key=list(TASK_SETS).index))
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
