"""Find the Learn view's lessons: a systematic search with the engine over the checkable tasks.

    python -m ui.learn.lesson_search --model assets/model --n 50 --seed 0

Every held-out item of llada/data/tasks.py (`--n` per task) is decoded the ways a lesson needs, through
the playground's own path (`ui.learn.record.run_trace`), and the best items for each idea are printed:

    draft     S right with no edit; most answer tokens drafted by one forward, then fewest forwards
    edit      S right and S with editing off wrong (the edit was needed); fewest edits, then forwards
    modes     S wrong and Q right; most forwards saved by S (Q forwards / S forwards)
    mbe       a grid of modes x block lengths x MBE windows, each run with MBE on and off: how often MBE
              fires (>= 1 MBE edit), changes the answer, repairs it (wrong without MBE, right with it) or
              breaks it; the repairs are the candidates, fewest edits first
    baseline  (not searched) M2T only on the draft lesson's prompt

The code prompts of the evaluation (`llada.eval.harness.CODE_PROMPTS`, not checkable) join the MBE grid
to count how often MBE fires on free text. The chosen items go into `ui.learn.record.LESSONS` by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from llada.eval.harness import CODE_PROMPTS
from llada.data.tasks import TASKS, Item, eval_items

from .lessons import parallel_drafts
from .record import RunSpec, run_trace

TOP = 3  # candidates printed per idea


class Outcome(NamedTuple):
    """What one run of one item did (right is None for a prompt without a checkable answer)."""

    right: bool | None
    forwards: int
    tpf: float
    drafts: int
    edits: int
    mbe_edits: int
    parallel: int  # most answer tokens drafted by one forward
    text: str


class Runner:
    """Decodes items with specs, each (prompt, spec) once."""

    def __init__(self, pipe, gen_length: int):
        self.pipe, self.gen_length, self.cache = pipe, gen_length, {}

    def __call__(self, item: Item, spec: RunSpec) -> Outcome:
        key = (item.prompt, spec)
        if key not in self.cache:
            trace = run_trace(self.pipe, item.prompt, spec, self.gen_length)
            right = None if item.task == "code" else item.check(trace.text)
            self.cache[key] = Outcome(right, trace.forwards, trace.tpf, trace.drafts, trace.edits, trace.mbe_edits,
                                      parallel_drafts(trace), trace.text or "")
        return self.cache[key]


S, Q, M2T, S_NOEDIT = RunSpec("S"), RunSpec("Q"), RunSpec("M2T only"), RunSpec("S", edit=False)


def find_draft(run: Runner, items: list[Item]) -> list[tuple]:
    """S right without edits, and M2T only right too (the baseline lesson replays the same prompt)."""
    found = [(-o.parallel, o.forwards, len(i.prompt), i, o) for i in items
             if (o := run(i, S)).right and not o.edits and run(i, M2T).right]
    return sorted(found, key=lambda c: c[:3])[:TOP]


def find_edit(run: Runner, items: list[Item]) -> list[tuple]:
    found = [(o.edits, o.forwards, len(i.prompt), i, o) for i in items
             if (o := run(i, S)).right and o.edits and run(i, S_NOEDIT).right is False]
    return sorted(found, key=lambda c: c[:3])[:TOP]


def find_modes(run: Runner, items: list[Item]) -> list[tuple]:
    found = [(-q.forwards / s.forwards, len(i.prompt), i, s, q) for i in items
             if (s := run(i, S)).right is False and (q := run(i, Q)).right and s.forwards < q.forwards]
    return sorted(found, key=lambda c: c[:2])[:TOP]


@dataclass
class Tally:
    """MBE at one setting: runs, runs where it fired, its edits, and what it did to the answers."""

    runs: int = 0
    fired: int = 0
    mbe_edits: int = 0
    changed: int = 0  # the answer text differs from the run without MBE (MBE changes the window even unfired)
    repaired: int = 0  # wrong without MBE, right with it
    repaired_by_edit: int = 0  # ... and MBE fired
    broke: int = 0  # right without MBE, wrong with it
    fired_by_task: dict = field(default_factory=lambda: defaultdict(int))

    def add(self, task: str, off: Outcome, on: Outcome) -> None:
        self.runs += 1
        if on.mbe_edits:
            self.fired += 1
            self.fired_by_task[task] += 1
        self.mbe_edits += on.mbe_edits
        self.changed += on.text != off.text
        self.repaired += bool(on.right and off.right is False)
        self.repaired_by_edit += bool(on.right and off.right is False and on.mbe_edits)
        self.broke += bool(on.right is False and off.right)


def mbe_grid(run: Runner, items: list[Item], modes, blocks, windows) -> tuple[dict, list[tuple]]:
    """Every (mode, block, window) on every item, MBE off and on: the tallies and the repairs found."""
    from tqdm import tqdm

    tallies, repairs = {}, []
    settings = [(m, b, w) for m in modes for b in blocks for w in windows]
    for mode, block, window in tqdm(settings, desc="MBE grid", file=sys.stderr):
        tally = tallies[(mode, block, window)] = Tally()
        off_spec = RunSpec(mode, block_length=block)
        on_spec = RunSpec(mode, mbe=True, block_length=block, mbe_window=window)
        for item in items:
            off, on = run(item, off_spec), run(item, on_spec)
            tally.add(item.task, off, on)
            if on.right and off.right is False and on.mbe_edits:
                repairs.append((on.edits + on.mbe_edits, on.forwards, len(item.prompt), item, on_spec, off, on))
    return tallies, sorted(repairs, key=lambda c: c[:3])


def mbe_table(tallies: dict) -> list[str]:
    head = ("| mode | block | window | runs | MBE fired | MBE edits | answer changed | wrong → right | "
            "wrong → right, MBE fired | right → wrong | fired per task |")
    lines = [head, "|" + "---|" * 11]
    for (mode, block, window), t in tallies.items():
        per_task = ", ".join(f"{task} {n}" for task, n in sorted(t.fired_by_task.items()))
        lines.append(f"| {mode} | {block} | {window} | {t.runs} | {t.fired} ({100 * t.fired / max(t.runs, 1):.1f}%) "
                     f"| {t.mbe_edits} | {t.changed} | {t.repaired} | {t.repaired_by_edit} | {t.broke} | {per_task} |")
    total = Tally()
    for t in tallies.values():
        for name in ("runs", "fired", "mbe_edits", "changed", "repaired", "repaired_by_edit", "broke"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
    share = 100 * total.fired / max(total.runs, 1)
    lines.append(f"| all | | | {total.runs} | {total.fired} ({share:.1f}%) | {total.mbe_edits} | {total.changed} | "
                 f"{total.repaired} | {total.repaired_by_edit} | {total.broke} | |")
    return lines


def describe(o: Outcome) -> str:
    return (f"{'right' if o.right else 'wrong' if o.right is False else 'unchecked'} {o.text!r}, "
            f"{o.forwards} forwards, TPF {o.tpf:.2f}, drafts {o.drafts}, edits {o.edits}, MBE edits {o.mbe_edits}, "
            f"most answer tokens in one forward {o.parallel}")


def report(run: Runner, items: list[Item], code: list[Item], args) -> list[str]:
    lines = ["## draft: S right without edits (and M2T only right), most answer tokens per forward"]
    lines += [f"* {c[3].prompt!r}: S {describe(c[4])}" for c in find_draft(run, items)]
    lines += ["", "## edit: S right, S with editing off wrong"]
    lines += [f"* {c[3].prompt!r}: S {describe(c[4])} | editing off {describe(run(c[3], S_NOEDIT))}"
              for c in find_edit(run, items)]
    lines += ["", "## modes: S wrong, Q right, S faster"]
    lines += [f"* {c[2].prompt!r} ({-c[0]:.1f}x): S {describe(c[3])} | Q {describe(c[4])}"
              for c in find_modes(run, items)]
    tallies, repairs = mbe_grid(run, items + code, args.modes.split(","), args.blocks, args.windows)
    lines += ["", "## mbe: how often MBE fires (runs with >= 1 MBE edit) and what it does to the answer", ""]
    lines += mbe_table(tallies)
    lines += ["", f"## mbe: repairs (wrong without MBE, right with it): {len(repairs)}"]
    lines += [f"* {c[3].prompt!r} {c[4].mode} block {c[4].block_length} window {c[4].mbe_window}: MBE off "
              f"{describe(c[5])} | MBE on {describe(c[6])}" for c in repairs[:TOP * 2]]
    return lines


def main(argv: list[str] | None = None) -> None:
    import torch

    from llada.pipeline import Pipeline

    from ..models import DEFAULT_MODEL

    ap = argparse.ArgumentParser(description="Search held-out task items for the Learn view's lessons.")
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--n", type=int, default=50, help="held-out items per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gen-length", type=int, default=32)
    ap.add_argument("--modes", default="S,Q", help="modes of the MBE grid")
    ap.add_argument("--blocks", type=int, nargs="+", default=[4, 8, 16], help="block lengths of the MBE grid")
    ap.add_argument("--windows", type=int, nargs="+", default=[1, 2], help="MBE windows of the grid")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    run = Runner(Pipeline.load(args.model), args.gen_length)
    items = [item for task in TASKS for item in eval_items(task, args.n, args.seed)]
    code = [Item("code", prompt, "") for prompt in CODE_PROMPTS]
    print(f"model {args.model}: {len(items)} held-out items (seed {args.seed}) + {len(code)} code prompts, "
          f"gen_length {args.gen_length}\n")
    print("\n".join(report(run, items, code, args)))


if __name__ == "__main__":
    main()
