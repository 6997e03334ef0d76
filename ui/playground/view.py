"""The Playground tab's components: the run view, the charts and edit log, S vs Q, the API's inputs.

Components carry the stable elem_ids of docs UI_CONTRACT; the controls (prompt bar, mode row, settings
column) are in ui/playground/controls.py, the events in ui/playground/wire.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from ..render import canvas, tables
from ..render.live import FOLLOW_JS, PATCHER_JS, canvas_script, scrubber_script
from . import controls
from .replay import SPEEDS

COMPARE_HINT = "Press Compare S vs Q (beside Generate): the %s run of the prompt is drawn here, step by step."


def _canvas_box(html: str, elem_id: str) -> gr.HTML:
    """A canvas component: whole renders replace it; its script keeps the active block in view."""
    return gr.HTML(html, elem_id=elem_id, js_on_load=canvas_script() + FOLLOW_JS)


def _patcher(elem_id: str, script: str = PATCHER_JS) -> gr.HTML:
    """Draws nothing: applies the live canvas patches it receives (ui/render/live.py), or with a
    `scrubber_script` keeps the finished run's replay for a step scrubber."""
    return gr.HTML(None, html_template="", js_on_load=canvas_script() + script, elem_id=elem_id,
                   elem_classes=["patcher"], apply_default_css=False, container=False, padding=False)


def _run_view() -> SimpleNamespace:
    v = SimpleNamespace()
    v.stats = gr.Markdown(tables.stats_line(None), elem_id="stats")
    v.canvas = _canvas_box(canvas.render(None, 0), "canvas-box")
    v.patch = _patcher("canvas-patch")
    v.replay = _patcher("canvas-replay", scrubber_script("step", "canvas", pause="pause"))
    with gr.Row(equal_height=True):
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (replay: the canvas after this step)", elem_id="step",
                           scale=4)
        v.speed = gr.Dropdown(SPEEDS, value="1", label="speed", elem_id="speed", scale=1, min_width=80)
    with gr.Row():
        v.play = gr.Button("▶ play", elem_id="play", size="sm")
        v.pause = gr.Button("❚❚ pause", elem_id="pause", size="sm")
        v.next_edit = gr.Button("next edit ⇥", elem_id="next-edit", size="sm")
    v.timer = gr.Timer(0.3, active=False)
    v.text = gr.Textbox(label="Output", lines=4, elem_id="output", interactive=False, buttons=["copy"],
                        placeholder="The decoded text appears here as the run goes (the prompt excluded).")
    v.note = gr.Markdown("", elem_id="output-note")
    return v


def charts_view(v: SimpleNamespace) -> None:
    """The run's charts, confidence heatmap, edit log and export (below the comparison)."""
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


def compare_view() -> SimpleNamespace:
    v = SimpleNamespace()
    with gr.Column(elem_id="compare"):
        gr.Markdown("### S vs Q on the same prompt\n**Compare S vs Q** (beside Generate) runs both modes on the "
                    "prompt, each with **its own preset, block length included** (the sliders are not used), "
                    "with Multi-Block Editing as the **MBE** box says; they share each forward, on one timeline.")
        v.verdict = gr.Markdown("", elem_id="compare-verdict")
        v.step = gr.Slider(0, 1, value=0, step=1, label="step (both runs)", elem_id="compare-step")
        with gr.Row(elem_id="compare-canvases"):
            with gr.Column(min_width=320):
                v.canvas_s = _canvas_box(canvas.render(None, 0, elem_id="canvas-s", hint=COMPARE_HINT % "S"),
                                         "canvas-s-box")
            with gr.Column(min_width=320):
                v.canvas_q = _canvas_box(canvas.render(None, 0, elem_id="canvas-q", hint=COMPARE_HINT % "Q"),
                                         "canvas-q-box")
        v.patch = _patcher("canvas-patch-compare")
        v.replay = _patcher("canvas-replay-compare", scrubber_script("compare-step", "compare"))
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


def api_inputs() -> SimpleNamespace:
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


def run_view_area(c: SimpleNamespace, models) -> SimpleNamespace:
    """#error, the run view with the settings column beside it; the settings go into `c`."""
    error = gr.HTML("", elem_id="error")
    with gr.Row():
        with gr.Column(scale=3, min_width=320):
            v = _run_view()
        with gr.Column(scale=1, min_width=280, elem_id="settings"):
            controls.settings(c, models)
    v.error = error
    return v
