"""Replaying the run on screen: the step scrubber, play / pause, a slow replay after a run, next edit, export.

Replays re-render the session's stored Trace (a `gr.State`) and never touch the model. Play, its ticks and
next edit are the player every tab shares (ui/player.py), handed this tab's canvas (`replay_of`).
"""

from __future__ import annotations

import gradio as gr

from llada.trace import Trace

from .. import export, player
from ..frame import refusing
from ..render import canvas
from ..render.live import drawn, replay_value, scrub_value
from ..settings import check_choice, check_flag, check_step

SPEEDS = ["0.5", "1", "2", "4"]  # the replay speeds offered (times the normal pace)


def render(trace: Trace | None, step: int, ghost: bool) -> str:
    """The canvas after `step`, as a new frame (the browser may have drawn another step since: live.drawn)."""
    return drawn(canvas.render(trace, step, ghost))


@refusing
def show_step(trace: Trace | None, step, ghost) -> tuple:
    """The canvas at `step` and the run's replay for the browser (ghost on or off draws other cells)."""
    ghost = check_flag("ghost", ghost)
    return render(trace, check_step(step), ghost), scrub_value(replay_value(trace, ghost))


@refusing
def scrub(trace: Trace | None, step, ghost) -> tuple:
    """A replay in progress (a slow replay too) stops: the user took over. The browser draws the scrubbed step
    of a finished run from its replay (ui/render/live.py) at once; the server draws only a live run's."""
    step, ghost = check_step(step), check_flag("ghost", ghost)
    finished = trace is not None and trace.status != "running"
    return (gr.skip() if finished else render(trace, step, ghost)), player.stopped()


TEACH_SECONDS = 12.0  # a slow replay after a run lasts about this long ...
TEACH_STEP_S = (0.15, 0.7)  # ... with each step shown between these bounds


def play(speed) -> gr.Timer:
    return gr.Timer(value=0.3 / float(check_choice("speed", speed, SPEEDS)), active=True)


@refusing
def teach(trace: Trace | None, slow, ghost) -> tuple:
    """After a run: replay it from step 0 at a teaching pace (when asked), so drafts and edits can be seen."""
    slow, ghost = check_flag("replay slowly", slow), check_flag("ghost", ghost)
    if trace is None or not slow or trace.steps < 2 or trace.status != "done":  # a stopped run stays where it stopped
        return gr.skip(), gr.skip(), gr.skip()
    pace = min(max(TEACH_SECONDS / trace.steps, TEACH_STEP_S[0]), TEACH_STEP_S[1])
    return render(trace, 0, bool(ghost)), 0, gr.Timer(value=pace, active=True)


def replay_of(trace: Trace | None, ghost: bool) -> player.Replay:
    """The run on the canvas, for the shared player (ui/player.py): one component, the canvas."""
    return player.Replay((trace,) if trace is not None else (), lambda k: (render(trace, k, ghost),), width=1)


@refusing
def start_play(trace: Trace | None, step, ghost, speed) -> tuple:
    """Start the replay timer (from step 0 when the scrubber sits at the end): (canvas, step, timer)."""
    step, ghost, timer = check_step(step), check_flag("ghost", ghost), play(speed)
    return player.play(replay_of(trace, ghost), step, timer)


@refusing
def tick(trace: Trace | None, step, ghost) -> tuple:
    """One replay step forward; the timer stops at the last step: (canvas, step, timer)."""
    step, ghost = check_step(step), check_flag("ghost", ghost)
    if trace is not None and trace.status == "running":  # a new run took over the canvas
        trace = None
    return player.tick(replay_of(trace, ghost), step)


@refusing
def jump_to_edit(trace: Trace | None, step, ghost) -> tuple:
    """Next edit (T2T or MBE), stopping a replay in progress: (canvas, step, timer)."""
    return player.next_edit(replay_of(trace, check_flag("ghost", ghost)), check_step(step))


EXPORTS = export.ExportDir()


def export_files(trace: Trace | None) -> list[str] | None:
    if trace is None:
        raise gr.Error("nothing to export yet: run a prompt first", print_exception=False)
    return [str(p) for p in export.write_exports(trace, EXPORTS.new())]
