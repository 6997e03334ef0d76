"""Record the Learn view's lessons: `python -m ui.learn.record [--model DIR] [--out FILE]`.

A lesson shows one idea of the decoder on one prompt, with one run or two side by side:

    draft     drafting in parallel: S fills many masks in one forward
    edit      an edit repairing a draft: a T2T edit turns a wrong draft into the right answer
    modes     S vs Q on the same prompt: S needs fewer forwards, Q gets it right
    mbe       Multi-Block Editing: the same settings without and with MBE; with it an earlier block is repaired
    baseline  M2T only: cautious drafting, editing off
    heal      break it and watch it heal: a finished answer poked (one token corrupted), T2T edits it back
    indel     LLaDA2.2's moves, on assets/model22: a DELETE and a SPLIT (an inserted mask) in one run

A lesson names its model (`Lesson.model`, the embedded assets/model unless it says otherwise); the
recorder loads each model once and writes its name and directory beside the lesson.

The default `LESSONS` were found on the shipped model by `python -m ui.learn.lesson_search` (held-out
items of llada/data/tasks.py). Recording is deterministic: greedy decoding on one CPU thread, and the
engine's timings are left out (a lesson shows steps and forwards, not seconds), so recording twice
writes the same bytes. After recording, every lesson is checked against what its idea must show
(`ui.learn.lessons.problems`); a model on which a prompt no longer shows its idea is reported, with
the command that finds new prompts.

    python -m ui.learn.record                     # assets/model -> assets/learn_trace.json
    python -m ui.learn.record --model DIR --prompt "12 + 34 =" --runs S Q S+MBE --gen-length 64  # a custom lesson
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from llada.trace import Trace

from ..models import DEFAULT_MODEL, MODEL22, ROOT
from ..runs import drain, start
from ..settings import check_pokes, check_request
from .lessons import RECORDING, Recording, problems

SEARCH = "python -m ui.learn.lesson_search --model DIR"


class RunSpec(NamedTuple):
    """How one run of a lesson decodes: a mode's preset, with what the lesson changes."""

    mode: str  # "S", "Q" or "M2T only"
    mbe: bool = False
    block_length: int | None = None  # None: the mode's preset
    mbe_window: int = 1
    edit: bool = True  # False: editing (T2T) off
    pokes: tuple[str, ...] = ()  # STEP:POS:TOKEN as `--poke` takes them; a STEP past the run's end (`AFTER_END`)
    # applies to the finished answer and re-opens its block

    @classmethod
    def parse(cls, text: str, block_length: int | None = None) -> "RunSpec":
        """'S', 'Q', 'M2T only', each with an optional '+MBE' (the command line's --runs)."""
        mode, _, extra = text.partition("+")
        if extra and extra.strip().upper() != "MBE":
            raise ValueError(f"run {text!r}: only '+MBE' may follow the mode")
        return cls(mode.strip(), mbe=bool(extra), block_length=block_length)


@dataclass(frozen=True)
class Lesson:
    idea: str
    title: str
    caption: str  # one line: what to look for
    prompt: str
    answer: str | None  # the checkable answer (None for free text)
    runs: tuple[RunSpec, ...]
    gen_length: int = 32
    model: Path = DEFAULT_MODEL  # the model directory the lesson is recorded on


AFTER_END = 1000  # a poke step past any lesson's last forward: the poke applies to the finished answer


ZELMIVO = ("def cube(zelmivo):\n", "    return zelmivo * zelmivo * zelmivo\n")
# candidates on the shipped model (v4) with its calibrated S (τ_mask 0.3 / τ_edit 0) and Q (0.7 / 0): the draft of
# `python -m ui.learn.lesson_search --n 40 --seed 0`; the edit, S vs Q and MBE lessons from 400 held-out rename
# items (seed 1), S right with an edit where S without editing is wrong, S wrong where Q is right, and the one MBE
# repair of blocks 4 / 8 / 16 in S and Q (in Q, blocks of 4): v4 gets 98% of the tasks right, so such items are rare
LESSONS = (
    Lesson("draft", "1 · Drafting in parallel",
           "S drafts every mask whose p passes τ_mask 0.3: the whole function body appears in one forward, "
           "and the next forward only checks it.", *ZELMIVO, (RunSpec("S"),)),
    Lesson("edit", "2 · An edit repairs a draft",
           "The first forward drafts the whole body with `==` written twice and a line too many; the second sees "
           "the whole draft and edits both: the second `==` becomes a space, the extra line the end of the text.",
           "def is_zero(paholbat):\n", "    return paholbat == 0\n", (RunSpec("S"),)),
    Lesson("modes", "3 · S vs Q on one prompt",
           "S drafts whatever passes τ_mask 0.3 and leaves a stray line after the body (` tutu`); Q waits for surer "
           "tokens (τ_mask 0.7), needs two forwards more, and ends the answer after `return lozeltu`.",
           "def dec(lozeltu):\n", "    lozeltu = lozeltu - 1\n    return lozeltu\n", (RunSpec("S"), RunSpec("Q"))),
    Lesson("mbe", "4 · MBE repairs an earlier block",
           "Q in blocks of 4, without and with MBE: block 1 is finished with ` pa`, so the name reads `paavo`; only "
           "with MBE does that finished block stay editable while the next ones decode, and an MBE edit writes ` p`: "
           "`pavo * pavo * pavo`.",
           "def cube(pavo):\n", "    return pavo * pavo * pavo\n",
           (RunSpec("Q", block_length=4), RunSpec("Q", mbe=True, block_length=4))),
    Lesson("baseline", "5 · M2T only: no editing",
           "The prompt of lesson 1 with the cautious M2T preset and editing off: the same answer in one forward "
           "more, and a token once written never changes.", *ZELMIVO, (RunSpec("M2T only"),)),
    Lesson("heal", "6 · Break it and watch it heal",
           "Lesson 1's answer, finished and verified; then a poke from outside overwrites one piece of the second "
           "name (`el` → `comp`). The block re-opens, the next forward reads `zcompmivo` between two `zelmivo`s, "
           "and a T2T edit writes `el` back.", *ZELMIVO, (RunSpec("S", pokes=(f"{AFTER_END}:9:comp",)),)),
    Lesson("indel", "7 · Insertion and deletion (LLaDA2.2)",
           "On the small LLaDA2.2 model, S drafts the second name as `f·bat·bat·bat`: one `bat` too many, the `e` "
           "missing. A DELETE removes a `bat` and the text closes up; then a SPLIT opens a mask before `bat`, "
           "and a later forward fills it with `e`.", "def square(febatbat):\n", "    return febatbat * febatbat\n",
           (RunSpec("S"),), model=MODEL22),
)


def run_trace(pipe, prompt: str, spec: RunSpec, gen_length: int) -> Trace:
    """One run of `spec` through the playground's own path (checked request and pokes, live run drained)."""
    req = check_request(pipe.presets, prompt, spec.mode, edit=spec.edit, mbe=spec.mbe,
                        mbe_window=spec.mbe_window, block_length=spec.block_length, gen_length=gen_length)
    return drain(start(pipe, req._replace(pokes=check_pokes(list(spec.pokes), pipe.poke_token))))


def without_timings(trace: Trace) -> dict:
    """The trace's JSON with engine seconds set to 0 (and so TPS 0): a recording replays steps, not time."""
    data = trace.to_dict()
    for record in data["records"]:
        record["seconds"] = 0.0
    return Trace.from_dict(data).to_dict()


def record_lesson(pipe, lesson: Lesson, model_dir: Path) -> dict:
    runs = [without_timings(run_trace(pipe, lesson.prompt, spec, lesson.gen_length)) for spec in lesson.runs]
    return {"idea": lesson.idea, "title": lesson.title, "caption": lesson.caption, "answer": lesson.answer,
            "model": pipe.name, "model_dir": shown_dir(model_dir), "runs": runs}


def shown_dir(model_dir: Path) -> str:
    """A model directory as a recording names it: relative to the repository when inside it."""
    path = Path(model_dir).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(model_dir)


class Models:
    """The models of the lessons, each loaded once, on first use."""

    def __init__(self, default: Path):
        self.default, self.loaded = Path(default), {}

    def dir_of(self, lesson: Lesson) -> Path:
        """The lesson's own model; lessons of the embedded model follow `--model`."""
        return self.default if Path(lesson.model) == DEFAULT_MODEL else Path(lesson.model)

    def get(self, model_dir: Path):
        from llada.pipeline import Pipeline

        key = Path(model_dir).resolve()
        if key not in self.loaded:
            self.loaded[key] = Pipeline.load(model_dir)
        return self.loaded[key]


def record_file(model: Path, out: Path, lessons: tuple[Lesson, ...] = LESSONS) -> dict:
    import torch

    torch.set_num_threads(1)  # one thread: the same sums in the same order, run after run
    models = Models(model)
    recorded = []
    for lesson in lessons:
        model_dir = models.dir_of(lesson)
        recorded.append(record_lesson(models.get(model_dir), lesson, model_dir))
    data = {"model": models.get(model).name, "lessons": recorded}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return data


def custom_lesson(prompt: str, runs: list[str], block_length: int | None, gen_length: int,
                  model: Path = DEFAULT_MODEL) -> Lesson:
    specs = tuple(RunSpec.parse(r, block_length) for r in runs)
    title = " vs ".join(runs) + f": {prompt[:40]}"
    return Lesson("custom", title, "", prompt, None, specs, gen_length, model)


def report(data: dict) -> list[str]:
    """One line per run with its numbers, and every lesson that does not show its idea."""
    lines, bad = [], []
    for lesson in data["lessons"]:
        recording = Recording.from_dict(lesson)
        for trace in recording.runs:
            s = trace.stats()
            lines.append(f"{recording.title} · {recording.run_name(trace)}: {s['forwards']} forwards, "
                         f"{s['tokens']} tokens, TPF {s['tpf']:.2f}, drafts {s['drafts']}, edits {s['edits']}, "
                         f"MBE edits {s['mbe_edits']}, inserts {trace.inserts}, deletes {trace.deletes}, "
                         f"pokes {len(trace.pokes)}, answer {recording.verdict(trace)}")
        bad += [f"{recording.title}: {p}" for p in problems(recording)]
    return lines + [f"NOT SHOWN: {p} (find new prompts with `{SEARCH}`)" for p in bad]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the Learn view's lessons (runs of a model, replayed "
                                                 "without it).")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (default assets/model)")
    parser.add_argument("--out", type=Path, default=RECORDING, help="output JSON (default assets/learn_trace.json)")
    parser.add_argument("--prompt", help="record one custom lesson of this prompt instead of the default lessons")
    parser.add_argument("--runs", nargs="+", default=["S", "Q"], help="with --prompt: modes, e.g. S Q 'M2T only' S+MBE")
    parser.add_argument("--block-length", type=int, help="with --prompt: block length (default: each mode's)")
    parser.add_argument("--gen-length", type=int, default=32, help="with --prompt: generation length")
    args = parser.parse_args(argv)
    lessons = LESSONS
    if args.prompt is not None:
        try:
            lessons = (custom_lesson(args.prompt, args.runs, args.block_length, args.gen_length, args.model),)
        except ValueError as err:
            parser.error(str(err))
    lines = report(record_file(args.model, args.out, lessons))
    print("\n".join(lines))
    print(f"wrote {args.out}")
    return 1 if any(line.startswith("NOT SHOWN") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
