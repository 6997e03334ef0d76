"""Event handlers of the playground: generators that run the engine and yield frames, and replays.

Every handler takes plain values and returns component values or updates, in the order of the output
lists defined in ui/layout.py. Live runs stream at most `CANVAS_FPS` canvas frames and `CHART_FPS`
chart updates per second (the last frame always goes out); replays re-render a stored Trace and never
touch the model. Bad input is shown in `#error` (`*_ui`) or raised as `gr.Error` (`*_api`).
"""

from __future__ import annotations

import tempfile
from html import escape
from pathlib import Path

import gradio as gr

from llada.checkpoint import CheckpointError

from . import canvas, charts, export, tables
from .runs import Throttle, check_request, finish, record, record_pair
from .trace import Trace, stats

CANVAS_FPS, CHART_FPS = 15.0, 1.0
REFUSED = (ValueError, CheckpointError)  # InputError is a ValueError; engine checks raise ValueError


def error_html(err: Exception | str | None) -> str:
    if not err:
        return ""
    return f'<div class="error-box" role="alert"><b>Refused:</b> {escape(str(err))}</div>'


# ---- the playground run -------------------------------------------------------------------------------

def _frame(trace: Trace, ghost: bool, live: bool, figures: bool, text: str | None, final: bool = False) -> tuple:
    """(error, canvas, step, stats, tps, tpf, steps chart, edit log, text, state) of a playground frame."""
    skip = gr.skip()
    figs = charts.all_figures([(trace.settings["mode"], trace)]) if figures else (skip, skip, skip)
    step = gr.update(maximum=max(trace.steps, 1), value=trace.steps)
    return ("", canvas.render(trace, trace.steps, ghost), step, tables.stats_line(trace, live), *figs,
            tables.edit_log(trace) if final else skip, skip if text is None else text, trace)


def _partial_text(pipe, trace: Trace) -> str:
    record = trace.records[-1] if trace.records else None
    if record is None:
        return ""
    tokens = trace.tokens_at(trace.steps)[trace.prompt_length:trace.prompt_length + record["output_length"]]
    return pipe.decode_text(tokens)


def generate_ui(models, model_path, prompt, mode, tau_mask, edit_on, tau_edit, mbe, mbe_window, block_length,
                gen_length, max_post_steps, temperature, seed, ghost):
    """Run one decode and stream frames of it; the last frame carries the edit log and the final text."""
    skip = gr.skip()
    try:
        req = check_request(prompt, mode, tau_mask, tau_edit if edit_on else None, mbe, mbe_window, block_length,
                            gen_length, max_post_steps, temperature, seed)
        pipe = models.get(model_path)
        recorder, stream = record(pipe, req)
    except REFUSED as err:
        yield (error_html(err),) + (skip,) * 9
        return
    # charts of one point say nothing: the first comes after a chart interval (a short run draws them once)
    trace, frames, chart_due = recorder.trace, Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS, wait_first=True)
    completed = False
    try:
        yield _frame(trace, ghost, True, False, "")  # the prompt and its masks, before the first forward
        for rec in stream:
            if rec["kind"] == "decode" and frames.due():
                figures = chart_due.due()
                yield _frame(trace, ghost, True, figures, _partial_text(pipe, trace) if figures else None)
        completed = True
    except REFUSED as err:
        yield (error_html(err),) + (skip,) * 9
        return
    finally:
        stream.close()  # a closed tab or Stop closes this generator, and with it the engine's
        finish(recorder, pipe, complete=completed)
    yield _frame(trace, ghost, False, True, trace.result["text"], final=True)


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
        if record["edits"] or record["mbe"]:
            return canvas.render(trace, k, bool(ghost), elem_id=elem_id), k
    return gr.skip(), gr.skip()


def export_files(trace: Trace | None) -> list[str] | None:
    if trace is None:
        raise gr.Error("nothing to export yet: run a prompt first")
    folder = Path(tempfile.mkdtemp(prefix="llada-export-"))
    return [str(p) for p in export.write_exports(trace, folder)]


# ---- S vs Q ---------------------------------------------------------------------------------------------

def _compare_frame(traces: dict[str, Trace], step: int | None, figures: bool, final: bool) -> tuple:
    """(error, canvas S, canvas Q, step, table, diff, tps, tpf, steps chart, state) of the comparison."""
    skip = gr.skip()
    runs = list(traces.items())
    top = max(t.steps for t in traces.values())
    step = top if step is None else step
    figs = charts.all_figures(runs) if figures else (skip, skip, skip)
    diff = tables.diff_html(traces["S"].result["text"], traces["Q"].result["text"]) if final else skip
    s_html = canvas.render(traces["S"], step, elem_id="canvas-s")
    q_html = canvas.render(traces["Q"], step, elem_id="canvas-q")
    return ("", s_html, q_html, gr.update(maximum=max(top, 1), value=step), tables.stats_table(runs), diff, *figs,
            traces)


def _compare_runs(models, model_path, prompt, block_length, gen_length):
    """Yields (pipe, traces, done) after every forward of an interleaved S and Q run."""
    pipe = models.get(model_path)
    recorders, streams = {}, {}
    for mode in ("S", "Q"):
        req = check_request(prompt, mode, block_length=block_length, gen_length=gen_length)
        recorders[mode], streams[mode] = record(pipe, req)
    traces = {m: r.trace for m, r in recorders.items()}
    pair = record_pair(streams)
    try:
        yield pipe, traces, False
        for _ in pair:
            yield pipe, traces, False
    finally:
        pair.close()
        for recorder in recorders.values():
            finish(recorder, pipe)
    yield pipe, traces, True


def compare_ui(models, model_path, prompt, block_length, gen_length):
    """S and Q on one prompt, interleaved forward by forward, streamed on a shared step timeline."""
    skip = gr.skip()
    frames, chart_due = Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS)
    try:
        for _, traces, done in _compare_runs(models, model_path, prompt, block_length, gen_length):
            if done or frames.due():
                yield _compare_frame(traces, None, done or chart_due.due(), done)
    except REFUSED as err:
        yield (error_html(err),) + (skip,) * 9


def compare_step(traces: dict[str, Trace] | None, step) -> tuple:
    if not traces:
        return gr.skip(), gr.skip()
    k = int(step or 0)
    return canvas.render(traces["S"], k, elem_id="canvas-s"), canvas.render(traces["Q"], k, elem_id="canvas-q")


# ---- API ------------------------------------------------------------------------------------------------

def generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length):
    """Streams (text so far, stats); the last update is the final text and the run's stats."""
    try:
        req = check_request(prompt, mode, tau_mask, tau_edit, mbe, 1, block_length, gen_length)
        pipe = models.get(None)
        recorder, stream = record(pipe, req)
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    trace, due, completed = recorder.trace, Throttle(1 / CHART_FPS), False
    try:
        yield "", api_stats(stats(trace)), trace
        for rec in stream:
            if rec["kind"] == "decode" and due.due():
                yield _partial_text(pipe, trace), api_stats(stats(trace)), trace
        completed = True
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    finally:
        stream.close()
        finish(recorder, pipe, complete=completed)
    yield trace.result["text"], api_stats(trace.result["stats"]), trace


def api_stats(values: dict) -> dict:
    """The stats dict of the API: forwards, tokens, tpf, tps, drafts, edits, mbe_edits (and their parts)."""
    keys = ("forwards", "decode_forwards", "cache_forwards", "tokens", "tpf", "tps", "seconds", "drafts", "edits",
            "mbe_edits")
    return {k: values[k] for k in keys}


def compare_api(models, prompt, block_length, gen_length) -> dict:
    """Final stats and text of S and Q on one prompt."""
    try:
        for _, traces, done in _compare_runs(models, None, prompt, block_length, gen_length):
            pass
    except REFUSED as err:
        raise gr.Error(str(err)) from None
    return {mode: api_stats(t.result["stats"]) | {"text": t.result["text"]} for mode, t in traces.items()}


def trace_api(trace: Trace | None) -> dict:
    """The full trace of this session's last run (see docs/trace-schema.md)."""
    if trace is None:
        raise gr.Error("no run yet in this session: call /generate first")
    return trace.to_dict()
