"""The Playground tab's events: controls, a run, its replay, S vs Q and the API endpoints.

`build(models, trace, pair)` creates the tab's components (inside `gr.Tab("Playground")`) and wires them;
it returns the controls, which ui/demo.py hands to the explorer (a point of its chart sets some of them).
A run's inputs are wired by name (`ui.frame.Inputs`: `RUN_INPUTS` are the controls' names, which are the
names `generate_ui` takes), its outputs by the fields of `RunFrame`. Runs that use the model share the
decode concurrency group (ui/frame.py); replays re-render the per-session Trace held in gr.State, and
after a run the canvas replays itself at a teaching pace (when asked). The API endpoints keep the
positional inputs of docs UI_CONTRACT.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from ..frame import DECODE, PRIVATE, REPLAY, Inputs, refusing
from ..models import Models, gpu_seconds, on_gpu
from ..sessions import ONE_SHOTS
from ..settings import check_flag
from . import api, compare, controls, replay, view
from .run import RunFrame, generate_ui, stopped_ui

SHOW_COMPARE = "() => document.querySelector('#compare')?.scrollIntoView({behavior: 'smooth', block: 'start'})"
CHARTS = ("chart_tps", "chart_tpf", "chart_steps")  # the frames' names of the three charts, in layout order
RUN_INPUTS = ("model", "prompt", "mode", "tau_mask", "edit", "tau_edit", "mbe", "mbe_window", "block_length",
              "gen_length", "max_post_steps", "temperature", "seed", "ghost")
PRESET_OUTPUTS = ("tau_mask", "edit", "tau_edit", "max_post_steps", "block_length")  # what `apply_mode` sets


def _preset_outputs(c: SimpleNamespace) -> list:
    return [getattr(c, name) for name in PRESET_OUTPUTS]


def _wire_controls(models: Models, c: SimpleNamespace) -> None:
    @refusing
    def mode_picked(path, mode):
        return controls.apply_mode(models.checked_path(path), mode)

    @refusing
    def model_picked(path, mode):
        path = models.checked_path(path) or models.default
        return (controls.presets_note(path), controls.knows_note(path), gr.update(maximum=controls.gen_limit(path)),
                *controls.apply_mode(path, mode))

    c.mode.input(mode_picked, [c.model, c.mode], _preset_outputs(c), **PRIVATE, **REPLAY)
    c.edit.change(refusing(lambda on: gr.update(interactive=check_flag("editing (T2T) on", on))), c.edit, c.tau_edit,
                  **PRIVATE, **REPLAY)  # τ_edit can be moved only while editing is on (M2T only: off)
    for slider in (c.tau_mask, c.tau_edit, c.edit):
        slider.input(lambda: "Custom", None, c.mode, **PRIVATE, **REPLAY)
    c.model.change(model_picked, [c.model, c.mode], [c.presets, c.knows, c.gen_length, *_preset_outputs(c)],
                   **PRIVATE, **REPLAY)


def _inputs(c: SimpleNamespace, names) -> list:
    return [getattr(c, name) for name in names]


def _outputs(kind, parts: dict) -> list:
    """The components of a frame NamedTuple's fields, in its order."""
    return [parts[name] for name in kind._fields]


def _run_outputs(v: SimpleNamespace, trace) -> list:
    parts = {"error": v.error, "canvas": v.canvas, "step": v.step, "stats": v.stats, "edit_log": v.edit_log,
             "text": v.text, "note": v.note, "heatmap": v.heatmap, "patch": v.patch,
             "replay": v.replay, "trace": trace} | dict(zip(CHARTS, v.charts))
    return _outputs(RunFrame, parts)


def _wire_run(models: Models, c: SimpleNamespace, v: SimpleNamespace, trace, examples: gr.Dataset) -> None:
    named = Inputs(**{name: getattr(c, name) for name in RUN_INPUTS})

    def slot(data: dict) -> int:
        values = named.values(data)
        return gpu_seconds(values["gen_length"], values["block_length"], values["max_post_steps"])

    @on_gpu(seconds=slot)
    def run(data: dict):
        yield from generate_ui(models, **named.values(data))

    outputs, teach = _run_outputs(v, trace), [trace, c.teach, c.ghost]
    replay_out = [v.canvas, v.step, v.timer]
    for start in (c.generate.click, examples.click):  # a replay in progress stops when a run starts
        start(replay.pause, None, v.timer, **PRIVATE, **REPLAY)
    event = c.generate.click(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    event.then(replay.teach, teach, replay_out, **PRIVATE, **REPLAY)
    picked = examples.click(refusing(controls.example_values), [examples], _inputs(c, controls.EXAMPLE_INPUTS),
                            **PRIVATE, **REPLAY)
    example = picked.then(lambda path, mode: controls.apply_mode(models.checked_path(path), mode, with_block=False),
                          [c.model, c.mode], _preset_outputs(c), **PRIVATE, **REPLAY)
    example_run = example.then(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    example_run.then(replay.teach, teach, replay_out, **PRIVATE, **REPLAY)
    c.stop.click(None, None, None, cancels=[event, example_run]).then(
        stopped_ui, [trace, c.ghost], outputs, **PRIVATE, **REPLAY)


def _wire_replay(c: SimpleNamespace, v: SimpleNamespace, trace) -> None:
    # a finished run's steps are drawn by the browser as the scrubber moves (ui/render/live.py scrubber_script);
    # the server hears of it once the hand lets go (a live run's step is drawn then; a replay stops)
    v.step.release(replay.scrub, [trace, v.step, c.ghost], [v.canvas, v.timer], trigger_mode="always_last",
                   **PRIVATE, **REPLAY)
    c.ghost.change(replay.show_step, [trace, v.step, c.ghost], [v.canvas, v.replay], **PRIVATE, **REPLAY)
    v.play.click(replay.start_play, [trace, v.step, c.ghost, v.speed], [v.canvas, v.step, v.timer], **PRIVATE,
                 **REPLAY)
    v.pause.click(replay.pause, None, v.timer, **PRIVATE, **REPLAY)
    v.timer.tick(replay.tick, [trace, v.step, c.ghost], [v.canvas, v.step, v.timer], **PRIVATE, **REPLAY)
    v.next_edit.click(replay.jump_to_edit, [trace, v.step, c.ghost], [v.canvas, v.step, v.timer], **PRIVATE,
                      **REPLAY)
    v.export.click(replay.export_files, [trace], v.files, **PRIVATE, **REPLAY)


def _wire_compare(models: Models, c: SimpleNamespace, v: SimpleNamespace, error, pair) -> None:
    named = Inputs(model_path=c.model, prompt=c.prompt, gen_length=c.gen_length, mbe=c.mbe)

    @on_gpu(seconds=lambda data: gpu_seconds(named.values(data)["gen_length"], None, runs=2))
    def run(data: dict):
        yield from compare.compare_ui(models, **named.values(data))

    parts = {"error": error, "canvas_s": v.canvas_s, "canvas_q": v.canvas_q, "step": v.step, "table": v.table,
             "diff": v.diff, "verdict": v.verdict, "patch": v.patch, "replay": v.replay,
             "pair": pair} | dict(zip(CHARTS, v.charts))
    outputs = _outputs(compare.CompareFrame, parts)
    c.compare.click(None, js=SHOW_COMPARE)  # the comparison sits below the run: bring it into view
    c.compare.click(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    # a finished pair's steps are drawn by the browser as the scrubber moves (ui/render/live.py), a live pair's
    # by the server once the hand lets go
    v.step.release(compare.compare_step, [pair, v.step], [v.canvas_s, v.canvas_q], trigger_mode="always_last",
                   **PRIVATE, **REPLAY)


def wire_api(models: Models, a: SimpleNamespace, trace) -> None:
    """/generate, /compare and /trace: inputs in the contract's order, their names the functions' own."""
    @on_gpu(seconds=lambda _p, _mode, _tm, _te, _mbe, block, gen, *_: gpu_seconds(gen, block))
    def generate(prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model=None,
                 request: gr.Request = None):
        ONE_SHOTS.add(request)  # a plain HTTP call's session goes once newer ones come (ui/sessions.py)
        yield from api.generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length,
                                    model)

    @on_gpu(seconds=lambda _p, block, gen, *_: gpu_seconds(gen, block, runs=2))
    def compare_pair(prompt, block_length, gen_length, model=None, request: gr.Request = None):
        ONE_SHOTS.add(request)
        return api.compare_api(models, prompt, block_length, gen_length, model)

    raw = {"preprocess": False}  # the client's values reach the checks as sent: nothing is coerced
    inputs = [a.prompt, a.mode, a.tau_mask, a.tau_edit, a.mbe, a.block_length, a.gen_length, a.model]
    a.generate.click(generate, inputs, [a.text, a.stats, trace], api_name="generate", **raw, **DECODE)
    a.compare.click(compare_pair, [a.prompt, a.block_length, a.gen_length, a.model], a.result, api_name="compare",
                    **raw, **DECODE)
    def last_trace(trace, request: gr.Request = None):
        """The full trace of this session's last run (see docs/trace-schema.md)."""
        ONE_SHOTS.add(request)
        return api.trace_api(trace)

    a.get_trace.click(last_trace, [trace], a.trace, api_name="trace", concurrency_limit=8)


def build(models: Models, trace, pair) -> SimpleNamespace:
    """The Playground tab (call inside its gr.Tab); returns its controls (the explorer sets some of them)."""
    c = SimpleNamespace()
    c.knows = gr.Markdown(controls.knows_note(models.default), elem_id="model-knows")
    controls.prompt_bar(c)
    slot = gr.Column(elem_id="examples-slot")  # filled below, once the inputs the examples set exist
    v = view.run_view_area(c, models)
    with slot:
        examples = controls.example_list(c)
    cmp = view.compare_view()
    view.charts_view(v)
    _wire_controls(models, c)
    _wire_run(models, c, v, trace, examples)
    _wire_replay(c, v, trace)
    _wire_compare(models, c, cmp, v.error, pair)
    return c
