"""The Learn view: an explanation (assets/learn.md) beside recorded lessons (assets/learn_trace.json).

A lesson (`Recording`) shows one idea of the decoder on one prompt with one run, or two runs side by
side at the same step (S vs Q; without and with MBE). `python -m ui.record` writes the file:

    {"model": "...", "lessons": [{"idea": "edit", "title": "...", "caption": "...", "answer": "1308",
                                  "runs": [trace, ...]}, ...]}

where each trace follows docs/trace-schema.md. The view replays them without a model: play / pause
(a `gr.Timer`), a step scrubber, *next edit*, one line of narration per step (ui/narrate.py, computed
from the trace) and each run's numbers with its answer checked. `problems` says what a lesson fails to
show of its idea (the recorder and the tests ask it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from llada.trace import Trace

from . import canvas
from .events import REPLAY
from .handlers import next_edit as next_edit_of
from .narrate import narrate, visible

ASSETS = Path(__file__).resolve().parents[1] / "assets"
LEARN_TEXT = ASSETS / "learn.md"
LEARN_CSS = ASSETS / "learn.css"
RECORDING = ASSETS / "learn_trace.json"
CANVAS_IDS = ("canvas-learn", "canvas-learn-b")  # the first and the second run of a lesson
STEP_SECONDS = 1.2  # replay speed: one step per this many seconds, slow enough to read the narration
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
        return None if self.answer is None else trace.text == self.answer

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


# ---- renderers (pure) -------------------------------------------------------------------------------------

def canvases(rec: Recording | None, step: int) -> list[str]:
    """Both canvas slots after `step` (the second is empty for a one-run lesson)."""
    runs = rec.runs if rec else ()
    return [canvas.render(runs[i] if i < len(runs) else None, step, elem_id=elem_id)
            for i, elem_id in enumerate(CANVAS_IDS)]


def narration_html(rec: Recording | None, step: int) -> str:
    """The current step's line (one per run) and, folded, the whole story of the lesson."""
    if rec is None:
        return '<div class="narration"><p class="now">No recording yet: run <code>python -m ui.record</code>.</p></div>'
    pair = len(rec.runs) > 1
    now = "".join(f'<p class="now" data-run="{i}">{_who(rec, t, pair)}{escape(narrate(t, step))}</p>'
                  for i, t in enumerate(rec.runs))
    items = []
    for k in range(rec.steps + 1):
        lines = " ".join(f"{_who(rec, t, pair)}{escape(narrate(t, k))}" for t in rec.runs if k <= t.steps)
        here = ' class="here"' if k == step else ""
        items.append(f'<li value="{k}"{here}>{lines}</li>')
    return (f'<div class="narration" data-step="{step}">{now}<details><summary>every step of this lesson'
            f'</summary><ol start="0">{"".join(items)}</ol></details></div>')


def _who(rec: Recording, trace: Trace, pair: bool) -> str:
    return f"<b>{escape(rec.run_name(trace))}</b> · " if pair else ""


def caption_html(rec: Recording | None) -> str:
    if rec is None:
        return ('<p class="recording-label">No recording yet: run <code>python -m ui.record</code> to make one.</p>')
    first = rec.runs[0]
    prompt = visible(first.prompt)
    caption = f'<p class="caption">{escape(rec.caption)}</p>' if rec.caption else ""
    return (f"{caption}<p class=\"recording-label\">Recording (not live) of model <code>{escape(first.model)}</code> "
            f"on the prompt <code>{escape(prompt)}</code>, made with this engine by <code>python -m ui.record</code>."
            "</p>")


def stats_html(rec: Recording | None) -> str:
    """Each run's numbers and answer; for two runs, how they compare."""
    if rec is None:
        return ""
    rows = []
    for t in rec.runs:
        s = t.stats()
        numbers = (f"{s['forwards']} forwards ({s['decode_forwards']} decode + {s['cache_forwards']} cache) · "
                   f"{s['tokens']} tokens · TPF {s['tpf']:.2f} · drafts {s['drafts']} · edits {s['edits']} · "
                   f"MBE edits {s['mbe_edits']}")
        answer = f"answer <code>{escape(rec.verdict(t))}</code>"
        rows.append(f"<li><b>{escape(rec.run_name(t))}</b>: {numbers} · {answer}</li>")
    return f'<div class="learn-stats"><ul>{"".join(rows)}</ul>{_comparison(rec)}</div>'


def _comparison(rec: Recording) -> str:
    if len(rec.runs) != 2:
        return ""
    a, b = rec.runs
    name_a, name_b = rec.run_name(a), rec.run_name(b)
    if a.forwards == b.forwards:
        speed = f"{name_a} and {name_b} need the same {a.forwards} forwards"
    else:
        fast, slow = (a, b) if a.forwards < b.forwards else (b, a)
        speed = (f"{rec.run_name(fast)} needs {slow.forwards / fast.forwards:.1f}× fewer forwards "
                 f"({fast.forwards} vs {slow.forwards}; TPF {fast.tpf:.2f} vs {slow.tpf:.2f})")
    right = {name_a: rec.right(a), name_b: rec.right(b)}
    answers = ("" if None in right.values() else
               "; " + ", ".join(f"{n} is {'right' if ok else 'wrong'}" for n, ok in right.items()))
    return f'<p class="verdict">{escape(speed + answers)}.</p>'


# ---- the view ---------------------------------------------------------------------------------------------

def build_view(recordings: dict) -> SimpleNamespace:
    """The Learn tab's components (call inside a gr.Tab); `recordings`: title -> Recording (or Trace)."""
    lessons = {label: as_recording(label, value) for label, value in recordings.items()}
    first = next(iter(lessons.values()), None)
    css = LEARN_CSS.read_text(encoding="utf-8") if LEARN_CSS.exists() else ""
    v = SimpleNamespace(lessons=lessons)
    with gr.Row(elem_id="learn"):
        with gr.Column(scale=3, min_width=320):
            v.run = gr.Radio(list(lessons), value=first.title if first else None, label="Recorded lessons",
                             elem_id="learn-run")
            v.caption = gr.HTML(caption_html(first), elem_id="learn-caption", js_on_load=None, css_template=css)
            a, b = canvases(first, 0)
            with gr.Row():
                with gr.Column(min_width=300):
                    v.canvas_a = gr.HTML(a, elem_id="canvas-learn-box", js_on_load=None)
                with gr.Column(min_width=300, visible=bool(first and len(first.runs) > 1)) as v.column_b:
                    v.canvas_b = gr.HTML(b, elem_id="canvas-learn-b-box", js_on_load=None)
            v.narration = gr.HTML(narration_html(first, 0), elem_id="learn-narration", js_on_load=None,
                                  css_template=css)
            with gr.Row():  # narrow buttons: one row on a phone too
                v.play = gr.Button("▶ play", elem_id="learn-play", size="sm", min_width=80, variant="primary")
                v.pause = gr.Button("❚❚ pause", elem_id="learn-pause", size="sm", min_width=80)
                v.next_edit = gr.Button("next edit ⇥", elem_id="learn-next-edit", size="sm", min_width=80)
            v.step = gr.Slider(0, max(first.steps, 1) if first else 1, value=0, step=1,
                               label="step (the canvases after this many decode steps)", elem_id="learn-step")
            v.stats = gr.HTML(stats_html(first), elem_id="learn-stats", js_on_load=None, css_template=css)
            v.timer = gr.Timer(STEP_SECONDS, active=False)
        with gr.Column(scale=2, min_width=320):
            gr.Markdown(learn_text(), elem_id="learn-text")
    return v


def frame(rec: Recording | None, step: int) -> tuple[str, str, str]:
    """Canvas, second canvas and narration of a lesson after `step`."""
    a, b = canvases(rec, step)
    return a, b, narration_html(rec, step)


def _stopped() -> gr.Timer:
    return gr.Timer(active=False)


def wire(recordings: dict, v: SimpleNamespace) -> None:
    """The Learn tab's events: pick a lesson (it plays from step 0), play / pause, scrub, next edit."""
    lessons = v.lessons
    shown = [v.canvas_a, v.canvas_b, v.narration]

    def pick(title):
        rec = lessons.get(title)
        steps = rec.steps if rec else 0
        return (caption_html(rec), gr.update(visible=bool(rec and len(rec.runs) > 1)),
                gr.update(maximum=max(steps, 1), value=0), stats_html(rec), *frame(rec, 0),
                gr.Timer(STEP_SECONDS, active=rec is not None))

    def scrub(title, step):
        return (*frame(lessons.get(title), int(step or 0)), _stopped())

    def play(title, step):
        rec = lessons.get(title)
        if rec is None:
            return (*(gr.skip(),) * 4, _stopped())
        k = 0 if int(step or 0) >= rec.steps else int(step or 0)
        return (*frame(rec, k), k, gr.Timer(STEP_SECONDS, active=True))

    def tick(title, step):
        rec = lessons.get(title)
        if rec is None or int(step or 0) >= rec.steps:
            return (*(gr.skip(),) * 4, _stopped())
        k = int(step or 0) + 1
        return (*frame(rec, k), k, gr.skip() if k < rec.steps else _stopped())

    def next_edit(title, step):
        rec = lessons.get(title)
        found = [k for t in (rec.runs if rec else ()) if isinstance(k := next_edit_of(t, step, False)[1], int)]
        if not found:
            return (*(gr.skip(),) * 4, _stopped())
        return (*frame(rec, min(found)), min(found), _stopped())

    private = {"api_visibility": "private", **REPLAY}
    v.run.change(pick, [v.run], [v.caption, v.column_b, v.step, v.stats, *shown, v.timer], **private)
    v.step.input(scrub, [v.run, v.step], [*shown, v.timer], trigger_mode="always_last", **private)
    v.play.click(play, [v.run, v.step], [*shown, v.step, v.timer], **private)
    v.pause.click(_stopped, None, v.timer, **private)
    v.timer.tick(tick, [v.run, v.step], [*shown, v.step, v.timer], **private)
    v.next_edit.click(next_edit, [v.run, v.step], [*shown, v.step, v.timer], **private)
