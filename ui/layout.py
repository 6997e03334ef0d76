"""The playground's Blocks: components (with the stable elem_ids of docs UI_CONTRACT) and their events.

`build_demo(models)` is the only place that wires ui/ renderers and handlers to Gradio components. The
first screen holds what a first visit needs: the prompt with Generate, the mode row, examples that run
when clicked, and the canvas right below, the settings beside it (below it on a phone); the Learn and
Score | TPF tabs follow. Runs that use
the model share the decode concurrency group (ui/events.py); replays re-render the per-session Trace
held in gr.State, and after a run the canvas replays itself at a teaching pace (when asked).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from . import api, canvas, compare, controls, explorer, handlers, learn, tables
from .events import DECODE, PRIVATE, REPLAY
from .live import FOLLOW_JS, PATCHER_JS, canvas_script
from .models import Models, gpu_seconds, on_gpu

ASSETS = Path(__file__).resolve().parents[1] / "assets"
LOOK = {"css_paths": [ASSETS / "style.css"], "theme": "soft"}  # launch(**LOOK): Gradio 6 dresses the page at launch
STATE_TTL_S = 3600  # a tab keeps its last run and comparison this long (and drops them when it closes)
SPEEDS = ["0.5", "1", "2", "4"]
CHARTS = ("chart_tps", "chart_tpf", "chart_steps")  # the frames' names of the three charts, in layout order
HEADER = ("## LLaDA2.1 playground\nWatch a block-diffusion language model **draft** masked tokens in parallel "
          "and **edit** its own text, step by step. New here? Click an example, or open **Learn**.")


# ---- components ---------------------------------------------------------------------------------------

def _canvas_box(html: str, elem_id: str) -> gr.HTML:
    """A canvas component: whole renders replace it; its script keeps the active block in view."""
    return gr.HTML(html, elem_id=elem_id, js_on_load=canvas_script() + FOLLOW_JS)


def _patcher(elem_id: str) -> gr.HTML:
    """Draws nothing: applies the live canvas patches it receives (ui/live.py)."""
    return gr.HTML(None, html_template="", js_on_load=canvas_script() + PATCHER_JS, elem_id=elem_id,
                   elem_classes=["patcher"], apply_default_css=False, container=False, padding=False)


def _run_view() -> SimpleNamespace:
    v = SimpleNamespace()
    v.stats = gr.Markdown(tables.stats_line(None), elem_id="stats")
    v.canvas = _canvas_box(canvas.render(None, 0), "canvas-box")
    v.patch = _patcher("canvas-patch")
    with gr.Row(equal_height=True):
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (replay: the canvas after this step)", elem_id="step",
                           scale=4)
        v.speed = gr.Dropdown(SPEEDS, value="1", label="speed", elem_id="speed", scale=1, min_width=80)
    with gr.Row():
        v.play = gr.Button("▶ play", elem_id="play", size="sm")
        v.pause = gr.Button("❚❚ pause", elem_id="pause", size="sm")
        v.next_edit = gr.Button("next edit ⇥", elem_id="next-edit", size="sm")
    v.timer = gr.Timer(0.3, active=False)
    v.text = gr.Textbox(label="Output", lines=4, elem_id="output", interactive=False, buttons=["copy"])
    v.note = gr.Markdown("", elem_id="output-note")
    return v


def _charts_view(v: SimpleNamespace) -> None:
    with gr.Row():
        v.charts = [gr.Plot(elem_id=i, show_label=False, min_width=300) for i in ("chart-tps", "chart-tpf",
                                                                                  "chart-steps")]
    with gr.Accordion("Why was a token drafted or edited when it was? Confidence per position and step",
                      open=True, elem_id="heatmap-box"):
        v.heatmap = gr.Plot(elem_id="chart-confidence", show_label=False)
    v.edit_log = gr.Dataframe(tables.edit_log(None), label="Edit log: every T2T and MBE edit", elem_id="edit-log",
                              interactive=False, max_height=300)
    with gr.Row():
        v.export = gr.Button("Export trace (JSON) and HTML replay", elem_id="export", size="sm")
        v.files = gr.File(file_count="multiple", label="Exports", elem_id="export-files")


def _compare_view() -> SimpleNamespace:
    v = SimpleNamespace()
    with gr.Column(elem_id="compare"):
        gr.Markdown("### S vs Q on the same prompt\nEach mode runs with its own preset (its block length "
                    "included); both advance one forward each in turn, on one timeline.")
        v.run = gr.Button("Compare S vs Q on this prompt", elem_id="run-compare")
        v.verdict = gr.Markdown("", elem_id="compare-verdict")
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (both runs)", elem_id="compare-step")
        with gr.Row(elem_id="compare-canvases"):
            with gr.Column(min_width=320):
                v.canvas_s = _canvas_box(canvas.render(None, 0, elem_id="canvas-s"), "canvas-s-box")
            with gr.Column(min_width=320):
                v.canvas_q = _canvas_box(canvas.render(None, 0, elem_id="canvas-q"), "canvas-q-box")
        v.patch = _patcher("canvas-patch-compare")
        v.table = gr.Dataframe(tables.stats_table([]), label="S vs Q", elem_id="compare-table", interactive=False)
        v.diff = gr.HTML("", elem_id="diff")
        with gr.Row():
            v.charts = [gr.Plot(elem_id=f"{i}-compare", show_label=False, min_width=300)
                        for i in ("chart-tps", "chart-tpf", "chart-steps")]
    return v


def _api_input(component, example):
    """A hidden API input whose value is also the example the API page shows (one that runs when copied)."""
    component.example_inputs = lambda: example  # the API page asks each input component for its example
    return component


def _api_inputs() -> SimpleNamespace:
    """Hidden components that give the API endpoints the contract's inputs, with examples that work."""
    a = SimpleNamespace()
    with gr.Column(visible=False):
        a.prompt = _api_input(gr.Textbox("176+771=", label="prompt"), "176+771=")
        a.mode = _api_input(gr.Textbox("S", label="mode"), "S")
        a.tau_mask = _api_input(gr.Number(None, label="tau_mask"), None)  # null: the mode's value
        a.tau_edit = _api_input(gr.Number(None, label="tau_edit"), None)
        a.mbe = _api_input(gr.Checkbox(False, label="mbe"), False)
        a.block_length = _api_input(gr.Number(None, label="block_length"), None)
        a.gen_length = _api_input(gr.Number(32, label="gen_length"), 32)
        a.model = _api_input(gr.Textbox("", label="model"), "")  # an offered model's name; empty: the default
        a.text, a.stats, a.result, a.trace = gr.Textbox(), gr.JSON(), gr.JSON(), gr.JSON()
        a.generate, a.compare, a.get_trace = gr.Button(), gr.Button(), gr.Button()
    return a


# ---- events -------------------------------------------------------------------------------------------

def _preset_outputs(c: SimpleNamespace) -> list:
    return [c.tau_mask, c.edit_on, c.tau_edit, c.max_post, c.block_length]


def _wire_controls(c: SimpleNamespace) -> None:
    c.mode.input(controls.apply_mode, [c.model, c.mode], _preset_outputs(c), **PRIVATE, **REPLAY)
    for slider in (c.tau_mask, c.tau_edit, c.edit_on):
        slider.input(lambda: "Custom", None, c.mode, **PRIVATE, **REPLAY)
    c.model.change(lambda path, mode: (controls.presets_note(path), gr.update(maximum=controls.gen_limit(path)),
                                       *controls.apply_mode(path, mode)),
                   [c.model, c.mode], [c.presets, c.gen_length, *_preset_outputs(c)], **PRIVATE, **REPLAY)


def _run_outputs(v: SimpleNamespace, trace) -> list:
    parts = {"error": v.error, "canvas": v.canvas, "step": v.step, "stats": v.stats, "edit_log": v.edit_log,
             "text": v.text, "note": v.note, "heatmap": v.heatmap, "patch": v.patch,
             "trace": trace} | dict(zip(CHARTS, v.charts))
    return [parts[name] for name in handlers.RunFrame._fields]


def _wire_run(models: Models, c: SimpleNamespace, v: SimpleNamespace, trace, examples: gr.Examples) -> None:
    @on_gpu(seconds=lambda _m, _p, _mode, _t, _e, _te, _mbe, _w, block, gen, post, *_: gpu_seconds(gen, block, post))
    def run(*args):
        yield from handlers.generate_ui(models, *args)

    inputs = [c.model, c.prompt, c.mode, c.tau_mask, c.edit_on, c.tau_edit, c.mbe, c.mbe_window, c.block_length,
              c.gen_length, c.max_post, c.temperature, c.seed, c.ghost]
    outputs, teach = _run_outputs(v, trace), [trace, c.teach, c.ghost]
    replay_out = [v.canvas, v.step, v.timer]
    event = c.generate.click(run, inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    event.then(handlers.teach, teach, replay_out, **PRIVATE, **REPLAY)
    example = examples.load_input_event.then(lambda path, mode: controls.apply_mode(path, mode, with_block=False),
                                             [c.model, c.mode], _preset_outputs(c), **PRIVATE, **REPLAY)
    example_run = example.then(run, inputs, outputs, **PRIVATE, show_progress="minimal", **DECODE)
    example_run.then(handlers.teach, teach, replay_out, **PRIVATE, **REPLAY)
    c.stop.click(None, None, None, cancels=[event, example_run]).then(
        handlers.stopped_ui, [trace, c.ghost], outputs, **PRIVATE, **REPLAY)


def _wire_replay(c: SimpleNamespace, v: SimpleNamespace, trace) -> None:
    v.step.input(handlers.scrub, [trace, v.step, c.ghost], [v.canvas, v.timer], trigger_mode="always_last",
                 **PRIVATE, **REPLAY)
    c.ghost.change(handlers.show_step, [trace, v.step, c.ghost], v.canvas, **PRIVATE, **REPLAY)
    v.play.click(handlers.start_play, [trace, v.step, c.ghost, v.speed], [v.canvas, v.step, v.timer], **PRIVATE,
                 **REPLAY)
    v.pause.click(handlers.pause, None, v.timer, **PRIVATE, **REPLAY)
    v.timer.tick(handlers.tick, [trace, v.step, c.ghost], [v.canvas, v.step, v.timer], **PRIVATE, **REPLAY)
    v.next_edit.click(handlers.jump_to_edit, [trace, v.step, c.ghost], [v.canvas, v.step, v.timer], **PRIVATE,
                      **REPLAY)
    v.export.click(handlers.export_files, [trace], v.files, **PRIVATE, **REPLAY)


def _wire_compare(models: Models, c: SimpleNamespace, v: SimpleNamespace, error, pair) -> None:
    @on_gpu(seconds=lambda _m, _p, gen: gpu_seconds(gen, None, runs=2))
    def run(*args):
        yield from compare.compare_ui(models, *args)

    parts = {"error": error, "canvas_s": v.canvas_s, "canvas_q": v.canvas_q, "step": v.step, "table": v.table,
             "diff": v.diff, "verdict": v.verdict, "patch": v.patch, "pair": pair} | dict(zip(CHARTS, v.charts))
    outputs = [parts[name] for name in compare.CompareFrame._fields]
    v.run.click(run, [c.model, c.prompt, c.gen_length], outputs, **PRIVATE, show_progress="minimal", **DECODE)
    v.step.input(compare.compare_step, [pair, v.step], [v.canvas_s, v.canvas_q], trigger_mode="always_last",
                 **PRIVATE, **REPLAY)


def _wire_api(models: Models, a: SimpleNamespace, trace) -> None:
    @on_gpu(seconds=lambda _p, _mode, _tm, _te, _mbe, block, gen, *_: gpu_seconds(gen, block))
    def generate(prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model=None):
        yield from api.generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length,
                                    model)

    @on_gpu(seconds=lambda _p, block, gen, *_: gpu_seconds(gen, block, runs=2))
    def compare_pair(prompt, block_length, gen_length, model=None):
        return api.compare_api(models, prompt, block_length, gen_length, model)

    raw = {"preprocess": False}  # the client's values reach the checks as sent: nothing is coerced
    inputs = [a.prompt, a.mode, a.tau_mask, a.tau_edit, a.mbe, a.block_length, a.gen_length, a.model]
    a.generate.click(generate, inputs, [a.text, a.stats, trace], api_name="generate", **raw, **DECODE)
    a.compare.click(compare_pair, [a.prompt, a.block_length, a.gen_length, a.model], a.result, api_name="compare",
                    **raw, **DECODE)
    a.get_trace.click(api.trace_api, [trace], a.trace, api_name="trace", concurrency_limit=8)


def _page_script() -> None:
    """Keyboard (Ctrl/Cmd+Enter) and out-of-range notes for typed slider values (assets/page.js)."""
    gr.HTML(None, html_template="", js_on_load=(ASSETS / "page.js").read_text(encoding="utf-8"),
            elem_classes=["patcher"], apply_default_css=False, container=False, padding=False)


def _playground(models: Models, trace, pair) -> SimpleNamespace:
    """The Playground tab; returns its controls (the explorer sets some of them)."""
    c = SimpleNamespace()
    controls.prompt_bar(c)
    slot = gr.Column(elem_id="examples-slot")  # filled below, once the inputs the examples set exist
    v = _run_view_area(c, models)
    with slot:
        examples = controls.example_list(c)
    cmp = _compare_view()
    _wire_controls(c)
    _wire_run(models, c, v, trace, examples)
    _wire_replay(c, v, trace)
    _wire_compare(models, c, cmp, v.error, pair)
    return c


def _run_view_area(c: SimpleNamespace, models: Models) -> SimpleNamespace:
    error = gr.HTML("", elem_id="error")
    with gr.Row():
        with gr.Column(scale=3, min_width=320):
            v = _run_view()
        with gr.Column(scale=1, min_width=280, elem_id="settings"):
            controls.settings(c, models)
    _charts_view(v)
    v.error = error
    return v


def build_demo(models: Models, recordings: dict | None = None) -> gr.Blocks:
    """The playground for `models` (nothing is loaded until a run needs it)."""
    recordings = learn.load_recordings() if recordings is None else recordings
    with gr.Blocks(title="LLaDA2.1 playground: draft and edit", delete_cache=(900, 3600)) as demo:
        trace, pair = gr.State(None, time_to_live=STATE_TTL_S), gr.State(None, time_to_live=STATE_TTL_S)
        gr.Markdown(HEADER, elem_id="header")
        _page_script()
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Playground", id="playground"):
                c = _playground(models, trace, pair)
            with gr.Tab("Learn", id="learn"):
                learn_parts = learn.build_view(recordings)
            with gr.Tab("Score | TPF", id="explorer") as explorer_tab:
                explorer_parts = explorer.build_view(models)
        learn.wire(recordings, learn_parts)
        playground = SimpleNamespace(mode=c.mode, tau_mask=c.tau_mask, edit_on=c.edit_on, tau_edit=c.tau_edit,
                                     mbe=c.mbe, block_length=c.block_length, model=c.model)
        explorer.wire(models, explorer_parts, playground, tabs, tab=explorer_tab)
        _wire_api(models, _api_inputs(), trace)
    return demo
