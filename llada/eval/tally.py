"""Counters of an evaluation: the modes every report compares, a run's tally, and a mode's report.

`MODES` names each report row and the preset it decodes with; `Tally` adds up one mode's runs on a set of
items (accuracy, TPF: generated tokens over all forwards, TPS, edits, MBE runs); `ModeReport` averages
accuracy over tasks (equal weight per task, as the paper averages benchmarks). The task track
(`harness`), the code track (`codetrack`) and sweeps (`sweep`) all count with these.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

MODES = {  # report name -> (preset, overrides)
    "S": ("S", {}),
    "Q": ("Q", {}),
    "M2T": ("M2T", {}),
    "S_noedit": ("S", {"editing_threshold": None}),
    "S_MBE": ("S", {"mbe": True}),
}


@dataclass
class Tally:
    """Running totals of one mode on one set of items."""

    correct: int = 0
    items: int = 0
    tokens: int = 0
    forwards: int = 0
    seconds: float = 0.0
    edits: int = 0
    multi_block: int = 0  # runs whose output crossed a block boundary
    mbe_fired: int = 0  # ... of which MBE edited an earlier block

    def add(self, other: "Tally") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def summary(self) -> dict:
        return {"accuracy": self.correct / max(self.items, 1), "tpf": self.tokens / max(self.forwards, 1),
                "tps": self.tokens / self.seconds if self.seconds else 0.0,
                "edits_per_100": 100.0 * self.edits / max(self.tokens, 1),
                "mbe_runs": self.mbe_fired / max(self.multi_block, 1)}


def run_tally(result, cfg, correct: int = 0) -> Tally:
    """The counters of one finished Trace."""
    tokens = len(result.output_ids)
    first, last = result.prompt_length // cfg.block_length, (result.prompt_length + tokens - 1) // cfg.block_length
    multi = int(tokens > 0 and last > first)
    return Tally(correct=correct, items=1, tokens=tokens, forwards=result.forwards, seconds=result.seconds,
                 edits=result.edits + result.mbe_edits, multi_block=multi, mbe_fired=multi * int(result.mbe_edits > 0))


@dataclass
class ModeReport:
    threshold: float
    editing_threshold: float | None
    tasks: dict[str, Tally] = field(default_factory=dict)

    def to_dict(self) -> dict:
        total = Tally()
        for tally in self.tasks.values():
            total.add(tally)
        overall = total.summary()
        # accuracy averaged over tasks (equal weight per task, as the paper averages benchmarks)
        overall["accuracy"] = sum(t.summary()["accuracy"] for t in self.tasks.values()) / max(len(self.tasks), 1)
        per_task = {name: {"accuracy": t.summary()["accuracy"], "tpf": t.summary()["tpf"]}
                    for name, t in self.tasks.items()}
        return {"threshold": self.threshold, "editing_threshold": self.editing_threshold, **overall,
                "tasks": per_task}


def mode_config(pipe, mode: str, gen_length: int):
    preset, overrides = MODES[mode]
    return pipe.config(preset, gen_length=gen_length, eos_early_stop=True, **overrides)
