"""The Learn tab's lessons: recorded runs (assets/learn_trace.json) and what each must show.

A lesson (`Recording`) shows one idea of the decoder on one prompt with one run, or two runs side by
side at the same step (S vs Q; without and with MBE). `python -m ui.learn.record` writes the file:

    {"model": "...", "lessons": [{"idea": "edit", "title": "...", "caption": "...", "answer": "1308",
                                  "model": "llada2-lease-moe", "model_dir": "assets/model",
                                  "runs": [trace, ...]}, ...]}

where each trace follows docs/trace-schema.md. Each lesson names the model that made it: its name (as its
traces carry it) and its directory (a lesson on LLaDA2.2's moves is recorded on assets/model22, the others on
the embedded assets/model); the file's top-level `model` is the default model's name. The view
(ui/learn/view.py) replays them without a model and names each lesson's model and card. `problems` says
what a lesson fails to show of its idea (the recorder and the tests ask it).
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
    model_dir: str = ""  # the model's directory, relative to the repository ("": not known, e.g. a bare trace)

    @classmethod
    def from_dict(cls, d: dict) -> "Recording":
        runs = tuple(Trace.from_dict(t) for t in d["runs"])
        model = d.get("model", runs[0].model if runs else "")
        if any(t.model != model for t in runs):
            raise ValueError(f"lesson {d['title']!r} names model {model!r} but its runs were made by "
                             f"{sorted({t.model for t in runs})}")
        return cls(title=d["title"], runs=runs, caption=d.get("caption", ""), idea=d.get("idea", ""),
                   answer=d.get("answer"), model_dir=d.get("model_dir", ""))

    @property
    def model(self) -> str:
        """The name of the model that made the lesson's runs."""
        return self.runs[0].model if self.runs else ""

    @property
    def steps(self) -> int:
        return max(t.steps for t in self.runs)

    @staticmethod
    def run_name(trace: Trace) -> str:
        mbe = " + MBE" if trace.settings.mbe else ""
        off = " (editing off)" if trace.settings.editing_threshold is None and trace.mode != "M2T only" else ""
        poke = " + poke" if trace.pokes else ""
        return f"{trace.mode or '?'}{mbe}{off}{poke}"

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
    if rec.idea in ("draft", "edit", "baseline", "heal", "indel") and rec.answer is not None:
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
    elif rec.idea == "heal":
        out += heal_problems(first)
    elif rec.idea == "indel":
        need(first.inserts >= 1 and first.deletes >= 1, f"the run does not both insert and delete "
             f"({first.inserts} inserts, {first.deletes} deletes)")
    return out


def healed_at(trace: Trace) -> int | None:
    """The step whose edit restored the token the first poke overwrote (None: never restored)."""
    poke_step, poke = trace.pokes[0]
    for k in range(poke_step + 1, trace.steps + 1):
        r = trace.step_record(k)
        if any(c.pos == poke.pos and c.token == poke.old for c in r.edits + r.mbe_edits):
            return k
    return None


def heal_problems(trace: Trace) -> list[str]:
    """A heal lesson: one poke, into a finished answer (after the block's last forward), edited back by T2T."""
    if len(trace.pokes) != 1:
        return [f"the run has {len(trace.pokes)} pokes, not one"]
    step, poke = trace.pokes[0]
    before = trace.step_record(step)
    out = [] if before.phase == "verify" and not before.changes else [
        f"the poke follows step {step}, which did not leave its block verified and final"]
    if poke.old in (trace.mask_id, trace.eos_id) or poke.token == trace.mask_id:
        out.append("the poke does not replace an answer token with another token")
    if healed_at(trace) is None:
        out.append("no edit restores the poked token")
    return out
