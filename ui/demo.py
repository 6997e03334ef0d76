"""The page: a header, then the Playground, Learn and Score | TPF tabs, each from its own folder.

`build_demo(models)` is the one place that puts the tabs together (app.py launches what it returns):
it creates each tab inside its `gr.Tab`, hands the explorer the playground controls a point sets, and
wires the API endpoints. The first screen holds what a first visit needs: the prompt with Generate, the
mode row, examples that run when clicked, and the canvas right below, the settings beside it (below it
on a phone). Nothing is loaded until a run needs it.
"""

from __future__ import annotations

import os

import gradio as gr

from . import ASSETS, export
from .frame import exact_inputs, quiet_refusals
from .explorer import view as explorer
from .learn import lessons, view as learn
from .models import Models
from .playground import view as playground_view, wire as playground
from .sessions import drop_session, forget_refused_one_shots, keep_replacements_in_place

# launch(**LOOK): Gradio 6 dresses the page at launch; the page has no upload component, so Gradio's upload route
# takes nothing bigger than a few KB; Gradio keeps a copy of the page's values per session (about 0.25 MiB):
# at most SESSIONS of them (the oldest go first), a closed tab's at once (ui/sessions.py)
SESSIONS = int(os.environ.get("LLADA_SESSIONS", "256"))
LOOK = {"css_paths": [ASSETS / "style.css"], "theme": "soft", "max_file_size": "16kb",
        "state_session_capacity": SESSIONS}
# every first number of seconds, Gradio deletes the files it copied for download (exports) older than the second
CACHE_SWEEP = (int(max(1, min(60, export.KEEP_S // 5))), int(max(1, export.KEEP_S)))
STATE_TTL_S = 3600  # an open tab keeps its last run and comparison this long; a closed one drops them at once
HEADER = ("## LLaDA2.1 playground\nWatch a block-diffusion language model **draft** masked tokens in parallel "
          "and **edit** its own text, step by step. New here? Click an example, or open **Learn**.")
LOADS = ("mode", "tau_mask", "edit", "tau_edit", "mbe", "block_length", "model")  # what an explorer point sets


def _page_script() -> None:
    """Keyboard (Ctrl/Cmd+Enter) and out-of-range notes for typed slider values (assets/page.js)."""
    gr.HTML(None, html_template="", js_on_load=(ASSETS / "page.js").read_text(encoding="utf-8"),
            elem_classes=["patcher"], apply_default_css=False, container=False, padding=False)


def build_demo(models: Models, recordings: dict | None = None) -> gr.Blocks:
    """The playground for `models` (nothing is loaded until a run needs it)."""
    recordings = lessons.load_recordings() if recordings is None else recordings
    quiet_refusals()  # a request Gradio refuses is one line of the log, not a traceback
    keep_replacements_in_place()  # a session holds one component per output, however many runs it makes
    export.sweep_safely()  # Gradio's sweep of exported files goes on beside exports (ui/export.py)
    with gr.Blocks(title="LLaDA2.1 playground: draft and edit", delete_cache=CACHE_SWEEP) as demo:
        trace, pair = gr.State(None, time_to_live=STATE_TTL_S), gr.State(None, time_to_live=STATE_TTL_S)
        gr.Markdown(HEADER, elem_id="header")
        _page_script()
        with gr.Tabs(elem_id="tabs") as tabs:
            with gr.Tab("Playground", id="playground"):
                controls = playground.build(models, trace, pair)
            with gr.Tab("Learn", id="learn"):
                lesson_view = learn.build_view(recordings)
            with gr.Tab("Score | TPF", id="explorer") as explorer_tab:
                sweep_view = explorer.build_view(models)
        learn.wire(lesson_view)
        targets = explorer.PointTargets(**{name: getattr(controls, name) for name in LOADS})
        explorer.wire(models, sweep_view, targets, tabs, tab=explorer_tab)
        playground.wire_api(models, playground_view.api_inputs(), trace)
        demo.unload(drop_session)
    exact_inputs(demo)  # the wrong number of inputs is refused with a message naming them
    forget_refused_one_shots(demo)  # ... and its session goes as a served call's does
    return demo

