"""The Playground tab's components: the run view, the charts and edit log, the comparison, the API's inputs.

Components carry the stable elem_ids of docs UI_CONTRACT; the controls (prompt bar, mode row, settings
column) are in ui/playground/controls.py, the events in ui/playground/wire.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ..render import canvas, tables
from ..render.live import FOLLOW_JS, PATCHER_JS, canvas_script, scrubber_script
from ..models import MODEL22
from ..settings import check_choice
from . import compare, controls
from .poke import PokeView, poke_view
from .replay import SPEEDS

COMPARE_HINT = ("Press Compare S vs Q (beside Generate; or pick two models below): %s of the prompt is drawn here, "
                "step by step.")
EDIT_LOG_LABEL = "Edit log: every T2T and MBE edit, LLaDA2.2's deletes and inserts, and your pokes"


def _canvas_box(html: str, elem_id: str) -> gr.HTML:
    """A canvas component: whole renders replace it; its script keeps the active block in view."""
    return gr.HTML(html, elem_id=elem_id, js_on_load=canvas_script() + FOLLOW_JS)


def _patcher(elem_id: str, script: str = PATCHER_JS) -> gr.HTML:
    """Draws nothing: applies the live canvas patches it receives (ui/render/live.py), or with a
    `scrubber_script` keeps the finished run's replay for a step scrubber."""
    return gr.HTML(None, html_template="", js_on_load=canvas_script() + script, elem_id=elem_id,
                   elem_classes=["patcher"], apply_default_css=False, container=False, padding=False)


@dataclass
class RunView:
    """A run on screen: the error box, numbers, canvas, its scrubber and player, and the decoded text."""

    error: gr.HTML  # a refusal or failure, said in words
    stats: gr.Markdown
    canvas: gr.HTML
    patch: gr.HTML  # applies a live run's canvas patches
    replay: gr.HTML  # keeps a finished run's replay for the scrubber
    step: gr.Slider
    speed: gr.Dropdown
    play: gr.Button
    pause: gr.Button
    next_edit: gr.Button
    timer: gr.Timer
    text: gr.Textbox
    note: gr.Markdown
    poke: PokeView  # tap a token, change it, re-run (ui/playground/poke.py)


@dataclass
class RunCharts:
    """Below the comparison: the run's three charts, confidence heatmap, edit log and export."""

    charts: list[gr.Plot]  # TPS, TPF, steps
    heatmap: gr.Plot
    edit_log: gr.Dataframe
    export: gr.Button
    files: gr.File


@dataclass
class CompareView:
    """Two runs of the same prompt (S vs Q, or two models): what to compare, the verdict, one scrubber for both
    canvases, each side's numbers, the table and the charts."""

    versus: gr.Radio  # S vs Q, or two models (ui/playground/compare.py VERSUS)
    other: gr.Dropdown  # the second model, beside the one the settings choose
    verdict: gr.Markdown
    step: gr.Slider
    canvas_s: gr.HTML
    canvas_q: gr.HTML
    stats_s: gr.Markdown
    stats_q: gr.Markdown
    patch: gr.HTML
    replay: gr.HTML
    table: gr.Dataframe
    diff: gr.HTML
    charts: list[gr.Plot]


@dataclass
class ApiInputs:
    """The hidden components behind /generate, /compare and /trace: the contract's inputs, outputs, triggers."""

    prompt: gr.Textbox
    mode: gr.Textbox
    tau_mask: gr.Number
    tau_edit: gr.Number
    mbe: gr.Checkbox
    block_length: gr.Number
    gen_length: gr.Number
    model: gr.Textbox
    pokes: gr.JSON
    text: gr.Textbox
    stats: gr.JSON
    result: gr.JSON
    trace: gr.JSON
    generate: gr.Button
    compare: gr.Button
    get_trace: gr.Button


def _run_view(error: gr.HTML) -> RunView:
    stats = gr.Markdown(tables.stats_line(None), elem_id="stats")
    canvas_box = _canvas_box(canvas.render(None, 0), "canvas-box")
    patch = _patcher("canvas-patch")
    replay = _patcher("canvas-replay", scrubber_script("step", "canvas", pause="pause"))
    with gr.Row(equal_height=True):
        step = gr.Slider(0, 1, value=0, step=1, label="step (replay: the canvas after this step)", elem_id="step",
                         scale=4)
        speed = gr.Dropdown(SPEEDS, value="1", label="speed", elem_id="speed", scale=1, min_width=80)
    with gr.Row():
        play = gr.Button("▶ play", elem_id="play", size="sm")
        pause = gr.Button("❚❚ pause", elem_id="pause", size="sm")
        next_edit = gr.Button("next edit ⇥", elem_id="next-edit", size="sm")
    poke = poke_view()
    timer = gr.Timer(0.3, active=False)
    text = gr.Textbox(label="Output", lines=4, elem_id="output", interactive=False, buttons=["copy"],
                      placeholder="The decoded text appears here as the run goes (the prompt excluded).")
    note = gr.Markdown("", elem_id="output-note")
    return RunView(error, stats, canvas_box, patch, replay, step, speed, play, pause, next_edit, timer, text, note,
                   poke)


def charts_view() -> RunCharts:
    """The run's charts, confidence heatmap, edit log and export (below the comparison)."""
    with gr.Row():
        charts = [gr.Plot(elem_id=i, show_label=False, min_width=300) for i in ("chart-tps", "chart-tpf",
                                                                                "chart-steps")]
    with gr.Accordion("Why was a token drafted or edited when it was? Confidence per position and step",
                      open=True, elem_id="heatmap-box"):
        heatmap = gr.Plot(elem_id="chart-confidence", show_label=False)
    edit_log = gr.Dataframe(tables.edit_log(None), label=EDIT_LOG_LABEL, elem_id="edit-log",
                            interactive=False, max_height=300)
    with gr.Row():
        export = gr.Button("Export trace (JSON) and HTML replay", elem_id="export", size="sm")
        files = gr.File(file_count="multiple", label="Exports", elem_id="export-files")
    return RunCharts(charts, heatmap, edit_log, export, files)


COMPARE_INTRO = ("### Side by side on the same prompt\n**Compare** (beside Generate) runs the prompt twice on "
                 "one timeline. **S vs Q**: both modes of the chosen model, each with **its own preset, block length "
                 "included** (the sliders are not used), sharing each forward. **Two models**: the chosen model and "
                 "the second one below (e.g. LLaDA2.1 against LLaDA2.2), both in the chosen mode, each with its own "
                 "preset of it (Custom: each model's S). Multi-Block Editing as the **MBE** box says.")


def second_model(models) -> str | None:
    """The model offered to compare with the default one: the small LLaDA2.2 model when it is offered (the
    embedded model is 2.1), else the next offered model; None when only one is offered."""
    others = [path for _, path in models.choices() if path != models.default]
    return next((p for p in others if Path(p).resolve() == MODEL22.resolve()), others[0] if others else None)


def compare_label(versus: str) -> str:
    """The Compare button's text for what it compares."""
    return "Compare S vs Q" if versus == compare.VERSUS[0] else "Compare two models"


def compare_choice(versus) -> tuple:
    """What picking `versus` changes: the Compare button's text, and the second model's selector shown only for
    two models (InputError for a choice that is none)."""
    two = check_choice("compare", versus, compare.VERSUS) == compare.VERSUS[1]
    return gr.update(value=compare_label(versus)), gr.update(visible=two)


def _compare_choice(models) -> tuple[gr.Radio, gr.Dropdown]:
    with gr.Row(equal_height=True):
        versus = gr.Radio(list(compare.VERSUS), value=compare.VERSUS[0], label="Compare", elem_id="compare-versus",
                          scale=1, min_width=220)
        other = gr.Dropdown(models.choices(), value=second_model(models), label="second model (two models)",
                            elem_id="compare-model", visible=False, scale=2, min_width=220)
    return versus, other


def _side(run: str, elem_id: str) -> tuple[gr.HTML, gr.Markdown]:
    """One side of the pair: its canvas, its numbers under it."""
    with gr.Column(min_width=320):
        box = _canvas_box(canvas.render(None, 0, elem_id=elem_id, hint=COMPARE_HINT % run), f"{elem_id}-box")
        stats = gr.Markdown("", elem_id=f"{elem_id}-stats")
    return box, stats


def compare_view(models) -> CompareView:
    with gr.Column(elem_id="compare"):
        gr.Markdown(COMPARE_INTRO)
        versus, other = _compare_choice(models)
        verdict = gr.Markdown("", elem_id="compare-verdict")
        step = gr.Slider(0, 1, value=0, step=1, label="step (both runs)", elem_id="compare-step")
        with gr.Row(elem_id="compare-canvases"):
            canvas_s, stats_s = _side("the S run (with two models, the chosen model's)", "canvas-s")
            canvas_q, stats_q = _side("the Q run (with two models, the second model's)", "canvas-q")
        patch = _patcher("canvas-patch-compare")
        replay = _patcher("canvas-replay-compare", scrubber_script("compare-step", "compare"))
        table = gr.Dataframe(tables.stats_table([]), label="the pair", elem_id="compare-table", interactive=False)
        diff = gr.HTML("", elem_id="diff")
        with gr.Row():
            charts = [gr.Plot(elem_id=f"{i}-compare", show_label=False, min_width=300)
                      for i in ("chart-tps", "chart-tpf", "chart-steps")]
    return CompareView(versus, other, verdict, step, canvas_s, canvas_q, stats_s, stats_q, patch, replay, table, diff,
                       charts)


def _api_input(component, example):
    """A hidden API input whose value is also the example the API page shows (one that runs when copied)."""
    component.example_inputs = lambda: example  # the API page asks each input component for its example
    return component


def api_inputs() -> ApiInputs:
    """Hidden components that give the API endpoints the contract's inputs, with examples that work."""
    with gr.Column(visible=False):
        inputs = {"prompt": _api_input(gr.Textbox("176+771=", label="prompt"), "176+771="),
                  "mode": _api_input(gr.Textbox("S", label="mode"), "S"),
                  "tau_mask": _api_input(gr.Number(None, label="tau_mask"), None),  # null: the mode's value
                  "tau_edit": _api_input(gr.Number(None, label="tau_edit"), None),
                  "mbe": _api_input(gr.Checkbox(False, label="mbe"), False),
                  "block_length": _api_input(gr.Number(None, label="block_length"), None),
                  "gen_length": _api_input(gr.Number(32, label="gen_length"), 32),
                  # an offered model's name; empty: the default
                  "model": _api_input(gr.Textbox("", label="model"), ""),
                  # null or ["STEP:POS:TOKEN", ...] / [{step, pos, token}, ...], as the CLI's --poke
                  "pokes": _api_input(gr.JSON(None, label="pokes"), None)}
        return ApiInputs(**inputs, text=gr.Textbox(), stats=gr.JSON(), result=gr.JSON(), trace=gr.JSON(),
                         generate=gr.Button(), compare=gr.Button(), get_trace=gr.Button())


def run_view_area(models) -> tuple[RunView, controls.Settings]:
    """#error, the run view with the settings column beside it."""
    error = gr.HTML("", elem_id="error")
    with gr.Row():
        with gr.Column(scale=3, min_width=320):
            run_view = _run_view(error)
        with gr.Column(scale=1, min_width=280, elem_id="settings"):
            settings = controls.settings(models)
    return run_view, settings
