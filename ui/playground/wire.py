"""The Playground tab's events: controls, a run, its replay, the comparison and the API endpoints.

`build(models, trace, pair)` creates the tab's components (inside `gr.Tab("Playground")`) and wires them;
it returns the controls, which ui/demo.py hands to the explorer (a point of its chart sets some of them).
A run's inputs are wired by name (`ui.frame.Inputs`: `RUN_INPUTS` are the controls' names, which are the
names `generate_ui` takes), its outputs by the fields of `RunFrame`. Runs that use the model share the
decode concurrency group (ui/frame.py); replays re-render the per-session Trace held in gr.State, and
after a run the canvas replays itself at a teaching pace (when asked). The API endpoints keep the
positional inputs of docs UI_CONTRACT.
"""

from __future__ import annotations

import gradio as gr

from .. import player
from ..frame import DECODE, PRIVATE, REPLAY, Inputs, refusing
from ..models import Models, gpu_seconds, on_gpu
from ..sessions import ONE_SHOTS
from ..settings import check_flag
from . import api, compare, controls, poke, replay, view
from .controls import Controls
from .run import RunFrame, generate_ui, stopped_ui
from .view import ApiInputs, CompareView, RunCharts, RunView

SHOW_COMPARE = "() => document.querySelector('#compare')?.scrollIntoView({behavior: 'smooth', block: 'start'})"
CHARTS = ("chart_tps", "chart_tpf", "chart_steps")  # the frames' names of the three charts, in layout order
RUN_INPUTS = ("model", "prompt", "mode", "tau_mask", "edit", "tau_edit", "mbe", "mbe_window", "block_length",
              "gen_length", "max_post_steps", "temperature", "seed", "ghost")
PRESET_OUTPUTS = ("tau_mask", "edit", "tau_edit", "max_post_steps", "block_length")  # what `apply_mode` sets


def _named(group, names) -> list:
    """The components of `group` named `names`, in that order."""
    return [getattr(group, name) for name in names]


def _wire_controls(models: Models, ctrl: Controls) -> None:
    @refusing
    def mode_picked(path, mode):
        return controls.apply_mode(models.checked_path(path), mode)

    @refusing
    def model_picked(path, mode):
        path = models.checked_path(path) or models.default
        return (controls.presets_note(path), controls.knows_note(path), gr.update(maximum=controls.gen_limit(path)),
                *controls.apply_mode(path, mode))

    presets = _named(ctrl, PRESET_OUTPUTS)
    ctrl.mode.input(mode_picked, [ctrl.model, ctrl.mode], presets, **PRIVATE, **REPLAY)
    editable = refusing(lambda on: gr.update(interactive=check_flag("editing (T2T) on", on)))
    ctrl.edit.change(editable, ctrl.edit, ctrl.tau_edit, **PRIVATE, **REPLAY)  # τ_edit moves only while editing is on
    for slider in (ctrl.tau_mask, ctrl.tau_edit, ctrl.edit):
        slider.input(lambda: "Custom", None, ctrl.mode, **PRIVATE, **REPLAY)
    ctrl.model.change(model_picked, [ctrl.model, ctrl.mode], [ctrl.presets, ctrl.knows, ctrl.gen_length, *presets],
                      **PRIVATE, **REPLAY)


def _outputs(kind, parts: dict) -> list:
    """The components of a frame NamedTuple's fields, in its order."""
    return [parts[name] for name in kind._fields]


def _run_outputs(shown: RunView, charts: RunCharts, trace) -> list:
    parts = {"error": shown.error, "canvas": shown.canvas, "step": shown.step, "stats": shown.stats,
             "edit_log": charts.edit_log, "text": shown.text, "note": shown.note, "heatmap": charts.heatmap,
             "patch": shown.patch, "replay": shown.replay, "trace": trace} | dict(zip(CHARTS, charts.charts))
    return _outputs(RunFrame, parts)


def _wire_run(models: Models, ctrl: Controls, shown: RunView, charts: RunCharts, trace,
              examples: gr.Dataset) -> None:
    named = Inputs(**{name: getattr(ctrl, name) for name in RUN_INPUTS})

    def slot(data: dict) -> int:
        values = named.values(data)
        return gpu_seconds(values["gen_length"], values["block_length"], values["max_post_steps"])

    @on_gpu(seconds=slot)
    def run(data: dict):
        yield from generate_ui(models, **named.values(data))

    outputs, teach = _run_outputs(shown, charts, trace), [trace, ctrl.teach, ctrl.ghost]
    replay_out = [shown.canvas, shown.step, shown.timer]
    for start in (ctrl.generate.click, examples.click):  # a replay in progress stops when a run starts
        start(player.pause, None, shown.timer, **PRIVATE, **REPLAY)
    event = ctrl.generate.click(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    event.then(replay.teach, teach, replay_out, **PRIVATE, **REPLAY)
    picked = examples.click(refusing(controls.example_values), [examples], _named(ctrl, controls.EXAMPLE_SETS),
                            **PRIVATE, **REPLAY)
    example = picked.then(lambda path, mode: controls.apply_mode(models.checked_path(path), mode, with_block=False),
                          [ctrl.model, ctrl.mode], _named(ctrl, PRESET_OUTPUTS), **PRIVATE, **REPLAY)
    example_run = example.then(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    example_run.then(replay.teach, teach, replay_out, **PRIVATE, **REPLAY)
    poked = _wire_poke(models, ctrl, shown, outputs, trace)
    ctrl.stop.click(None, None, None, cancels=[event, example_run, poked]).then(
        stopped_ui, [trace, ctrl.ghost], outputs, **PRIVATE, **REPLAY)


def _wire_poke(models: Models, ctrl: Controls, shown: RunView, outputs: list, trace):
    """poke and re-run: this session's run decoded again with the tapped token changed (ui/playground/poke.py);
    returns the event (Stop cancels it)."""
    def slot(old, *_):
        return gpu_seconds(old.gen_length, old.block_length) if old is not None else gpu_seconds(None, None)

    @on_gpu(seconds=slot)
    def run(old, model, step, pos, how, token, ghost):
        yield from poke.poke_ui(models, old, model, step, pos, how, token, ghost)

    inputs = [trace, ctrl.model, shown.step, shown.poke.pos, shown.poke.how, shown.poke.token, ctrl.ghost]
    shown.poke.run.click(player.pause, None, shown.timer, **PRIVATE, **REPLAY)  # a replay in progress stops
    # no slow replay after it: the canvas stays at the end, where the poke's outcome shows (a refused poke
    # leaves the run as it was)
    return shown.poke.run.click(run, inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)


def _wire_replay(ctrl: Controls, shown: RunView, charts: RunCharts, trace) -> None:
    # a finished run's steps are drawn by the browser as the scrubber moves (ui/render/live.py scrubber_script);
    # the server hears of it once the hand lets go (a live run's step is drawn then; a replay stops)
    at_step, playing = [trace, shown.step, ctrl.ghost], [shown.canvas, shown.step, shown.timer]
    # scrub, pause and next edit stop a replay; play is sent once their answers have landed (ui/player.py `stops`)
    player.stops(shown.step.release, replay.scrub, at_step, [shown.canvas, shown.timer], trigger_mode="always_last",
                 **PRIVATE, **REPLAY)
    ctrl.ghost.change(replay.show_step, at_step, [shown.canvas, shown.replay], **PRIVATE, **REPLAY)
    player.starts(shown.play.click, replay.start_play, [*at_step, shown.speed], playing, **PRIVATE, **REPLAY)
    player.stops(shown.pause.click, player.pause, None, shown.timer, pause=True, **PRIVATE, **REPLAY)
    player.ticks(shown.timer, replay.tick, at_step, playing, **PRIVATE, **REPLAY)
    player.stops(shown.next_edit.click, replay.jump_to_edit, at_step, playing, **PRIVATE, **REPLAY)
    charts.export.click(replay.export_files, [trace], charts.files, **PRIVATE, **REPLAY)


def _wire_compare_choice(ctrl: Controls, pair_view: CompareView) -> None:
    """Two models: the second model's selector shows and the Compare button says what it runs."""
    pair_view.versus.change(refusing(view.compare_choice), pair_view.versus, [ctrl.compare, pair_view.other],
                            **PRIVATE, **REPLAY)


def _wire_compare(models: Models, ctrl: Controls, pair_view: CompareView, error, pair) -> None:
    named = Inputs(model_path=ctrl.model, prompt=ctrl.prompt, gen_length=ctrl.gen_length, mbe=ctrl.mbe,
                   mode=ctrl.mode, versus=pair_view.versus, other=pair_view.other)

    @on_gpu(seconds=lambda data: gpu_seconds(named.values(data)["gen_length"], None, runs=2))
    def run(data: dict):
        yield from compare.compare_ui(models, **named.values(data))

    sides = ("canvas_s", "canvas_q", "stats_s", "stats_q", "step", "table", "diff", "verdict", "patch", "replay")
    parts = {"error": error, "pair": pair} | {name: getattr(pair_view, name) for name in sides}
    outputs = _outputs(compare.CompareFrame, parts | dict(zip(CHARTS, pair_view.charts)))
    _wire_compare_choice(ctrl, pair_view)
    ctrl.compare.click(None, js=SHOW_COMPARE)  # the comparison sits below the run: bring it into view
    ctrl.compare.click(run, named.inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    # a finished pair's steps are drawn by the browser as the scrubber moves (ui/render/live.py), a live pair's
    # by the server once the hand lets go
    pair_view.step.release(compare.compare_step, [pair, pair_view.step], [pair_view.canvas_s, pair_view.canvas_q],
                           trigger_mode="always_last", **PRIVATE, **REPLAY)


def wire_api(models: Models, api_in: ApiInputs, trace) -> None:
    """/generate, /compare and /trace: inputs in the contract's order, their names the functions' own."""
    # the defaults are the API page's (a caller may leave them out by name): null keeps the mode's value
    @on_gpu(seconds=lambda _p, _mode, _tm, _te, _mbe, block, gen, *_: gpu_seconds(gen, block))
    def generate(prompt, mode="S", tau_mask=None, tau_edit=None, mbe=False, block_length=None, gen_length=32,
                 model=None, pokes=None, request: gr.Request = None):
        ONE_SHOTS.add(request)  # a plain HTTP call's session goes once newer ones come (ui/sessions.py)
        yield from api.generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length,
                                    model, pokes)

    @on_gpu(seconds=lambda _p, block, gen, *_: gpu_seconds(gen, block, runs=2))
    def compare_pair(prompt, block_length=None, gen_length=32, model=None, request: gr.Request = None):
        ONE_SHOTS.add(request)
        return api.compare_api(models, prompt, block_length, gen_length, model)

    raw = {"preprocess": False}  # the client's values reach the checks as sent: nothing is coerced
    inputs = _named(api_in, ("prompt", "mode", "tau_mask", "tau_edit", "mbe", "block_length", "gen_length", "model",
                             "pokes"))
    api_in.generate.click(generate, inputs, [api_in.text, api_in.stats, trace], api_name="generate", **raw, **DECODE)
    api_in.compare.click(compare_pair, _named(api_in, ("prompt", "block_length", "gen_length", "model")),
                         api_in.result, api_name="compare", **raw, **DECODE)
    def last_trace(trace, request: gr.Request = None):
        """The full trace of this session's last run (see docs/trace-schema.md)."""
        ONE_SHOTS.add(request)
        return api.trace_api(trace)

    api_in.get_trace.click(last_trace, [trace], api_in.trace, api_name="trace", concurrency_limit=8)


def build(models: Models, trace, pair) -> Controls:
    """The Playground tab (call inside its gr.Tab); returns its controls (the explorer sets some of them)."""
    knows = gr.Markdown(controls.knows_note(models.default), elem_id="model-knows")
    bar = controls.prompt_bar()
    slot = gr.Column(elem_id="examples-slot")  # filled below, once the inputs the examples set exist
    shown, settings = view.run_view_area(models)
    ctrl = Controls.of(knows, bar, settings)
    with slot:
        examples = controls.example_list(ctrl)
    pair_view = view.compare_view(models)
    charts = view.charts_view()
    _wire_controls(models, ctrl)
    _wire_run(models, ctrl, shown, charts, trace, examples)
    _wire_replay(ctrl, shown, charts, trace)
    _wire_compare(models, ctrl, pair_view, shown.error, pair)
    return ctrl
