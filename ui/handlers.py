"""Event handlers of the playground: generators that run the engine and yield frames, and replays.

Handlers take plain values and return named frames (`RunFrame`, `CompareFrame`: one field per output
component; ui/layout.py wires the components by these names), with `gr.skip()` for what a frame leaves
unchanged. Live runs stream at most `CANVAS_FPS` canvas frames and `CHART_FPS` chart updates per second
(the last frame always goes out); replays re-render a stored Trace and never touch the model. Bad input
is shown in `#error` (`*_ui`) or raised as `gr.Error` (`*_api`).
"""

from __future__ import annotations

import tempfile
from html import escape
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from llada.checkpoint import CheckpointError
from llada.trace import Trace

from . import canvas, charts, export, tables
from .runs import LiveRun, Throttle, check_request, interleave, start

CANVAS_FPS, CHART_FPS = 15.0, 1.0
# InputError is a ValueError; engine checks raise ValueError; NonFiniteLogits is a FloatingPointError
REFUSED = (ValueError, CheckpointError, FloatingPointError)


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
    trace: Any


class CompareFrame(NamedTuple):
    """One update of the S vs Q comparison."""

    error: Any
    canvas_s: Any
    canvas_q: Any
    step: Any
    table: Any
    diff: Any
    chart_tps: Any
    chart_tpf: Any
    chart_steps: Any
    pair: Any


def frame(kind, **values):
    """A frame of `kind` with `values`, every other output left as it is."""
    return kind(**({name: gr.skip() for name in kind._fields} | values))


def error_html(err: Exception | str | None) -> str:
    if not err:
        return ""
    return f'<div class="error-box" role="alert"><b>Refused:</b> {escape(str(err))}</div>'


def _charts(runs: list[tuple[str, Trace]]) -> dict:
    tps, tpf, steps = charts.all_figures(runs)
    return {"chart_tps": tps, "chart_tpf": tpf, "chart_steps": steps}


# ---- the playground run -------------------------------------------------------------------------------

def _run_frame(run: LiveRun, ghost: bool, live: bool, figures: bool, text: str | None = None) -> RunFrame:
    trace = run.trace
    trace.name_tokens(run.pipe.token_texts)
    values = {"error": "", "canvas": canvas.render(trace, trace.steps, ghost),
              "step": gr.update(maximum=max(trace.steps, 1), value=trace.steps),
              "stats": tables.stats_line(trace, live), "trace": trace}
    if figures:
        values |= _charts([(trace.mode, trace)])
    if text is not None:
        values["text"] = text
    if not live:
        values["edit_log"] = tables.edit_log(trace)
    return frame(RunFrame, **values)


def generate_ui(models, model_path, prompt, mode, tau_mask, edit_on, tau_edit, mbe, mbe_window, block_length,
                gen_length, max_post_steps, temperature, seed, ghost):
    """Run one decode and stream frames of it; the last frame carries the edit log and the final text."""
    custom = mode == "Custom"  # a named mode sets the thresholds; the sliders only show them
    try:
        req = check_request(prompt, mode, tau_mask if custom else None, tau_edit if custom else None,
                            edit_on or not custom, mbe, mbe_window, block_length, gen_length, max_post_steps,
                            temperature, seed)
        run = start(models.get(model_path), req)
    except REFUSED as err:
        yield frame(RunFrame, error=error_html(err))
        return
    # charts of one point say nothing: the first comes after a chart interval (a short run draws them once)
    frames, chart_due = Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS, wait_first=True)
    try:
        yield _run_frame(run, ghost, True, False, "")  # the prompt and its masks, before the first forward
        for record in run.records:
            if record.kind == "decode" and frames.due():
                figures = chart_due.due()
                yield _run_frame(run, ghost, True, figures, _partial_text(run) if figures else None)
        run.close("done")
    except REFUSED as err:
        yield frame(RunFrame, error=error_html(err))
        return
    finally:
        run.close()  # a closed tab or Stop closes this generator, and with it the engine's
    yield _run_frame(run, ghost, False, True, run.trace.text)


def _partial_text(run: LiveRun) -> str:
    return run.pipe.decode_text(run.trace.output_ids)


# ---- replay ---------------------------------------------------------------------------------------------

def show_step(trace: Trace | None, step, ghost) -> str:
    return canvas.render(trace, int(step or 0), bool(ghost))


def play(speed) -> gr.Timer:
    return gr.Timer(value=0.3 / float(speed or 1), active=True)


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


def export_files(trace: Trace | None) -> list[str] | None:
    if trace is None:
        raise gr.Error("nothing to export yet: run a prompt first")
    folder = Path(tempfile.mkdtemp(prefix="llada-export-"))
    return [str(p) for p in export.write_exports(trace, folder)]


# ---- S vs Q ---------------------------------------------------------------------------------------------

def _compare_frame(runs: dict[str, LiveRun], figures: bool, final: bool) -> CompareFrame:
    traces = {label: run.trace for label, run in runs.items()}
    for run in runs.values():
        run.trace.name_tokens(run.pipe.token_texts)
    top = max(t.steps for t in traces.values())
    values = {"error": "", "canvas_s": canvas.render(traces["S"], top, elem_id="canvas-s"),
              "canvas_q": canvas.render(traces["Q"], top, elem_id="canvas-q"),
              "step": gr.update(maximum=max(top, 1), value=top), "table": tables.stats_table(list(traces.items())),
              "pair": traces}
    if figures:
        values |= _charts(list(traces.items()))
    if final:
        values["diff"] = tables.diff_html(traces["S"].text or "", traces["Q"].text or "")
    return frame(CompareFrame, **values)


def _compare_runs(models, model_path, prompt, block_length, gen_length) -> dict[str, LiveRun]:
    pipe = models.get(model_path)
    return {mode: start(pipe, check_request(prompt, mode, block_length=block_length, gen_length=gen_length))
            for mode in ("S", "Q")}


def compare_ui(models, model_path, prompt, block_length, gen_length):
    """S and Q on one prompt, interleaved forward by forward, streamed on a shared step timeline."""
    try:
        runs = _compare_runs(models, model_path, prompt, block_length, gen_length)
    except REFUSED as err:
        yield frame(CompareFrame, error=error_html(err))
        return
    frames, chart_due, pair = Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS), interleave(runs)
    try:
        yield _compare_frame(runs, False, False)
        for _ in pair:
            if frames.due():
                yield _compare_frame(runs, chart_due.due(), False)
    except REFUSED as err:
        yield frame(CompareFrame, error=error_html(err))
        return
    finally:
        pair.close()  # Stop or a closed tab ends both engines
    yield _compare_frame(runs, True, True)


def compare_step(traces: dict[str, Trace] | None, step) -> tuple:
    if not traces:
        return gr.skip(), gr.skip()
    k = int(step or 0)
    return canvas.render(traces["S"], k, elem_id="canvas-s"), canvas.render(traces["Q"], k, elem_id="canvas-q")


# ---- API ------------------------------------------------------------------------------------------------

def generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model=None):
    """Streams (text so far, stats); the last update is the final text and the run's stats.

    A named mode sets the thresholds; tau_mask / tau_edit given explicitly (not null) override it.
    model: an offered model's name (empty: the default model)."""
    try:
        req = check_request(prompt, mode, tau_mask, tau_edit, True, mbe, 1, block_length, gen_length)
        run = start(models.get(models.path_of(model)), req)
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    due = Throttle(1 / CHART_FPS)
    try:
        yield "", api_stats(run.trace), run.trace
        for record in run.records:
            if record.kind == "decode" and due.due():
                yield _partial_text(run), api_stats(run.trace), run.trace
        run.close("done")
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    finally:
        run.close()
    yield run.trace.text, api_stats(run.trace), run.trace


def api_stats(trace: Trace) -> dict:
    """The stats dict of the API: forwards, tokens, tpf, tps, drafts, edits, mbe_edits (and their parts)."""
    keys = ("forwards", "decode_forwards", "cache_forwards", "tokens", "tpf", "tps", "seconds", "drafts", "edits",
            "mbe_edits")
    values = trace.stats()
    return {k: values[k] for k in keys}


def compare_api(models, prompt, block_length, gen_length, model=None) -> dict:
    """Final stats and text of S and Q on one prompt (model: an offered model's name, empty: the default)."""
    try:
        runs = _compare_runs(models, models.path_of(model), prompt, block_length, gen_length)
        for _ in interleave(runs):
            pass  # interleave closes each run as it ends
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    return {mode: api_stats(run.trace) | {"text": run.trace.text} for mode, run in runs.items()}


def trace_api(trace: Trace | None) -> dict:
    """The full trace of this session's last run (see docs/trace-schema.md)."""
    if trace is None:
        raise gr.Error("no run yet in this session: call /generate first")
    return trace.to_dict()

