"""The Learn tab: an explanation (assets/learn.md) beside recorded lessons (ui/learn/lessons.py).

The view replays a lesson without a model: play / pause (a `gr.Timer`), a step scrubber, *next edit*,
one line of narration per step (ui/render/narrate.py, computed from the trace) and each run's numbers
with its answer checked. Each lesson names the model that made it (the embedded one, or assets/model22 for
LLaDA2.2's moves) and its card. The browser keeps the lesson's replay (`replay_of`: each run's canvas replay and
the narration's lines per step) and draws a scrubbed step from it at once, as the Playground does
(ui/render/live.py); the server draws play, ticks and *next edit*, with the player every tab shares
(ui/player.py). `build_view(recordings)` creates the components inside the tab, `wire` their events.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from html import escape

import gradio as gr

from llada.trace import Trace

from .. import ASSETS, player
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
    card = f" (its card: <code>{escape(rec.model_dir)}/README.md</code>)" if rec.model_dir else ""
    return (f"{caption}<p class=\"recording-label\">Recording (not live) of model <code>{escape(rec.model)}</code>"
            f"{card} on the prompt <code>{escape(prompt)}</code>, made with this engine by <code>{RECORD}</code>."
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
                   f"MBE edits {s['mbe_edits']}" + _moves(t))
        answer = f"answer <code>{escape(rec.verdict(t))}</code>"
        rows.append(f"<li><b>{escape(rec.run_name(t))}</b>: {numbers} · {answer}</li>")
    return f'<div class="learn-stats"><ul>{"".join(rows)}</ul>{_comparison(rec)}</div>'


def _moves(t: Trace) -> str:
    """The run's inserts, deletes and pokes, where it has any (a 2.1 lesson without pokes shows none)."""
    counts = {"inserts": t.inserts, "deletes": t.deletes, "pokes": len(t.pokes)}
    return "".join(f" · {name} {n}" for name, n in counts.items() if n)


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

@dataclass
class LessonView:
    """The Learn tab's components and the lessons they replay (title -> Recording)."""

    lessons: dict[str, Recording]
    run: gr.Radio  # the lesson picked
    caption: gr.HTML
    canvas_a: gr.HTML  # the lesson's first run
    column_b: gr.Column  # the second run's column, hidden for a one-run lesson
    canvas_b: gr.HTML
    narration: gr.HTML
    play: gr.Button
    pause: gr.Button
    next_edit: gr.Button
    step: gr.Slider
    replay: gr.HTML  # the lesson's replay, kept by the browser's scrubber
    stats: gr.HTML
    timer: gr.Timer

    @property
    def shown(self) -> list:
        """What a step draws: both canvases and the narration (`frame`'s order)."""
        return [self.canvas_a, self.canvas_b, self.narration]


def build_view(recordings: dict) -> LessonView:
    """The Learn tab's components (call inside a gr.Tab); `recordings`: title -> Recording (or Trace)."""
    lessons = {label: as_recording(label, value) for label, value in recordings.items()}
    first = next(iter(lessons.values()), None)
    css = LEARN_CSS.read_text(encoding="utf-8") if LEARN_CSS.exists() else ""
    with gr.Row(elem_id="learn"):
        with gr.Column(scale=3, min_width=320):
            run = gr.Radio(list(lessons), value=first.title if first else None, label="Recorded lessons",
                           elem_id="learn-run")
            caption = gr.HTML(caption_html(first), elem_id="learn-caption", js_on_load=None, css_template=css)
            a, b = canvases(first, 0)
            with gr.Row():
                with gr.Column(min_width=300):
                    canvas_a = gr.HTML(a, elem_id="canvas-learn-box", js_on_load=canvas_script())
                with gr.Column(min_width=300, visible=bool(first and len(first.runs) > 1)) as column_b:
                    canvas_b = gr.HTML(b, elem_id="canvas-learn-b-box", js_on_load=canvas_script())
            narration = gr.HTML(narration_html(first, 0), elem_id="learn-narration", js_on_load=None,
                                css_template=css)
            with gr.Row():  # narrow buttons: one row on a phone too
                play = gr.Button("▶ play", elem_id="learn-play", size="sm", min_width=80, variant="primary")
                pause = gr.Button("❚❚ pause", elem_id="learn-pause", size="sm", min_width=80)
                next_edit = gr.Button("next edit ⇥", elem_id="learn-next-edit", size="sm", min_width=80)
            step = gr.Slider(0, max(first.steps, 1) if first else 1, value=0, step=1,
                             label="step (the canvases after this many decode steps)", elem_id="learn-step")
            replay = gr.HTML(replay_of(first), html_template="", elem_id="learn-replay", elem_classes=["patcher"],
                             js_on_load=canvas_script() + scrubber_script("learn-step", "learn"),
                             apply_default_css=False, container=False, padding=False)
            stats = gr.HTML(stats_html(first), elem_id="learn-stats", js_on_load=None, css_template=css)
            timer = gr.Timer(STEP_SECONDS, active=False)
        with gr.Column(scale=2, min_width=320):
            gr.Markdown(learn_text(), elem_id="learn-text")
    return LessonView(lessons, run, caption, canvas_a, column_b, canvas_b, narration, play, pause, next_edit, step,
                      replay, stats, timer)


def frame(rec: Recording | None, step: int) -> tuple[str, str, str]:
    """Canvas, second canvas and narration of a lesson after `step`, as new frames (the browser may have drawn
    another step since: ui/render/live.py `drawn`)."""
    a, b = canvases(rec, step)
    return drawn(a), drawn(b), drawn(narration_html(rec, step))


def on_screen(rec: Recording | None) -> player.Replay:
    """A lesson for the shared player (ui/player.py): its runs, drawn by `frame`."""
    return player.Replay(rec.runs if rec else (), lambda k: frame(rec, k), width=3)


# ---- the events: each takes the tab's lessons first (`_for` binds them) -----------------------------------

def lesson_of(lessons: dict[str, Recording], title) -> Recording | None:
    """The lesson titled `title` (None: none picked); InputError for a title that is none of them."""
    if title is None:
        return None
    return lessons[check_choice("lesson", title, list(lessons))]


@refusing
def pick(lessons: dict[str, Recording], title) -> tuple:
    """A lesson picked: its caption, second column, scrubber, numbers, step 0 and replay; it starts playing."""
    rec = lesson_of(lessons, title)
    steps = rec.steps if rec else 0
    return (caption_html(rec), gr.update(visible=bool(rec and len(rec.runs) > 1)),
            gr.update(maximum=max(steps, 1), value=0), stats_html(rec), *frame(rec, 0), replay_of(rec),
            gr.Timer(STEP_SECONDS, active=rec is not None))


@refusing
def scrub(lessons: dict[str, Recording], title, step) -> gr.Timer:
    """The browser has drawn the step from the lesson's replay; a lesson that plays stops."""
    lesson_of(lessons, title)
    check_step(step)
    return player.stopped()


@refusing
def play(lessons: dict[str, Recording], title, step) -> tuple:
    """*play*: (canvas, second canvas, narration, step, timer) from `step`, or from 0 at the end."""
    rec, step = lesson_of(lessons, title), check_step(step)
    return player.play(on_screen(rec), step, gr.Timer(STEP_SECONDS, active=True))


@refusing
def tick(lessons: dict[str, Recording], title, step) -> tuple:
    """The timer's tick: one step on; the timer stops at the lesson's last step."""
    rec, step = lesson_of(lessons, title), check_step(step)
    return player.tick(on_screen(rec), step)


@refusing
def next_edit(lessons: dict[str, Recording], title, step) -> tuple:
    """*next edit*: the first later step where either run edited something; a lesson that plays stops."""
    rec, step = lesson_of(lessons, title), check_step(step)
    return player.next_edit(on_screen(rec), step)


def _for(lessons: dict[str, Recording], handler):
    """`handler` with this page's lessons given first, under the handler's own name and module (Gradio, the
    page's client and the tests know an event by them). Gradio reads the event's signature, `(*args)`: the
    event's inputs, which `handler` takes after the lessons."""
    def event(*args):
        return handler(lessons, *args)
    event.__name__, event.__qualname__, event.__module__ = handler.__name__, handler.__qualname__, handler.__module__
    event.__doc__ = handler.__doc__
    return event


def wire(view: LessonView) -> None:
    """The Learn tab's events: pick a lesson (it plays from step 0), play / pause, scrub, next edit."""
    on, private = functools.partial(_for, view.lessons), {**PRIVATE, **REPLAY}
    playing = [*view.shown, view.step, view.timer]  # what play, a tick and next edit set
    picked = [view.caption, view.column_b, view.step, view.stats, *view.shown, view.replay, view.timer]
    # a pick and play start a replay once the stops before them (scrub, pause, next edit) are answered
    player.starts(view.run.change, on(pick), [view.run], picked, **private)
    view.run.input(None, js=SHOW_LESSON)  # a picked lesson plays where it can be seen (on a phone, below the list)
    player.stops(view.step.input, on(scrub), [view.run, view.step], view.timer, trigger_mode="always_last", **private)
    player.starts(view.play.click, on(play), [view.run, view.step], playing, **private)
    player.stops(view.pause.click, player.pause, None, view.timer, **private)
    player.ticks(view.timer, on(tick), [view.run, view.step], playing, **private)
    player.stops(view.next_edit.click, on(next_edit), [view.run, view.step], playing, **private)
