"""A playground run: the widgets' settings checked, the engine run within its budget, frames streamed.

`generate_ui(models, prompt=..., mode=..., ...)` takes the run's inputs by name (ui/playground/wire.py
wires them so) and yields `RunFrame`s: one field per output component, `gr.skip()` for what a frame
leaves unchanged. Live runs stream at most `CANVAS_FPS` canvas frames per second, each a patch of what
changed (a whole canvas and the charts once per `1 / CHART_FPS` seconds, and at the end). Bad input is
shown in `#error` and clears the old run; an unexpected failure is reported the same way
(`ui.frame.problem`), never as a bare error badge, and the server log keeps its traceback.

The widgets mean (`widget_settings`): a named mode sets the thresholds, its sliders only show them;
Custom is the model's S mode with the sliders' thresholds, and editing off when its box is unticked.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import gradio as gr

from llada.trace import Trace

from ..frame import Throttle, frame, problem, refusing
from ..knows import knows, scope_hint
from ..render import canvas, charts, tables
from ..render.live import LiveCanvas, patch_value, replay_value, scrub_value
from ..pace import pace_of, pace_sentence, working_line
from ..runs import LiveRun, start
from ..settings import Request, RunSettings, check_flag, check_prompt, check_settings, presets_of

CANVAS_FPS, CHART_FPS = 15.0, 1.0
STOP_WAIT_S = 3.0  # how long Stop waits for the cancelled run to close its engine
WORKING_TICK_S = 1.0  # while a slow forward runs, the progress line is redrawn this often


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
    replay: Any
    trace: Any


def cleared(error: str) -> RunFrame:
    """A refused or failed request: the message, and the old run cleared from view (and from the session)."""
    return frame(RunFrame, error=error, canvas=canvas.render(None, 0), step=gr.update(maximum=1, value=0),
                 stats=tables.stats_line(None), chart_tps=None, chart_tpf=None, chart_steps=None, heatmap=None,
                 edit_log=tables.edit_log(None), text="", note="", replay=None, trace=None)


def charts_of(runs: list[tuple[str, Trace]]) -> dict:
    tps, tpf, steps = charts.all_figures(runs)
    return {"chart_tps": tps, "chart_tpf": tpf, "chart_steps": steps}


def widget_settings(presets: dict[str, dict], mode="S", tau_mask=None, edit=True, tau_edit=None,
                    **rest) -> RunSettings:
    """The settings the playground's widgets mean (see the module docstring); InputError if one is bad."""
    custom = mode == "Custom"  # a named mode sets the thresholds; the sliders only show them
    edit = check_flag("editing (T2T) on", edit)
    return check_settings(presets, mode, tau_mask=tau_mask if custom else None,
                          tau_edit=tau_edit if custom else None, edit=edit or not custom, **rest)


# ---- the playground run -------------------------------------------------------------------------------

def _live_frame(run: LiveRun, live: LiveCanvas, figures: bool) -> RunFrame:
    """A frame while the run goes on: a canvas patch (or keyframe with the charts), the stats line; the first
    one drops the last run's replay from the browser (the server draws the scrubbed steps of a live run)."""
    trace = run.trace
    trace.name_tokens(run.pipe.token_texts, run.pipe.token_bytes)
    update = live.update(trace, keyframe=figures)
    values = {"error": "", "stats": tables.stats_line(trace, live=True, engine=engine_line(run)), "trace": trace,
              "patch": patch_value(update.patch) if update.patch else gr.skip()}
    if trace.steps == 0:
        values["replay"] = None
    if update.html is not None:
        values |= {"canvas": update.html, "step": gr.update(maximum=max(trace.steps, 1), value=trace.steps)}
    if figures:
        values |= charts_of([(trace.mode, trace)]) | {"text": partial_text(run)}
    return frame(RunFrame, **values)


def final_frame(trace: Trace, ghost: bool, error: str = "", hint: str = "", engine: str = "") -> RunFrame:
    """The whole view of a finished (or stopped) run: canvas, scrubber, stats, charts, edit log, text, and its
    replay for the browser's scrubber."""
    return frame(RunFrame, error=error, canvas=canvas.render(trace, trace.steps, ghost),
                 replay=scrub_value(replay_value(trace, ghost)),
                 step=gr.update(maximum=max(trace.steps, 1), value=trace.steps),
                 stats=tables.stats_line(trace, engine=engine),
                 edit_log=tables.edit_log(trace), text=trace.text or "", note=tables.output_note(trace, hint),
                 trace=trace,
                 heatmap=charts.confidence_figure(trace), **charts_of([(trace.mode, trace)]))


def generate_ui(models, prompt=None, model=None, ghost=False, **widgets):
    """Run one decode and stream frames of it; the last frame carries the edit log and the final text.

    `widgets`: mode, tau_mask, edit, tau_edit, mbe, mbe_window, block_length, gen_length, max_post_steps,
    temperature, seed (see `widget_settings`); `model`: an offered model's path (None: the default)."""
    try:
        prompt, ghost, model = check_prompt(prompt), check_flag("ghost", ghost), models.checked_path(model)
        req = Request(prompt, widget_settings(presets_of(model or models.default), **widgets))
        run = start(models.get(model), req)
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error (ui.frame.problem)
        yield cleared(problem(err).html)
        return
    yield from stream_frames(run, ghost, scope_hint(prompt, knows(model or models.default)))


def stream_frames(run: LiveRun, ghost: bool, hint: str = ""):
    """The frames of a started run (a playground run, a poked re-run): live patches, then its final frame."""
    live, frames = LiveCanvas("canvas", ghost), Throttle(1 / CANVAS_FPS)
    chart_due = Throttle(1 / CHART_FPS, wait_first=True)  # charts of one point say nothing
    error = ""
    try:
        yield _live_frame(run, live, figures=False)  # the prompt and its masks, before the first forward
        for record in _records_or_ticks(run):
            if record is None:  # a forward still running: say how far it is
                yield frame(RunFrame, stats=_working(run))
            elif record.kind == "decode" and frames.due():
                yield _live_frame(run, live, figures=chart_due.due())
        run.close("done")
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error, the run kept as stopped
        told = problem(err)
        error = told.html
        run.close("stopped", told.text)
    finally:
        run.close()  # a closed tab or Stop closes this generator, and with it the engine's
    yield final_frame(run.trace, ghost, error, hint, engine_line(run))


@refusing
def stopped_ui(trace: Trace | None, ghost) -> RunFrame:
    """After Stop: wait for the cancelled run to close, then show it whole, as stopped at its last forward."""
    ghost = check_flag("ghost", ghost)
    if trace is None:
        return frame(RunFrame)
    deadline = time.monotonic() + STOP_WAIT_S
    while trace.status == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    if trace.status == "running":  # the engine did not hand control back in time: say so, keep the trace
        trace.finish("stopped", "stopped by the user")
    return final_frame(trace, ghost)


def _records_or_ticks(run: LiveRun):
    """The run's records, and None every WORKING_TICK_S while a forward runs (`ui.pace.Ahead`)."""
    while True:
        if run.ahead is not None:
            while not run.ahead.ready(WORKING_TICK_S):
                yield None
        record = next(run.records, None)
        if record is None:
            return
        yield record


def _working(run: LiveRun) -> str:
    """The stats line with the progress of the forward in flight under it."""
    pace, ahead = pace_of(run.pipe), run.ahead
    line = working_line(run.trace.forwards, time.monotonic() - ahead.asked_at, pace.layer, pace.layers,
                        pace.per_forward)
    return f"{tables.stats_line(run.trace, live=True)}  \n<small>{line}</small>"


def engine_line(run: LiveRun) -> str:
    """Which MoE engine the run's model runs, as a visitor reads it (`tables.engine_sentence`), and what to expect
    of a slow model (`ui.pace.pace_sentence`); "" if unknown. The full reason and self-check are in the API's
    stats (`engine`) and the server log."""
    report = getattr(run.pipe, "engine", None)
    pace = pace_sentence(pace_of(run.pipe).per_forward)
    if report is None:
        return pace
    sentence = tables.engine_sentence(report.to_dict(), str(getattr(run.pipe.model, "device", "")))
    return f"{sentence} {pace}".strip()


def partial_text(run: LiveRun) -> str:
    return run.pipe.decode_text(run.trace.output_ids)
