"""Event handlers of the playground: generators that run the engine and yield frames, and replays.

Handlers take plain values and return named frames (`RunFrame`, `CompareFrame`: one field per output
component; ui/layout.py wires the components by these names), with `gr.skip()` for what a frame leaves
unchanged. Live runs stream at most `CANVAS_FPS` canvas frames per second, each a patch of what changed
(a whole canvas and the charts once per `1 / CHART_FPS` seconds, and at the end); replays re-render a
stored Trace and never touch the model. Bad input is shown in `#error` and clears the old run (`*_ui`),
or is raised as `gr.Error` (`*_api`); an unexpected failure is reported the same way, never as a bare
error badge, and the server log keeps its traceback.
"""

from __future__ import annotations

import logging
import time
from html import escape
from typing import Any, NamedTuple

import gradio as gr

from llada.checkpoint import CheckpointError
from llada.trace import Trace

from . import canvas, charts, export, tables
from .live import LiveCanvas, patch_value
from .runs import LiveRun, Throttle, check_request, start

CANVAS_FPS, CHART_FPS = 15.0, 1.0
STOP_WAIT_S = 3.0  # how long Stop waits for the cancelled run to close its engine
# InputError is a ValueError; engine checks raise ValueError; NonFiniteLogits is a FloatingPointError
REFUSED = (ValueError, CheckpointError, FloatingPointError)
log = logging.getLogger("ui.handlers")


class RunFrame(NamedTuple):
    """One update of the playground's run view."""

    error: Any
    canvas: Any
    step: Any
    stats: Any
    chart_tps: Any
    chart_tpf: Any
    chart_steps: Any
    edit_log: Any
    text: Any
    note: Any
    heatmap: Any
    patch: Any
    trace: Any


def frame(kind, **values):
    """A frame of `kind` with `values`, every other output left as it is."""
    return kind(**({name: gr.skip() for name in kind._fields} | values))


def error_html(err: Exception | str | None) -> str:
    if not err:
        return ""
    return f'<div class="error-box" role="alert"><b>Refused:</b> {escape(str(err))}</div>'


def failure_text(err: BaseException) -> str:
    """What a user reads when the server failed: the error in one line, the traceback stays in the log."""
    log.error("run failed", exc_info=err)
    return (f"the server could not finish this run ({type(err).__name__}: {err}). The run was stopped and the "
            "error logged; try again, or with other settings.")


def failure_html(err: BaseException) -> str:
    return f'<div class="error-box" role="alert"><b>Error:</b> {escape(failure_text(err))}</div>'


def cleared(error: str) -> RunFrame:
    """A refused or failed request: the message, and the old run cleared from view (and from the session)."""
    return frame(RunFrame, error=error, canvas=canvas.render(None, 0), step=gr.update(maximum=1, value=0),
                 stats=tables.stats_line(None), chart_tps=None, chart_tpf=None, chart_steps=None, heatmap=None,
                 edit_log=tables.edit_log(None), text="", note="", trace=None)


def charts_of(runs: list[tuple[str, Trace]]) -> dict:
    tps, tpf, steps = charts.all_figures(runs)
    return {"chart_tps": tps, "chart_tpf": tpf, "chart_steps": steps}


# ---- the playground run -------------------------------------------------------------------------------

def _live_frame(run: LiveRun, live: LiveCanvas, figures: bool) -> RunFrame:
    """A frame while the run goes on: a canvas patch (or keyframe with the charts), the stats line."""
    trace = run.trace
    trace.name_tokens(run.pipe.token_texts, run.pipe.token_bytes)
    update = live.update(trace, keyframe=figures)
    values = {"error": "", "stats": tables.stats_line(trace, live=True), "trace": trace,
              "patch": patch_value(update.patch) if update.patch else gr.skip()}
    if update.html is not None:
        values |= {"canvas": update.html, "step": gr.update(maximum=max(trace.steps, 1), value=trace.steps)}
    if figures:
        values |= charts_of([(trace.mode, trace)]) | {"text": partial_text(run)}
    return frame(RunFrame, **values)


def final_frame(trace: Trace, ghost: bool, error: str = "") -> RunFrame:
    """The whole view of a finished (or stopped) run: canvas, scrubber, stats, charts, edit log, text."""
    return frame(RunFrame, error=error, canvas=canvas.render(trace, trace.steps, ghost),
                 step=gr.update(maximum=max(trace.steps, 1), value=trace.steps), stats=tables.stats_line(trace),
                 edit_log=tables.edit_log(trace), text=trace.text or "", note=tables.output_note(trace), trace=trace,
                 heatmap=charts.confidence_figure(trace), **charts_of([(trace.mode, trace)]))


def generate_ui(models, model_path, prompt, mode, tau_mask, edit_on, tau_edit, mbe, mbe_window, block_length,
                gen_length, max_post_steps, temperature, seed, ghost):
    """Run one decode and stream frames of it; the last frame carries the edit log and the final text."""
    custom = mode == "Custom"  # a named mode sets the thresholds; the sliders only show them
    try:
        req = check_request(prompt, mode, tau_mask if custom else None, tau_edit if custom else None,
                            bool(edit_on) or not custom, mbe, mbe_window, block_length, gen_length,
                            max_post_steps, temperature, seed)
        run = start(models.get(model_path), req)
    except REFUSED as err:
        yield cleared(error_html(err))
        return
    except Exception as err:  # noqa: BLE001 - reported to the user, traceback logged
        yield cleared(failure_html(err))
        return
    yield from _stream(run, bool(ghost))


def _stream(run: LiveRun, ghost: bool):
    live, frames = LiveCanvas("canvas", ghost), Throttle(1 / CANVAS_FPS)
    chart_due = Throttle(1 / CHART_FPS, wait_first=True)  # charts of one point say nothing
    error = ""
    try:
        yield _live_frame(run, live, figures=False)  # the prompt and its masks, before the first forward
        for record in run.records:
            if record.kind == "decode" and frames.due():
                yield _live_frame(run, live, figures=chart_due.due())
        run.close("done")
    except REFUSED as err:
        error = error_html(err)
        run.close("stopped", str(err))
    except Exception as err:  # noqa: BLE001 - reported to the user, traceback logged
        error = failure_html(err)
        run.close("stopped", failure_text(err))
    finally:
        run.close()  # a closed tab or Stop closes this generator, and with it the engine's
    yield final_frame(run.trace, ghost, error)


def stopped_ui(trace: Trace | None, ghost) -> RunFrame:
    """After Stop: wait for the cancelled run to close, then show it whole, as stopped at its last forward."""
    if trace is None:
        return frame(RunFrame)
    deadline = time.monotonic() + STOP_WAIT_S
    while trace.status == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    if trace.status == "running":  # the engine did not hand control back in time: say so, keep the trace
        trace.finish("stopped", "stopped by the user")
    return final_frame(trace, bool(ghost))


def partial_text(run: LiveRun) -> str:
    return run.pipe.decode_text(run.trace.output_ids)


# ---- replay ---------------------------------------------------------------------------------------------

def show_step(trace: Trace | None, step, ghost) -> str:
    return canvas.render(trace, int(step or 0), bool(ghost))


def scrub(trace: Trace | None, step, ghost) -> tuple:
    """The canvas at the scrubbed step; a replay in progress (a slow replay too) stops: the user took over."""
    return show_step(trace, step, ghost), gr.Timer(active=False)


TEACH_SECONDS = 12.0  # a slow replay after a run lasts about this long ...
TEACH_STEP_S = (0.15, 0.7)  # ... with each step shown between these bounds


def play(speed) -> gr.Timer:
    return gr.Timer(value=0.3 / float(speed or 1), active=True)


def teach(trace: Trace | None, slow, ghost) -> tuple:
    """After a run: replay it from step 0 at a teaching pace (when asked), so drafts and edits can be seen."""
    if trace is None or not slow or trace.steps < 2:
        return gr.skip(), gr.skip(), gr.skip()
    pace = min(max(TEACH_SECONDS / trace.steps, TEACH_STEP_S[0]), TEACH_STEP_S[1])
    return canvas.render(trace, 0, bool(ghost)), 0, gr.Timer(value=pace, active=True)


def pause() -> gr.Timer:
    return gr.Timer(active=False)


def start_play(trace: Trace | None, step, ghost, speed) -> tuple:
    """Start the replay timer (from step 0 when the scrubber sits at the end)."""
    if trace is None:
        return gr.skip(), gr.skip(), gr.skip()
    k = 0 if int(step or 0) >= trace.steps else int(step or 0)
    return canvas.render(trace, k, bool(ghost)), k, play(speed)


def tick(trace: Trace | None, step, ghost) -> tuple:
    """One replay step forward; the timer stops at the last step."""
    if trace is None or int(step or 0) >= trace.steps:
        return gr.skip(), gr.skip(), gr.Timer(active=False)
    k = int(step or 0) + 1
    return canvas.render(trace, k, bool(ghost)), k, gr.skip() if k < trace.steps else gr.Timer(active=False)


def next_edit(trace: Trace | None, step, ghost, elem_id: str = "canvas") -> tuple:
    """Jump to the next step that edited something (T2T or MBE); stay when there is none."""
    if trace is None:
        return gr.skip(), gr.skip()
    for k in range(int(step or 0) + 1, trace.steps + 1):
        record = trace.step_record(k)
        if record.edits or record.mbe_edits:
            return canvas.render(trace, k, bool(ghost), elem_id=elem_id), k
    return gr.skip(), gr.skip()


def jump_to_edit(trace: Trace | None, step, ghost) -> tuple:
    """Next edit, stopping a replay in progress: (canvas, step, timer)."""
    return (*next_edit(trace, step, ghost), gr.Timer(active=False))


EXPORTS = export.ExportDir()


def export_files(trace: Trace | None) -> list[str] | None:
    if trace is None:
        raise gr.Error("nothing to export yet: run a prompt first", print_exception=False)
    return [str(p) for p in export.write_exports(trace, EXPORTS.new())]
