"""The Score | TPF tab: sweep (τ_mask, τ_edit) on a model, chart accuracy against TPF, load a point.

`build_view(models)` creates the tab's components (call it inside `gr.Tab("Score | TPF", id="explorer")`);
`wire(models, sweep, playground, tabs)` wires their events (the handlers are in ui/explorer/sweeps.py).

A click on a point of the chart, or on a row of the table (`#explorer-table`), loads that point's
settings into the playground (mode Custom, τ_mask, editing and τ_edit, MBE, block length) and switches
to it: `playground` holds those controls, handed over by ui/demo.py (this tab imports no other tab).
Gradio's Plot component reports no clicks, so the chart's clicks reach the server through
assets/explorer.js as `select` events of the empty `#explorer-pick` component.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from llada.eval.sweep_cache import SweepCache
from llada.eval.sweep_grid import TASK_SETS
from llada.data.tasks import TASKS

from .. import ASSETS
from ..frame import DECODE, PRIVATE, REPLAY, Inputs, refusing
from ..models import Models
from ..zerogpu import CLOCK, SWEEP_CALL_S, on_gpu, split_sweep, zero_gpu
from ..render import pareto
from ..settings import LIMITS, presets_of
from .sweeps import (CACHE_ENV, DECODE_BUDGET, DEFAULTS, N_LIMITS, STOP_WAIT_S, SWEEP_LOCK, SWEEP_SECONDS, TAU_EDITS,
                     TAU_MASKS, TIME_UP, ExplorerFrame, load_point, run_sweep, show_cached, sweep_free)

INTRO = ASSETS / "explorer.md"

SWEEP_CALLS = -(-int(SWEEP_SECONDS) // int(SWEEP_CALL_S))  # ZeroGPU: a sweep request's GPU calls at most


@dataclass
class SweepView:
    """The tab's components: the grid to sweep, Run / Stop, and what the points show (ExplorerFrame's names)."""

    tau_masks: gr.CheckboxGroup
    tau_edits: gr.CheckboxGroup
    mbe: gr.CheckboxGroup  # the MBE series: off, on
    model: gr.Dropdown
    tasks: gr.CheckboxGroup
    n: gr.Slider  # items per task
    block_length: gr.Slider
    run: gr.Button
    stop: gr.Button
    progress: gr.Markdown
    chart: gr.Plot
    pick: gr.HTML  # the chart's clicks, sent by assets/explorer.js as its `select` events
    table: gr.Dataframe
    csv: gr.File


@dataclass
class PointTargets:
    """The playground's controls a loaded point sets, handed over by ui/demo.py (this tab imports no other)."""

    mode: gr.Radio
    tau_mask: gr.Slider
    edit: gr.Checkbox
    tau_edit: gr.Slider
    mbe: gr.Checkbox
    block_length: gr.Slider
    model: gr.Dropdown | None = None  # set too when given


def build_view(models: Models, defaults: dict | None = None) -> SweepView:
    """The explorer's components (call inside `gr.Tab("Score | TPF", id="explorer")`); `defaults` overrides
    the grid first shown (keys of `DEFAULTS`, plus "tasks" and "block_length")."""
    d = DEFAULTS | {"tasks": list(TASKS), "block_length": presets_of(models.default)["S"]["block_length"]}
    d |= defaults or {}
    with gr.Column(elem_id="explorer"):
        gr.Markdown(INTRO.read_text(encoding="utf-8") if INTRO.exists() else "### Score | TPF")
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                tau_masks = gr.CheckboxGroup(TAU_MASKS, value=d["tau_masks"], elem_id="explorer-tau-mask",
                                             label="τ_mask values (draft a mask when p > τ_mask)")
                tau_edits = gr.CheckboxGroup(TAU_EDITS, value=d["tau_edits"], elem_id="explorer-tau-edit",
                                             label="τ_edit values (edit a token when p > τ_edit; off: no editing)")
                mbe = gr.CheckboxGroup(["off", "on"], value=d["mbe"], label="MBE series", elem_id="explorer-mbe")
                with gr.Accordion("Model, tasks, items and block length", open=False, elem_id="explorer-more"):
                    model = gr.Dropdown(models.choices(), value=models.default, label="Model",
                                        elem_id="explorer-model")
                    tasks = gr.CheckboxGroup(list(TASK_SETS), value=d["tasks"], label="tasks (held-out items)",
                                             info="humaneval+: the first n HumanEval+ problems, each program "
                                                  "checked in a sandbox (up to 512 tokens per decode)",
                                             elem_id="explorer-tasks")
                    n = gr.Slider(*N_LIMITS, value=d["n"], step=1, label="items per task", elem_id="explorer-n")
                    block_length = gr.Slider(*LIMITS["block_length"], value=d["block_length"], step=4,
                                             label="block length of the grid (presets keep their own)",
                                             elem_id="explorer-block-length")
                with gr.Row():
                    run = gr.Button("Run sweep", variant="primary", elem_id="explorer-run")
                    stop = gr.Button("Stop", elem_id="explorer-stop")
            with gr.Column(scale=2, min_width=320):
                progress = gr.Markdown("Open this tab to see the points measured before, or press **Run sweep**.",
                                       elem_id="explorer-progress")
                chart = gr.Plot(pareto.figure([]), elem_id="explorer-chart", show_label=False)
                pick = gr.HTML("", js_on_load=(ASSETS / "explorer.js").read_text(encoding="utf-8"),
                               elem_id="explorer-pick", container=False, padding=False, apply_default_css=False)
                table = gr.Dataframe(pareto.table([]), elem_id="explorer-table", interactive=False, max_height=360,
                                     label="Every point: click a row to load its settings into the Playground")
                csv = gr.File(label="CSV of these points", elem_id="explorer-csv", interactive=False)
    return SweepView(tau_masks, tau_edits, mbe, model, tasks, n, block_length, run, stop, progress, chart, pick, table,
                     csv)


def wire(models: Models, sweep: SweepView, playground: PointTargets, tabs: gr.Tabs, tab: gr.Tab | None = None,
         cache_dir: str | Path | None = None) -> None:
    """The explorer's events. `playground` holds the controls a point sets (mode, tau_mask, edit, tau_edit,
    mbe, block_length; model too when given); `tabs` is the Tabs holding the "playground" tab; `tab`, the
    explorer's own, shows the cached points when opened."""
    cache = SweepCache(cache_dir or os.environ.get(CACHE_ENV) or None)
    settings = Inputs(model_path=sweep.model, tau_masks=sweep.tau_masks, tau_edits=sweep.tau_edits, mbe=sweep.mbe,
                      tasks=sweep.tasks, n=sweep.n, block_length=sweep.block_length)  # run_sweep's, show_cached's names
    outputs = [getattr(sweep, name) for name in ExplorerFrame._fields]

    @on_gpu(seconds=lambda _: CLOCK.sweep_seconds(DECODE_BUDGET.seconds))
    def run_call(data: dict):  # one GPU call of at most SWEEP_CALL_S of sweeping; its points are cached
        yield from run_sweep(models, cache, **settings.values(data), seconds=SWEEP_CALL_S)

    def run(data: dict):
        if not zero_gpu():
            yield from run_sweep(models, cache, **settings.values(data))
            return
        yield from split_sweep(run_call, data, SWEEP_CALLS, more=lambda f: TIME_UP in str(f.progress))

    def cached(data: dict):
        return show_cached(models, cache, **settings.values(data))

    def stopped(data: dict):
        if SWEEP_LOCK.acquire(timeout=STOP_WAIT_S):  # the cancelled sweep has closed: its last point is saved
            SWEEP_LOCK.release()
        return show_cached(models, cache, **settings.values(data), stopped=True)

    free = sweep.run.click(sweep_free, None, sweep.progress, **PRIVATE, **REPLAY)  # answers without a decode slot
    event = free.success(run, settings.inputs, outputs, show_progress="minimal", **PRIVATE, **DECODE)
    sweep.stop.click(None, None, None, cancels=[event]).then(stopped, settings.inputs, outputs, **PRIVATE, **REPLAY)
    grid = [c for name, c in settings.components.items() if name != "model_path"]
    triggers = [sweep.model.change] + [c.input for c in grid] + ([tab.select] if tab is not None else [])
    gr.on(triggers, cached, settings.inputs, outputs, trigger_mode="always_last", **PRIVATE, **REPLAY)
    _wire_loading(models, sweep, playground, tabs)


def _wire_loading(models: Models, sweep: SweepView, playground: PointTargets, tabs: gr.Tabs) -> None:
    has_model = playground.model is not None
    targets = [playground.mode, playground.tau_mask, playground.edit, playground.tau_edit, playground.mbe,
               playground.block_length, tabs] + ([playground.model] if has_model else [])

    @refusing
    def from_row(model_path, evt: gr.SelectData):
        return load_point(evt.row_value, has_model, models.checked_path(model_path) or models.default)

    @refusing
    def from_chart(model_path, evt: gr.SelectData):
        return load_point(evt.value, has_model, models.checked_path(model_path) or models.default)

    sweep.table.select(from_row, [sweep.model], targets, **PRIVATE, **REPLAY)
    sweep.pick.select(from_chart, [sweep.model], targets, **PRIVATE, **REPLAY)
