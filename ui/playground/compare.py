"""The S vs Q comparison: both modes on one prompt, sharing every forward (one batch), on one timeline.

Each mode runs with its own preset, block length included (unless one is given explicitly). Each side
streams like a playground run (patches of its canvas, a keyframe and the charts now and then); the last
frame adds the word diff of the two outputs and a one-line verdict (forwards saved, and for a checkable
prompt whether each answer is right) and the pair's replay: the browser draws both canvases at any step
of the scrubber from it (ui/render/live.py); `compare_step` draws a live pair's step when the hand lets go.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from llada.trace import Trace

from ..frame import Throttle, frame, problem, refusing
from ..render import canvas, tables
from ..render.live import LiveCanvas, patch_value, replay_value, scrub_value
from ..runs import LiveRun, interleave, start_batch
from ..settings import check_prompt, check_request, check_step, presets_of
from .run import CANVAS_FPS, CHART_FPS, charts_of


class CompareFrame(NamedTuple):
    """One update of the S vs Q comparison."""

    error: Any
    canvas_s: Any
    canvas_q: Any
    step: Any
    table: Any
    diff: Any
    verdict: Any
    chart_tps: Any
    chart_tpf: Any
    chart_steps: Any
    patch: Any
    replay: Any
    pair: Any


CANVAS_IDS = {"S": "canvas-s", "Q": "canvas-q"}


def _compare_frame(runs: dict[str, LiveRun], lives: dict[str, LiveCanvas], figures: bool,
                   first: bool = False) -> CompareFrame:
    """A frame while S and Q run: a patch (or keyframe) per canvas, the table, the charts now and then; the
    first one drops the last pair's replay from the browser (the server draws a live pair's steps)."""
    traces = {label: run.trace for label, run in runs.items()}
    values = {"error": "", "table": tables.stats_table(list(traces.items())), "pair": traces}
    patches = []
    for label, run in runs.items():
        run.trace.name_tokens(run.pipe.token_texts, run.pipe.token_bytes)
        update = lives[label].update(run.trace, keyframe=figures)
        if update.html is not None:
            values[CANVAS_IDS[label].replace("-", "_")] = update.html
        patches.append(update.patch)
    values["patch"] = patch_value(*patches) or gr.skip()
    if first:
        values["replay"] = None
    if figures:
        values |= charts_of(list(traces.items()))
    return frame(CompareFrame, **values)


def _compare_final(traces: dict[str, Trace], error: str = "") -> CompareFrame:
    top = max(t.steps for t in traces.values())
    return frame(CompareFrame, error=error, canvas_s=canvas.render(traces["S"], top, elem_id="canvas-s"),
                 canvas_q=canvas.render(traces["Q"], top, elem_id="canvas-q"),
                 step=gr.update(maximum=max(top, 1), value=top), table=tables.stats_table(list(traces.items())),
                 diff=tables.diff_html(traces["S"].text or "", traces["Q"].text or ""), pair=traces,
                 replay=scrub_value(*(replay_value(traces[side], elem_id=CANVAS_IDS[side]) for side in ("S", "Q"))),
                 verdict=_verdict(traces), **charts_of(list(traces.items())))


def _verdict(traces: dict[str, Trace]) -> str:
    """The verdict, then the settings each side ran with (its own preset's block length; MBE from its box)."""
    s, q = traces["S"].settings, traces["Q"].settings
    ran = (f"S ran its preset with blocks of {s.block_length}, Q its preset with blocks of {q.block_length}; "
           f"Multi-Block Editing {'on' if s.mbe else 'off'} for both (the MBE box).")
    return f"{tables.verdict(('S', traces['S']), ('Q', traces['Q']))}  \n{ran}"


def compare_runs(models, model_path, prompt, block_length, gen_length, mbe=False) -> dict[str, LiveRun]:
    """S and Q runs of one prompt (block_length None: each mode's own; model_path None: the default; mbe: both
    with Multi-Block Editing)."""
    check_prompt(prompt)
    presets = presets_of(model_path or models.default)
    requests = {mode: check_request(presets, prompt, mode, block_length=block_length, gen_length=gen_length,
                                    mbe=mbe) for mode in ("S", "Q")}
    return start_batch(models.get(model_path), requests)  # each trace is the one its mode gets alone


def compare_ui(models, model_path, prompt, gen_length, mbe=False):
    """S and Q on one prompt, each with its preset's block length (MBE as its box says), sharing each forward."""
    try:
        runs = compare_runs(models, models.checked_path(model_path), prompt, None, gen_length, mbe)
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error (ui.frame.problem)
        yield frame(CompareFrame, error=problem(err).html)
        return
    frames, chart_due, pair = Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS), interleave(runs)
    lives = {label: LiveCanvas(CANVAS_IDS[label]) for label in runs}
    error = ""
    try:
        yield _compare_frame(runs, lives, False, first=True)
        for _ in pair:
            if frames.due():
                yield _compare_frame(runs, lives, chart_due.due())
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error (ui.frame.problem)
        error = problem(err).html
    finally:
        pair.close()  # Stop or a closed tab ends both engines
    yield _compare_final({label: run.trace for label, run in runs.items()}, error)


@refusing
def compare_step(traces: dict[str, Trace] | None, step) -> tuple:
    """Both canvases at `step` of a live pair; a finished pair's the browser has drawn from its replay."""
    k = check_step(step)
    if not traces or all(t.status != "running" for t in traces.values()):
        return gr.skip(), gr.skip()
    return canvas.render(traces["S"], k, elem_id="canvas-s"), canvas.render(traces["Q"], k, elem_id="canvas-q")
