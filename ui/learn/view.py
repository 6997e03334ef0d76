"""The Learn tab: an explanation (assets/learn.md) beside recorded lessons (ui/learn/lessons.py).

The view replays a lesson without a model: play / pause (a `gr.Timer`), a step scrubber, *next edit*,
one line of narration per step (ui/render/narrate.py, computed from the trace) and each run's numbers
with its answer checked. The browser keeps the lesson's replay (`replay_of`: each run's canvas replay and
the narration's lines per step) and draws a scrubbed step from it at once, as the Playground does
(ui/render/live.py); the server draws play, ticks and *next edit*. `build_view(recordings)` creates the
components inside the tab, `wire` their events.
"""

from __future__ import annotations

from html import escape
from types import SimpleNamespace

import gradio as gr

from llada.trace import Trace

from .. import ASSETS
from ..frame import PRIVATE, REPLAY, refusing
from ..render import canvas
from ..render.live import canvas_script, drawn, replay_value, scrub_value, scrubber_script
from ..render.narrate import narrate, visible
from ..settings import check_choice, check_step
from .lessons import Recording, as_recording, learn_text

LEARN_CSS = ASSETS / "learn.css"
CANVAS_IDS = ("canvas-learn", "canvas-learn-b")  # the first and the second run of a lesson
NARRATION = "#learn-narration .narration"  # what the browser's scrubber narrates (assets/scrub.js)
RECORD = "python -m ui.learn.record"  # the command that records the lessons
SHOW_LESSON = "() => document.querySelector('#canvas-learn-box')?.scrollIntoView({behavior: 'smooth', block: 'start'})"
STEP_SECONDS = 1.2  # replay speed: one step per this many seconds, slow enough to read the narration


# ---- renderers (pure) -------------------------------------------------------------------------------------

def canvases(rec: Recording | None, step: int) -> list[str]:
    """Both canvas slots after `step` (the second is empty for a one-run lesson)."""
    runs = rec.runs if rec else ()
    return [canvas.render(runs[i] if i < len(runs) else None, step, elem_id=elem_id)
            for i, elem_id in enumerate(CANVAS_IDS)]


def narration_html(rec: Recording | None, step: int) -> str:
    """The current step's line (one per run) and, folded, the whole story of the lesson."""
    if rec is None:
        return f'<div class="narration"><p class="now">No recording yet: run <code>{RECORD}</code>.</p></div>'
    pair = len(rec.runs) > 1
    now = now_html(rec, step)
    items = []
    for k in range(rec.steps + 1):
        lines = " ".join(f"{_who(rec, t, pair)}{escape(narrate(t, k))}" for t in rec.runs if k <= t.steps)
        here = ' class="here"' if k == step else ""
        items.append(f'<li value="{k}"{here}>{lines}</li>')
    return (f'<div class="narration" data-step="{step}">{now}<details><summary>every step of this lesson'
            f'</summary><ol start="0">{"".join(items)}</ol></details></div>')


def now_html(rec: Recording, step: int) -> str:
    """The narration's lines of `step`, one per run."""
    pair = len(rec.runs) > 1
    return "".join(f'<p class="now" data-run="{i}">{_who(rec, t, pair)}{escape(narrate(t, step))}</p>'
                   for i, t in enumerate(rec.runs))


def replay_of(rec: Recording | None) -> dict | None:
    """The lesson's replay for the browser's scrubber: each run's canvas replay and the narration's lines of
    every step (ui/render/live.py `scrub_value`)."""
    if rec is None:
        return None
    lines = {"target": NARRATION, "now": [now_html(rec, k) for k in range(rec.steps + 1)]}
    return scrub_value(*(replay_value(t, elem_id=e) for t, e in zip(rec.runs, CANVAS_IDS)), narration=lines)


def _who(rec: Recording, trace: Trace, pair: bool) -> str:
    return f"<b>{escape(rec.run_name(trace))}</b> · " if pair else ""


def caption_html(rec: Recording | None) -> str:
    if rec is None:
        return f'<p class="recording-label">No recording yet: run <code>{RECORD}</code> to make one.</p>'
    first = rec.runs[0]
    prompt = visible(first.prompt)
    caption = f'<p class="caption">{escape(rec.caption)}</p>' if rec.caption else ""
    return (f"{caption}<p class=\"recording-label\">Recording (not live) of model <code>{escape(first.model)}</code> "
            f"on the prompt <code>{escape(prompt)}</code>, made with this engine by <code>{RECORD}</code>."
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
                    v.canvas_a = gr.HTML(a, elem_id="canvas-learn-box", js_on_load=canvas_script())
                with gr.Column(min_width=300, visible=bool(first and len(first.runs) > 1)) as v.column_b:
                    v.canvas_b = gr.HTML(b, elem_id="canvas-learn-b-box", js_on_load=canvas_script())
            v.narration = gr.HTML(narration_html(first, 0), elem_id="learn-narration", js_on_load=None,
                                  css_template=css)
            with gr.Row():  # narrow buttons: one row on a phone too
                v.play = gr.Button("▶ play", elem_id="learn-play", size="sm", min_width=80, variant="primary")
                v.pause = gr.Button("❚❚ pause", elem_id="learn-pause", size="sm", min_width=80)
                v.next_edit = gr.Button("next edit ⇥", elem_id="learn-next-edit", size="sm", min_width=80)
            v.step = gr.Slider(0, max(first.steps, 1) if first else 1, value=0, step=1,
                               label="step (the canvases after this many decode steps)", elem_id="learn-step")
            v.replay = gr.HTML(replay_of(first), html_template="", elem_id="learn-replay", elem_classes=["patcher"],
                               js_on_load=canvas_script() + scrubber_script("learn-step", "learn"),
                               apply_default_css=False, container=False, padding=False)
            v.stats = gr.HTML(stats_html(first), elem_id="learn-stats", js_on_load=None, css_template=css)
            v.timer = gr.Timer(STEP_SECONDS, active=False)
        with gr.Column(scale=2, min_width=320):
            gr.Markdown(learn_text(), elem_id="learn-text")
    return v


def frame(rec: Recording | None, step: int) -> tuple[str, str, str]:
    """Canvas, second canvas and narration of a lesson after `step`, as new frames (the browser may have drawn
    another step since: ui/render/live.py `drawn`)."""
    a, b = canvases(rec, step)
    return drawn(a), drawn(b), drawn(narration_html(rec, step))


def _stopped() -> gr.Timer:
    return gr.Timer(active=False)


def wire(recordings: dict, v: SimpleNamespace) -> None:
    """The Learn tab's events: pick a lesson (it plays from step 0), play / pause, scrub, next edit."""
    lessons = v.lessons
    shown = [v.canvas_a, v.canvas_b, v.narration]

    def lesson(title) -> Recording | None:
        if title is None:
            return None
        return lessons[check_choice("lesson", title, list(lessons))]

    @refusing
    def pick(title):
        rec = lesson(title)
        steps = rec.steps if rec else 0
        return (caption_html(rec), gr.update(visible=bool(rec and len(rec.runs) > 1)),
                gr.update(maximum=max(steps, 1), value=0), stats_html(rec), *frame(rec, 0), replay_of(rec),
                gr.Timer(STEP_SECONDS, active=rec is not None))

    @refusing
    def scrub(title, step):
        """The browser has drawn the step from the lesson's replay; a lesson that plays stops."""
        lesson(title)
        check_step(step)
        return _stopped()

    @refusing
    def play(title, step):
        rec, step = lesson(title), check_step(step)
        if rec is None:
            return (*(gr.skip(),) * 4, _stopped())
        k = 0 if step >= rec.steps else step
        return (*frame(rec, k), k, gr.Timer(STEP_SECONDS, active=True))

    @refusing
    def tick(title, step):
        rec, step = lesson(title), check_step(step)
        if rec is None or step >= rec.steps:
            return (*(gr.skip(),) * 4, _stopped())
        k = step + 1
        return (*frame(rec, k), k, gr.skip() if k < rec.steps else _stopped())

    @refusing
    def next_edit(title, step):
        rec, step = lesson(title), check_step(step)
        found = [k for t in (rec.runs if rec else ()) if (k := canvas.next_edit_step(t, step)) is not None]
        if not found:
            return (*(gr.skip(),) * 4, _stopped())
        return (*frame(rec, min(found)), min(found), _stopped())

    private = {**PRIVATE, **REPLAY}
    v.run.change(pick, [v.run], [v.caption, v.column_b, v.step, v.stats, *shown, v.replay, v.timer], **private)
    v.run.input(None, js=SHOW_LESSON)  # a picked lesson plays where it can be seen (on a phone, below the list)
    v.step.input(scrub, [v.run, v.step], v.timer, trigger_mode="always_last", **private)
    v.play.click(play, [v.run, v.step], [*shown, v.step, v.timer], **private)
    v.pause.click(_stopped, None, v.timer, **private)
    v.timer.tick(tick, [v.run, v.step], [*shown, v.step, v.timer], **private)
    v.next_edit.click(next_edit, [v.run, v.step], [*shown, v.step, v.timer], **private)
