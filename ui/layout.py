"""The playground's Blocks: components (with the stable elem_ids of docs UI_CONTRACT) and their events.

`build_demo(models)` is the only place that wires ui/ renderers and handlers to Gradio components. Runs
that use the model share one concurrency group of size 1, so runs never interleave; replays re-render
the per-session Trace held in gr.State.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from llada.presets import load_presets, merged

from . import canvas, handlers, learn, tables
from .models import Models, gpu_seconds, on_gpu
from .runs import LIMITS, MODES, preset_values

ASSETS = Path(__file__).resolve().parents[1] / "assets"
DECODE = {"concurrency_id": "decode", "concurrency_limit": 1}
REPLAY = {"concurrency_limit": 8, "show_progress": "hidden"}
SPEEDS = ["0.5", "1", "2", "4"]
CHARTS = ("chart_tps", "chart_tpf", "chart_steps")  # the frames' names of the three charts, in layout order


def examples(path: Path = ASSETS / "examples.json") -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def presets_of(model_path: str | None) -> dict[str, dict]:
    return load_presets(Path(model_path)) if model_path else merged({})


def presets_note(model_path: str | None) -> str:
    rows = []
    for mode in ("S", "Q", "M2T only"):
        v = preset_values(presets_of(model_path), mode)
        tau_edit = "off" if v["editing_threshold"] is None else f"{v['editing_threshold']:.2f}"
        rows.append(f"**{mode}** τ_mask {v['threshold']:.2f} · τ_edit {tau_edit} · post {v['max_post_steps']}")
    return "Presets of this model: " + " | ".join(rows)


def apply_mode(model_path, mode) -> tuple:
    """Slider values of a preset (tau_mask, edit_on, tau_edit, max_post_steps); lengths stay as set."""
    if mode == "Custom":
        return (gr.skip(),) * 4
    v = preset_values(presets_of(model_path), mode)
    off = v["editing_threshold"] is None
    return v["threshold"], not off, gr.skip() if off else v["editing_threshold"], v["max_post_steps"]


# ---- components ---------------------------------------------------------------------------------------

def _controls(models: Models) -> SimpleNamespace:
    c = SimpleNamespace()
    c.model = gr.Dropdown(models.choices(), value=models.default, label="Model", elem_id="model",
                          info=models.note() or None)  # why a candidate is not offered
    c.prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt", placeholder="def fibonacci(n):")
    c.examples = gr.Examples([[e["prompt"]] for e in examples()], inputs=[c.prompt], label="Examples")
    c.mode = gr.Radio(list(MODES), value="S", label="Mode", elem_id="mode")
    c.presets = gr.Markdown(presets_note(models.default), elem_id="presets")
    s = preset_values(presets_of(models.default), "S")
    c.tau_mask = gr.Slider(0, 1, value=s["threshold"], step=0.01, label="τ_mask: draft a mask when p > τ_mask (M2T)",
                           elem_id="tau-mask")
    c.edit_on = gr.Checkbox(value=True, label="editing (T2T) on", elem_id="edit-on")
    c.tau_edit = gr.Slider(0, 1, value=s["editing_threshold"] or 0.0, step=0.01,
                           label="τ_edit: edit a token when p > τ_edit (T2T)", elem_id="tau-edit")
    with gr.Row():
        c.mbe = gr.Checkbox(value=False, label="Multi-Block Editing (MBE)", elem_id="mbe")
        c.mbe_window = gr.Slider(*LIMITS["mbe_window"], value=1, step=1, label="MBE window (blocks)",
                                 elem_id="mbe-window")
    c.block_length = gr.Slider(*LIMITS["block_length"], value=s["block_length"], step=4, label="block length",
                               elem_id="block-length")
    c.gen_length = gr.Slider(*LIMITS["gen_length"], value=128, step=8, label="generation length",
                             elem_id="gen-length")
    with gr.Accordion("More settings", open=False):
        c.max_post = gr.Slider(*LIMITS["max_post_steps"], value=s["max_post_steps"], step=1,
                               label="max post steps (mask-free steps per block)", elem_id="max-post-steps")
        c.temperature = gr.Slider(*LIMITS["temperature"], value=0.0, step=0.05, label="temperature (0 = greedy)",
                                  elem_id="temperature")
        c.seed = gr.Number(value=0, precision=0, label="seed", elem_id="seed")
    c.ghost = gr.Checkbox(value=False, label="ghost: show the model's current guess inside masks", elem_id="ghost")
    with gr.Row():
        c.generate = gr.Button("Generate", variant="primary", elem_id="generate")
        c.stop = gr.Button("Stop", elem_id="stop")
    return c


def _run_view() -> SimpleNamespace:
    v = SimpleNamespace()
    v.error = gr.HTML("", elem_id="error", js_on_load=None)
    v.stats = gr.Markdown(tables.stats_line(None), elem_id="stats")
    v.canvas = gr.HTML(canvas.render(None, 0), elem_id="canvas-box", js_on_load=None)
    with gr.Row(equal_height=True):
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (replay: the canvas after this step)", elem_id="step",
                           scale=4)
        v.speed = gr.Dropdown(SPEEDS, value="1", label="speed", elem_id="speed", scale=1, min_width=80)
    with gr.Row():
        v.play = gr.Button("▶ play", elem_id="play", size="sm")
        v.pause = gr.Button("❚❚ pause", elem_id="pause", size="sm")
        v.next_edit = gr.Button("next edit ⇥", elem_id="next-edit", size="sm")
    v.timer = gr.Timer(0.3, active=False)
    v.text = gr.Textbox(label="Output", lines=5, elem_id="output", interactive=False, buttons=["copy"])
    with gr.Row():
        v.charts = [gr.Plot(elem_id=i, show_label=False) for i in ("chart-tps", "chart-tpf", "chart-steps")]
    v.edit_log = gr.Dataframe(tables.edit_log(None), label="Edit log: every T2T and MBE edit", elem_id="edit-log",
                              interactive=False, max_height=300)
    with gr.Row():
        v.export = gr.Button("Export trace (JSON) and HTML replay", elem_id="export", size="sm")
        v.files = gr.File(file_count="multiple", label="Exports", elem_id="export-files")
    return v


def _compare_view() -> SimpleNamespace:
    v = SimpleNamespace()
    with gr.Column(elem_id="compare"):
        gr.Markdown("### S vs Q on the same prompt\nBoth runs advance one forward each in turn, on one timeline; "
                    "the step slider shows both canvases after that step.")
        v.run = gr.Button("Compare S vs Q on this prompt", elem_id="run-compare")
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (both runs)", elem_id="compare-step")
        with gr.Row():
            v.canvas_s = gr.HTML(canvas.render(None, 0, elem_id="canvas-s"), elem_id="canvas-s-box", js_on_load=None)
            v.canvas_q = gr.HTML(canvas.render(None, 0, elem_id="canvas-q"), elem_id="canvas-q-box", js_on_load=None)
        v.table = gr.Dataframe(tables.stats_table([]), label="S vs Q", elem_id="compare-table", interactive=False)
        v.diff = gr.HTML("", elem_id="diff", js_on_load=None)
        with gr.Row():
            v.charts = [gr.Plot(elem_id=f"{i}-compare", show_label=False)
                        for i in ("chart-tps", "chart-tpf", "chart-steps")]
    return v


def _learn_view(recordings: dict) -> SimpleNamespace:
    v = SimpleNamespace()
    first = next(iter(recordings.values()), None)
    gr.Markdown(learn.learn_text())
    v.note = gr.HTML(learn.recording_note(first), js_on_load=None)
    v.run = gr.Radio(list(recordings), value=next(iter(recordings), None), label="Recorded run", elem_id="learn-run")
    v.step = gr.Slider(0, max(first.steps, 1) if first else 1, value=first.steps if first else 0, step=1,
                       label="step", elem_id="learn-step")
    v.next_edit = gr.Button("next edit ⇥", size="sm")
    v.canvas = gr.HTML(canvas.render(first, first.steps if first else 0, elem_id="canvas-learn"), js_on_load=None)
    v.stats = gr.Markdown(tables.stats_line(first) if first else "")
    return v


def _api_inputs() -> SimpleNamespace:
    """Hidden components that give the API endpoints the contract's exact inputs and outputs."""
    a = SimpleNamespace()
    with gr.Column(visible=False):
        a.prompt, a.mode = gr.Textbox(label="prompt"), gr.Textbox(label="mode")
        a.tau_mask = gr.Number(None, label="tau_mask")  # null: the mode's value
        a.tau_edit = gr.Number(None, label="tau_edit")
        a.mbe = gr.Checkbox(label="mbe")
        a.block_length, a.gen_length = gr.Number(label="block_length"), gr.Number(label="gen_length")
        a.model = gr.Textbox("", label="model")  # an offered model's name; empty: the default
        a.text, a.stats, a.result, a.trace = gr.Textbox(), gr.JSON(), gr.JSON(), gr.JSON()
        a.generate, a.compare, a.get_trace = gr.Button(), gr.Button(), gr.Button()
    return a


# ---- events -------------------------------------------------------------------------------------------

def _wire_controls(c: SimpleNamespace) -> None:
    preset_outputs = [c.tau_mask, c.edit_on, c.tau_edit, c.max_post]
    c.mode.input(apply_mode, [c.model, c.mode], preset_outputs, api_visibility="private", **REPLAY)
    for slider in (c.tau_mask, c.tau_edit, c.edit_on):
        slider.input(lambda: "Custom", None, c.mode, api_visibility="private", **REPLAY)
    c.model.change(lambda path, mode: (presets_note(path), *apply_mode(path, mode)), [c.model, c.mode],
                   [c.presets, *preset_outputs], api_visibility="private", **REPLAY)


def _wire_run(models: Models, c: SimpleNamespace, v: SimpleNamespace, trace) -> None:
    @on_gpu(seconds=lambda _m, _p, _mode, _t, _e, _te, _mbe, _w, block, gen, post, *_: gpu_seconds(gen, block, post))
    def run(*args):
        yield from handlers.generate_ui(models, *args)

    inputs = [c.model, c.prompt, c.mode, c.tau_mask, c.edit_on, c.tau_edit, c.mbe, c.mbe_window, c.block_length,
              c.gen_length, c.max_post, c.temperature, c.seed, c.ghost]
    parts = {"error": v.error, "canvas": v.canvas, "step": v.step, "stats": v.stats, "edit_log": v.edit_log,
             "text": v.text, "trace": trace} | dict(zip(CHARTS, v.charts))
    outputs = [parts[name] for name in handlers.RunFrame._fields]
    event = c.generate.click(run, inputs, outputs, api_visibility="private", show_progress="minimal", **DECODE)
    c.stop.click(None, None, None, cancels=[event])


def _wire_replay(c: SimpleNamespace, v: SimpleNamespace, trace) -> None:
    v.step.input(handlers.show_step, [trace, v.step, c.ghost], v.canvas, trigger_mode="always_last",
                 api_visibility="private", **REPLAY)
    c.ghost.change(handlers.show_step, [trace, v.step, c.ghost], v.canvas, api_visibility="private", **REPLAY)
    v.play.click(handlers.start_play, [trace, v.step, c.ghost, v.speed], [v.canvas, v.step, v.timer],
                 api_visibility="private", **REPLAY)
    v.pause.click(handlers.pause, None, v.timer, api_visibility="private", **REPLAY)
    v.timer.tick(handlers.tick, [trace, v.step, c.ghost], [v.canvas, v.step, v.timer], api_visibility="private",
                 **REPLAY)
    v.next_edit.click(handlers.next_edit, [trace, v.step, c.ghost], [v.canvas, v.step], api_visibility="private",
                      **REPLAY)
    v.export.click(handlers.export_files, [trace], v.files, api_visibility="private", **REPLAY)


def _wire_compare(models: Models, c: SimpleNamespace, v: SimpleNamespace, error, pair) -> None:
    @on_gpu(seconds=lambda _m, _p, block, gen: gpu_seconds(gen, block, runs=2))
    def run(*args):
        yield from handlers.compare_ui(models, *args)

    parts = {"error": error, "canvas_s": v.canvas_s, "canvas_q": v.canvas_q, "step": v.step, "table": v.table,
             "diff": v.diff, "pair": pair} | dict(zip(CHARTS, v.charts))
    outputs = [parts[name] for name in handlers.CompareFrame._fields]
    v.run.click(run, [c.model, c.prompt, c.block_length, c.gen_length], outputs, api_visibility="private",
                show_progress="minimal", **DECODE)
    v.step.input(handlers.compare_step, [pair, v.step], [v.canvas_s, v.canvas_q], trigger_mode="always_last",
                 api_visibility="private", **REPLAY)


def _wire_learn(recordings: dict, v: SimpleNamespace) -> None:
    def show(label, step):
        return canvas.render(recordings.get(label), int(step or 0), elem_id="canvas-learn")

    def pick(label):
        t = recordings.get(label)
        return (learn.recording_note(t), gr.update(maximum=max(t.steps, 1) if t else 1, value=t.steps if t else 0),
                show(label, t.steps if t else 0), tables.stats_line(t) if t else "")

    def next_edit(label, step):
        return handlers.next_edit(recordings.get(label), step, False, elem_id="canvas-learn")

    v.step.input(show, [v.run, v.step], v.canvas, trigger_mode="always_last", api_visibility="private", **REPLAY)
    v.run.change(pick, [v.run], [v.note, v.step, v.canvas, v.stats], api_visibility="private", **REPLAY)
    v.next_edit.click(next_edit, [v.run, v.step], [v.canvas, v.step], api_visibility="private", **REPLAY)


def _wire_api(models: Models, a: SimpleNamespace, trace) -> None:
    @on_gpu(seconds=lambda _p, _mode, _tm, _te, _mbe, block, gen, *_: gpu_seconds(gen, block))
    def generate(prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length, model=""):
        yield from handlers.generate_api(models, prompt, mode, tau_mask, tau_edit, mbe, block_length, gen_length,
                                         model)

    @on_gpu(seconds=lambda prompt, block, gen, *_: gpu_seconds(gen, block, runs=2))
    def compare(prompt, block_length, gen_length, model=""):
        return handlers.compare_api(models, prompt, block_length, gen_length, model)

    inputs = [a.prompt, a.mode, a.tau_mask, a.tau_edit, a.mbe, a.block_length, a.gen_length, a.model]
    a.generate.click(generate, inputs, [a.text, a.stats, trace], api_name="generate", **DECODE)
    a.compare.click(compare, [a.prompt, a.block_length, a.gen_length, a.model], a.result, api_name="compare",
                    **DECODE)
    a.get_trace.click(handlers.trace_api, [trace], a.trace, api_name="trace", concurrency_limit=8)


def build_demo(models: Models, recordings: dict | None = None) -> gr.Blocks:
    """The playground for `models` (nothing is loaded until a run needs it)."""
    recordings = learn.load_recordings() if recordings is None else recordings
    with gr.Blocks(title="LLaDA2.1 playground: draft and edit") as demo:
        trace, pair = gr.State(None), gr.State(None)
        gr.Markdown("## LLaDA2.1 playground\nWatch a block-diffusion model **draft** masked tokens and **edit** "
                    "its own text, step by step.")
        with gr.Tabs():
            with gr.Tab("Playground", id="playground"):
                with gr.Row():
                    with gr.Column(scale=1, min_width=320):
                        c = _controls(models)
                    with gr.Column(scale=3):
                        v = _run_view()
                cmp = _compare_view()
            with gr.Tab("Learn", id="learn"):
                lv = _learn_view(recordings)
        a = _api_inputs()
        _wire_controls(c)
        _wire_run(models, c, v, trace)
        _wire_replay(c, v, trace)
        _wire_compare(models, c, cmp, v.error, pair)
        _wire_learn(recordings, lv)
        _wire_api(models, a, trace)
    return demo
