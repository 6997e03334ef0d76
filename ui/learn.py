"""The Learn view: an explanation (assets/learn.md) illustrated by recorded runs (assets/learn_trace.json).

The recording file is written by `python -m ui.record` and holds {"model": .., "runs": [trace, ...]}; each
run is a trace in the schema of docs/trace-schema.md, replayed here step by step without a model.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from llada.trace import Trace

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
