"""Side by side on one prompt: S vs Q (two modes of one model), or two models (e.g. LLaDA2.1 against 2.2).

`VERSUS` names the two choices. S vs Q runs both modes of the chosen model, each with its own preset, block
length included (unless one is given explicitly), sharing every forward (one batch). Two models run the
chosen mode on the chosen model and on a second one, each with that model's own preset of the mode (a
LLaDA2.2 model's presets are its own), forward by forward on one timeline. A pair is a dict {label: Trace}
in screen order (left, then right): labels "S" and "Q", or the two models' names.

Each side streams like a playground run (patches of its canvas, a keyframe and the charts now and then),
with its own numbers under its canvas (drafts, edits, and a LLaDA2.2 model's inserts and deletes); the last
frame adds the word diff of the two outputs and a one-line verdict (forwards saved, and for a checkable
prompt whether each answer is right) and the pair's replay: the browser draws both canvases at any step of
the scrubber from it (ui/render/live.py); `compare_step` draws a live pair's step when the hand lets go.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from llada.trace import Trace

from ..frame import Throttle, frame, problem, refusing
from ..render import canvas, tables
from ..render.live import LiveCanvas, patch_value, replay_value, scrub_value
from ..runs import LiveRun, interleave, start, start_batch
from ..settings import InputError, check_choice, check_prompt, check_request, check_step, presets_of
from .run import CANVAS_FPS, CHART_FPS, charts_of

VERSUS = ("S vs Q", "two models")  # what Compare sets side by side: two modes of one model, or two models
CANVAS_IDS = ("canvas-s", "canvas-q")  # the left and the right canvas (their elem_ids predate `VERSUS`)
SIDES = ("canvas_s", "canvas_q")  # the frame's fields of those canvases
SIDE_STATS = ("stats_s", "stats_q")  # the frame's fields of the numbers under them


class CompareFrame(NamedTuple):
    """One update of the comparison."""

    error: Any
    canvas_s: Any
    canvas_q: Any
    stats_s: Any
    stats_q: Any
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


def side_stats(label: str, trace: Trace | None) -> str:
    """The numbers of one side, under its canvas: its label, then the run's stats line (TPF, drafts, edits,
    and inserts and deletes once it made one)."""
    return f"**{label}** · {tables.stats_line(trace)}" if trace is not None else ""


def _stats_values(traces: dict[str, Trace]) -> dict:
    return {field: side_stats(label, trace) for field, (label, trace) in zip(SIDE_STATS, traces.items())}


def _compare_frame(runs: dict[str, LiveRun], lives: dict[str, LiveCanvas], figures: bool,
                   first: bool = False) -> CompareFrame:
    """A frame while the pair runs: a patch (or keyframe) per canvas, the numbers, the charts now and then; the
    first one drops the last pair's replay from the browser (the server draws a live pair's steps)."""
    traces = {label: run.trace for label, run in runs.items()}
    values = {"error": "", "table": tables.stats_table(list(traces.items())), "pair": traces}
    values |= _stats_values(traces)
    patches = []
    for side, (label, run) in zip(SIDES, runs.items()):
        run.trace.name_tokens(run.pipe.token_texts, run.pipe.token_bytes)
        update = lives[label].update(run.trace, keyframe=figures)
        if update.html is not None:
            values[side] = update.html
        patches.append(update.patch)
    values["patch"] = patch_value(*patches) or gr.skip()
    if first:
        values["replay"] = None
    if figures:
        values |= charts_of(list(traces.items()))
    return frame(CompareFrame, **values)


def _compare_final(traces: dict[str, Trace], ran: str, error: str = "") -> CompareFrame:
    top = max(t.steps for t in traces.values())
    (la, a), (lb, b) = traces.items()
    canvases = {side: canvas.render(t, top, elem_id=elem_id) for side, elem_id, t in zip(SIDES, CANVAS_IDS, (a, b))}
    replays = (replay_value(t, elem_id=elem_id) for elem_id, t in zip(CANVAS_IDS, (a, b)))
    verdict = f"{tables.verdict((la, a), (lb, b))}  \n{ran}"
    return frame(CompareFrame, error=error, **canvases, **_stats_values(traces),
                 step=gr.update(maximum=max(top, 1), value=top), table=tables.stats_table(list(traces.items())),
                 diff=tables.diff_html(a.text or "", b.text or "", la, lb), pair=traces,
                 replay=scrub_value(*replays), verdict=verdict, **charts_of(list(traces.items())))


def _ran_modes(traces: dict[str, Trace]) -> str:
    """What S and Q ran with (each its own preset's block length; MBE from its box)."""
    s, q = traces["S"].settings, traces["Q"].settings
    return (f"S ran its preset with blocks of {s.block_length}, Q its preset with blocks of {q.block_length}; "
            f"Multi-Block Editing {'on' if s.mbe else 'off'} for both (the MBE box).")


def _ran_models(traces: dict[str, Trace], mode: str) -> str:
    """What the two models ran with: the one mode, each model's own preset of it."""
    (la, a), (lb, b) = traces.items()
    return (f"Both ran mode {mode}, each with its own preset: {la} with blocks of {a.settings.block_length}, "
            f"{lb} with blocks of {b.settings.block_length}; Multi-Block Editing "
            f"{'on' if a.settings.mbe else 'off'} for both (the MBE box).")


def compare_runs(models, model_path, prompt, block_length, gen_length, mbe=False) -> dict[str, LiveRun]:
    """S and Q runs of one prompt (block_length None: each mode's own; model_path None: the default; mbe: both
    with Multi-Block Editing)."""
    check_prompt(prompt)
    presets = presets_of(model_path or models.default)
    requests = {mode: check_request(presets, prompt, mode, block_length=block_length, gen_length=gen_length,
                                    mbe=mbe) for mode in ("S", "Q")}
    return start_batch(models.get(model_path), requests)  # each trace is the one its mode gets alone


def model_mode(mode) -> str:
    """The mode two models run: a named one as picked; Custom is each model's S (the sliders are one model's)."""
    return "S" if mode in (None, "Custom") else mode


def model_runs(models, model_path, other, prompt, gen_length, mode="S", mbe=False) -> dict[str, LiveRun]:
    """The prompt on the chosen model (None: the default) and on `other` (an offered model's path or name), each
    with its own preset of `mode`; {name: LiveRun}, the chosen model first. InputError when `other` is missing
    or the same model."""
    check_prompt(prompt)
    first = models.checked_path(model_path) or models.default
    if other is None or other == "":
        raise InputError("pick the second model to compare with (two models)")
    second = models.checked_path(other)
    if second == first:
        raise InputError(f"pick a second model other than {_name(models, first)}: both sides would be the same run")
    runs = {}
    for path in (first, second):
        req = check_request(presets_of(path), prompt, mode, gen_length=gen_length, mbe=mbe)
        runs[_name(models, path)] = start(models.get(path), req)
    return runs


def _name(models, path: str) -> str:
    return next(m.name for m in models.offered if m.path == path)


def _start(models, model_path, prompt, gen_length, mbe, mode, versus, other) -> tuple[dict[str, LiveRun], str]:
    """The pair's runs, and the mode the two models run (None for S vs Q)."""
    if check_choice("compare", versus, VERSUS) == "S vs Q":
        return compare_runs(models, models.checked_path(model_path), prompt, None, gen_length, mbe), None
    mode = model_mode(mode)
    return model_runs(models, model_path, other, prompt, gen_length, mode, mbe), mode


def compare_ui(models, model_path, prompt, gen_length, mbe=False, mode="S", versus="S vs Q", other=None):
    """The pair on one prompt, sharing one timeline: S and Q of one model, each with its preset's block length,
    or two models in `mode` (`VERSUS`); MBE as its box says."""
    try:
        runs, both = _start(models, model_path, prompt, gen_length, mbe, mode, versus, other)
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error (ui.frame.problem)
        yield frame(CompareFrame, error=problem(err).html)
        return
    frames, chart_due, pair = Throttle(1 / CANVAS_FPS), Throttle(1 / CHART_FPS), interleave(runs)
    lives = {label: LiveCanvas(elem_id) for label, elem_id in zip(runs, CANVAS_IDS)}
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
    traces = {label: run.trace for label, run in runs.items()}
    yield _compare_final(traces, _ran_models(traces, both) if both else _ran_modes(traces), error)


@refusing
def compare_step(traces: dict[str, Trace] | None, step) -> tuple:
    """Both canvases at `step` of a live pair; a finished pair's the browser has drawn from its replay."""
    k = check_step(step)
    if not traces or all(t.status != "running" for t in traces.values()):
        return gr.skip(), gr.skip()
    return tuple(canvas.render(t, k, elem_id=elem_id) for elem_id, t in zip(CANVAS_IDS, traces.values()))
