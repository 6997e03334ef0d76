"""The Learn tab's lessons: recorded runs (assets/learn_trace.json) and what each must show.

A lesson (`Recording`) shows one idea of the decoder on one prompt with one run, or two runs side by
side at the same step (S vs Q; without and with MBE). `python -m ui.learn.record` writes the file:

    {"model": "...", "lessons": [{"idea": "edit", "title": "...", "caption": "...", "answer": "1308",
                                  "runs": [trace, ...]}, ...]}

where each trace follows docs/trace-schema.md. The view (ui/learn/view.py) replays them without a
model. `problems` says what a lesson fails to show of its idea (the recorder and the tests ask it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llada.data.tasks import is_right
from llada.trace import Trace

from .. import ASSETS
from ..render.narrate import visible

LEARN_TEXT = ASSETS / "learn.md"
RECORDING = ASSETS / "learn_trace.json"
MIN_PARALLEL = 3  # the draft lesson needs a forward that drafts at least this many answer tokens


@dataclass(frozen=True)
class Recording:
    """One lesson: its runs (one, or two shown side by side), what to look for, the expected answer."""

    title: str
    runs: tuple[Trace, ...]
    caption: str = ""
    idea: str = ""
    answer: str | None = None  # None: the prompt has no checkable answer

    @classmethod
    def from_dict(cls, d: dict) -> "Recording":
        return cls(title=d["title"], runs=tuple(Trace.from_dict(t) for t in d["runs"]), caption=d.get("caption", ""),
                   idea=d.get("idea", ""), answer=d.get("answer"))

    @property
    def steps(self) -> int:
        return max(t.steps for t in self.runs)

    @staticmethod
    def run_name(trace: Trace) -> str:
        mbe = " + MBE" if trace.settings.mbe else ""
        off = " (editing off)" if trace.settings.editing_threshold is None and trace.mode != "M2T only" else ""
        return f"{trace.mode or '?'}{mbe}{off}"

    def right(self, trace: Trace) -> bool | None:
        return None if self.answer is None else is_right(trace.text, self.answer)

    def verdict(self, trace: Trace) -> str:
        right = self.right(trace)
        shown = visible(trace.text or "")
        return f"{shown} (not checkable)" if right is None else f"{shown} ✓ right" if right else f"{shown} ✗ wrong"


def as_recording(label: str, value: Recording | Trace) -> Recording:
    """A lesson from either a Recording or a bare Trace (one run, titled by its label)."""
    return value if isinstance(value, Recording) else Recording(label, (value,))


def load_recordings(path: Path = RECORDING) -> dict[str, Recording]:
    """title -> Recording of every recorded lesson; empty when the file is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        lessons = [Recording.from_dict(d) for d in data["lessons"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {r.title: r for r in lessons}


def learn_text(path: Path = LEARN_TEXT) -> str:
    return Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""


# ---- what a lesson must show -----------------------------------------------------------------------------

def parallel_drafts(trace: Trace) -> int:
    """The most answer tokens (EOS and padding excluded) drafted by one forward."""
    end = trace.prompt_length + len(trace.output_ids)
    return max((sum(1 for c in trace.step_record(k).drafts if c.pos < end and c.token != trace.eos_id)
                for k in range(1, trace.steps + 1)), default=0)


def problems(rec: Recording) -> list[str]:
    """What the lesson fails to show of its idea (empty when it shows it)."""
    runs, out = rec.runs, []

    def need(ok: bool, what: str) -> None:
        if not ok:
            out.append(what)

    first = runs[0]
    if rec.idea in ("draft", "edit", "baseline") and rec.answer is not None:
        need(rec.right(first) is True, f"the answer is wrong: {first.text!r}")
    if rec.idea == "draft":
        need(parallel_drafts(first) >= MIN_PARALLEL, f"no forward drafts {MIN_PARALLEL} or more answer tokens")
    elif rec.idea == "edit":
        need(first.edits >= 1, "no T2T edit")
    elif rec.idea == "modes":
        s, q = runs
        need(s.forwards < q.forwards, f"S does not need fewer forwards than Q ({s.forwards} vs {q.forwards})")
        need(rec.right(s) is False and rec.right(q) is True, "no accuracy gap on this prompt (S wrong, Q right)")
    elif rec.idea == "mbe":
        off, on = runs
        need(on.settings.mbe and not off.settings.mbe, "the runs are not without and with MBE")
        need(on.mbe_edits >= 1, "MBE made no edit")
        need(rec.right(on) is True and rec.right(off) is False, "MBE did not turn a wrong answer right")
    elif rec.idea == "baseline":
        need(first.settings.editing_threshold is None and first.edits == 0, "editing is not off")
    return out
