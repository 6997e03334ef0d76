"""The Learn view: an explanation (assets/learn.md) illustrated by recorded runs (assets/learn_trace.json).

The recording file is written by `python -m ui.record` and holds {"model": .., "runs": [trace, ...]}; each
run is a trace in the schema of docs/trace-schema.md, replayed here step by step without a model.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from llada.trace import Trace

from . import canvas, tables
from .events import REPLAY
from .handlers import next_edit as next_edit_of

ASSETS = Path(__file__).resolve().parents[1] / "assets"
LEARN_TEXT = ASSETS / "learn.md"
RECORDING = ASSETS / "learn_trace.json"


def run_label(trace: Trace) -> str:
    mbe = " + MBE" if trace.settings.mbe else ""
    return f"{trace.mode or '?'}{mbe}: {trace.prompt[:40]}"


def load_recordings(path: Path = RECORDING) -> dict[str, Trace]:
    """label -> Trace of every recorded run; empty when the file is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        traces = [Trace.from_dict(run) for run in data["runs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {run_label(t): t for t in traces}


def learn_text(path: Path = LEARN_TEXT) -> str:
    return Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""


def recording_note(trace: Trace | None) -> str:
    """The label that says the replay is a recording, of which model and settings."""
    if trace is None:
        return ('<p class="recording-label">No recording yet: run <code>python -m ui.record</code> to make '
                "one.</p>")
    s = trace.settings
    tau_edit = "off" if s.editing_threshold is None else f"{s.editing_threshold:.2f}"
    return (f'<p class="recording-label">Recording (not live) of model <code>{escape(trace.model)}</code>, '
            f"mode {escape(trace.mode)} (τ_mask {s.threshold:.2f}, τ_edit {tau_edit}, "
            f"MBE {'on' if s.mbe else 'off'}), made with this engine by <code>python -m ui.record</code>."
            "</p>")


def build_view(recordings: dict[str, Trace]) -> SimpleNamespace:
    """The Learn tab's components (call inside a gr.Tab)."""
    v = SimpleNamespace()
    first = next(iter(recordings.values()), None)
    gr.Markdown(learn_text())
    v.note = gr.HTML(recording_note(first), js_on_load=None)
    v.run = gr.Radio(list(recordings), value=next(iter(recordings), None), label="Recorded run", elem_id="learn-run")
    v.step = gr.Slider(0, max(first.steps, 1) if first else 1, value=first.steps if first else 0, step=1,
                       label="step", elem_id="learn-step")
    v.next_edit = gr.Button("next edit ⇥", size="sm")
    v.canvas = gr.HTML(canvas.render(first, first.steps if first else 0, elem_id="canvas-learn"), js_on_load=None)
    v.stats = gr.Markdown(tables.stats_line(first) if first else "")
    return v


def wire(recordings: dict[str, Trace], v: SimpleNamespace) -> None:
    """The Learn tab's events: pick a recording, scrub it, jump to its next edit (no model is used)."""
    def show(label, step):
        return canvas.render(recordings.get(label), int(step or 0), elem_id="canvas-learn")

    def pick(label):
        t = recordings.get(label)
        return (recording_note(t), gr.update(maximum=max(t.steps, 1) if t else 1, value=t.steps if t else 0),
                show(label, t.steps if t else 0), tables.stats_line(t) if t else "")

    def next_edit(label, step):
        return next_edit_of(recordings.get(label), step, False, elem_id="canvas-learn")

    v.step.input(show, [v.run, v.step], v.canvas, trigger_mode="always_last", api_visibility="private", **REPLAY)
    v.run.change(pick, [v.run], [v.note, v.step, v.canvas, v.stats], api_visibility="private", **REPLAY)
    v.next_edit.click(next_edit, [v.run, v.step], [v.canvas, v.step], api_visibility="private", **REPLAY)
