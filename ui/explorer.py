"""The Score | TPF explorer: sweep (τ_mask, τ_edit) on a model, chart accuracy against TPF, load a point.

`build_view(models)` creates the tab's components (call it inside `gr.Tab("Score | TPF", id="explorer")`);
`wire(models, parts, playground, tabs)` wires their events. A sweep (`llada.eval.sweep`) runs inside one
event that streams the growing chart and a progress line. It shares the playground's `decode`
concurrency group and runs one at a time on a server (a second visitor is told to wait rather than take
the playground's other decode slot); it is bounded in decodes (`MAX_DECODES`) and in time
(`SWEEP_SECONDS`), every decode by `DECODE_BUDGET`, and Stop cancels it. Finished points are cached per
model on disk (`llada.eval.sweep_cache`): opening the tab shows a grid measured before at once, and a
stopped sweep continues where it stopped.

A click on a point of the chart, or on a row of the table (`#explorer-table`), loads that point's
settings into the playground (mode Custom, τ_mask, editing and τ_edit, MBE, block length) and switches
to it. Gradio's Plot component reports no clicks, so the chart's clicks reach the server through
assets/explorer.js as `select` events of the empty `#explorer-pick` component.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import gradio as gr

from llada.budget import Budget
from llada.eval.sweep import Point, Progress, SweepSpec, sweep
from llada.eval.sweep_report import to_csv
from llada.eval.sweep_cache import SweepCache
from llada.eval.tasks import TASKS
from llada.presets import load_presets, merged

from . import pareto
from .events import DECODE, PRIVATE, REPLAY
from .export import ExportDir
from .handlers import REFUSED, failure_text, frame
from .models import GPU_SECONDS, Models, on_gpu
from .runs import BUDGET, LIMITS, Throttle

ASSETS = Path(__file__).resolve().parents[1] / "assets"
CACHE_ENV = "LLADA_EXPLORER_CACHE"  # where sweep points are kept (default ~/.cache/llada-playground/explorer)
TAU_MASKS = ["0.05", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "0.95"]
TAU_EDITS = ["off", "0", "0.25", "0.5", "0.75", "0.9"]
DEFAULTS = {"tau_masks": ["0.05", "0.3", "0.5", "0.7", "0.9"], "tau_edits": ["off", "0", "0.5", "0.9"],
            "mbe": ["off", "on"], "n": 10}
N_LIMITS = (1, 25)
MAX_DECODES = 4_000  # per sweep (~5 min of the shipped model on one CPU core); more items: the command line
SWEEP_SECONDS = 300.0  # per sweep request; finished points are cached, Run sweep again continues
DECODE_BUDGET = Budget(forwards=min(BUDGET.forwards, 256), seconds=10.0)
PROGRESS_INTERVAL_S = 0.5
LOCK_WAIT_S = 3.0  # a new sweep waits this long for a stopped one to let go
SWEEP_LOCK = threading.Lock()  # one sweep per server: playground runs keep the other decode slot
EXPORTS = ExportDir()
INTRO = ASSETS / "explorer.md"


class ExplorerFrame(NamedTuple):
    """One update of the explorer's outputs."""

    chart: Any
    progress: Any
    table: Any
    csv: Any


# ---- settings -------------------------------------------------------------------------------------------

def _whole(name: str, value, low: int, high: int) -> int:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    number = number and value == int(value)
    if not number or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def spec_of(tau_masks, tau_edits, mbe, tasks, n, block_length) -> SweepSpec:
    """The SweepSpec of the tab's settings; ValueError naming the setting that cannot be used."""
    for name, values in (("τ_mask", tau_masks), ("τ_edit", tau_edits), ("MBE series", mbe), ("task", tasks)):
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"choose at least one {name} value")
    try:
        masks = tuple(float(v) for v in tau_masks)
        edits = tuple(None if v == "off" else float(v) for v in tau_edits)
    except (TypeError, ValueError):
        raise ValueError(f"τ values must be numbers in [0, 1] or off, got {[*tau_masks, *tau_edits]}") from None
    if not set(mbe) <= {"off", "on"}:
        raise ValueError(f"MBE series must be off and/or on, got {list(mbe)}")
    return SweepSpec(masks, edits, tuple(m == "on" for m in mbe), tasks=tuple(tasks),
                     n=_whole("items per task", n, *N_LIMITS),
                     block_length=_whole("block length", block_length, *LIMITS["block_length"]))


def expected_engine(models: Models, model_path) -> str:
    """What `engine_of` says of an offered model once ui.models loads it (its device and dtype), unloaded."""
    offered = next((m for m in models.offered if m.path == model_path), None)
    dtype = str(offered.dtype).removeprefix("torch.") if offered is not None else "float32"
    return f"{models.rt.device}/{dtype}"


def presets_of(model_path: str | None) -> dict[str, dict]:
    return load_presets(Path(model_path)) if model_path else merged({})


def model_name(model_path: str) -> str:
    """A model's own name (config.json's "name", as `Pipeline.name`), else its directory's name."""
    try:
        name = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    return str(name or Path(model_path).name)


# ---- text and files -------------------------------------------------------------------------------------

def progress_text(name: str, p: Progress) -> str:
    """The progress line of a running, finished or stopped sweep."""
    points = f"{len(p.points)} of {p.cells} points"
    cached = f" ({p.cached} from the cache)" if p.cached else ""
    if p.status == "done":
        return (f"**Done**: {points}{cached} of **{name}** in {p.seconds:.0f} s. Click a point or a row to load "
                "its settings into the Playground.")
    if p.status == "stopped":
        return (f"**Stopped** after {p.seconds:.0f} s ({p.note}): {points}{cached}. Finished points are cached: "
                "**Run sweep** again to continue.")
    left = ""
    if p.decoded:
        left = f", about {p.seconds / p.decoded * (p.total - p.done):.0f} s left"
    percent = 100 * p.done / max(p.total, 1)
    return (f"Sweeping **{name}**: {points}{cached} · {p.done:,} of {p.total:,} decodes ({percent:.0f}%) · "
            f"{p.seconds:.0f} s{left}")


def cached_text(found: int, cells: int, decodes: int, stopped: bool = False) -> str:
    head = "**Stopped.** " if stopped else ""
    if found == cells:
        return (f"{head}All {cells} points of this grid come from the cache (measured before on this model: same "
                "weights, items and budget). Click a point or a row to load its settings into the Playground.")
    if found:
        return (f"{head}{found} of {cells} points of this grid are cached; **Run sweep** measures the other "
                f"{cells - found}.")
    return f"{head}No point of this grid is measured yet: **Run sweep** decodes {decodes:,} items ({cells} points)."


def csv_file(points: list[Point], model_path: str | None) -> str | None:
    """The points as a CSV file (a fresh export folder), or None when there are none."""
    if not points:
        return None
    path = EXPORTS.new() / f"score-tpf-{Path(model_path or 'model').name}.csv"
    path.write_text(to_csv(points), encoding="utf-8")
    return str(path)


def shown(points: list[Point], model_path: str | None, text: str, subtitle: str = "") -> ExplorerFrame:
    """The whole view of `points`: chart, table, CSV and a line of text."""
    return ExplorerFrame(chart=pareto.figure(points, subtitle=subtitle), progress=text, table=pareto.table(points),
                         csv=csv_file(points, model_path))


def refused(err: Exception | str) -> ExplorerFrame:
    return frame(ExplorerFrame, progress=f"**Refused:** {err}")


def subtitle_of(name: str, spec: SweepSpec) -> str:
    tasks, items = len(spec.tasks), spec.n
    return f"{name} · {tasks} task{'s' * (tasks != 1)} × {items} held-out item{'s' * (items != 1)} per point"


# ---- handlers -------------------------------------------------------------------------------------------

def run_sweep(models: Models, cache: SweepCache, model_path, tau_masks, tau_edits, mbe, tasks, n, block_length):
    """Run one sweep (one at a time per server), streaming the growing chart and the progress line."""
    try:
        spec = spec_of(tau_masks, tau_edits, mbe, tasks, n, block_length)
    except ValueError as err:
        yield refused(err)
        return
    if not SWEEP_LOCK.acquire(timeout=LOCK_WAIT_S):
        yield frame(ExplorerFrame, progress="Another sweep is running on this server (one at a time, so that "
                                            "playground runs keep their share); try again when it is done.")
        return
    try:
        pipe = models.get(model_path)
        yield from _stream(pipe, spec, cache, str(model_path or models.default))
    except REFUSED as err:
        yield refused(err)
    except Exception as err:  # noqa: BLE001 - reported to the user, traceback logged
        yield frame(ExplorerFrame, progress=f"**Error:** {failure_text(err)}")
    finally:
        SWEEP_LOCK.release()


def _stream(pipe, spec: SweepSpec, cache: SweepCache, model_path: str):
    name = pipe.name
    due, drawn, subtitle = Throttle(PROGRESS_INTERVAL_S), -1, subtitle_of(name, spec)
    progress = None
    for progress in sweep(pipe, spec, cache, DECODE_BUDGET, SWEEP_SECONDS, MAX_DECODES):
        if progress.status != "running":
            break
        grew = len(progress.points) != drawn
        if grew or due.due():
            chart = pareto.figure(list(progress.points), subtitle=subtitle) if grew else gr.skip()
            drawn = len(progress.points)
            yield frame(ExplorerFrame, chart=chart, progress=progress_text(name, progress))
    yield shown(list(progress.points), model_path, progress_text(name, progress), subtitle)


def show_cached(models: Models, cache: SweepCache, model_path, tau_masks, tau_edits, mbe, tasks, n, block_length,
                stopped: bool = False) -> ExplorerFrame:
    """The cached points of the tab's grid on `model_path` (no model is loaded)."""
    try:
        if model_path not in models.dirs:
            raise ValueError(f"unknown model {model_path!r}; choose one of the offered directories")
        spec = spec_of(tau_masks, tau_edits, mbe, tasks, n, block_length)
        cells = spec.cells(presets_of(model_path))
    except (ValueError, OSError) as err:
        return refused(err)
    known = cache.load(model_path, expected_engine(models, model_path), spec, DECODE_BUDGET)
    points = [known[c.key] for c in cells if c.key in known]
    decodes = len(cells) * spec.n * len(spec.tasks)
    return shown(points, model_path, cached_text(len(points), len(cells), decodes, stopped),
                 subtitle_of(model_name(model_path), spec))


def load_point(values, has_model: bool, model_path) -> tuple:
    """Playground updates for a point's settings: mode Custom, thresholds, MBE, block length, its tab."""
    try:
        s = pareto.parse_settings(values)
    except ValueError:
        return (gr.skip(),) * (7 + has_model)  # a click on no point (a header, an empty row)
    updates = ("Custom", s.tau_mask, s.tau_edit is not None, gr.skip() if s.tau_edit is None else s.tau_edit, s.mbe,
               s.block_length, gr.Tabs(selected="playground"))
    return updates + ((model_path,) if has_model else ())


# ---- components and events ------------------------------------------------------------------------------

def build_view(models: Models, defaults: dict | None = None) -> SimpleNamespace:
    """The explorer's components (call inside `gr.Tab("Score | TPF", id="explorer")`); `defaults` overrides
    the grid first shown (keys of `DEFAULTS`, plus "tasks" and "block_length")."""
    p = SimpleNamespace()
    d = DEFAULTS | {"tasks": list(TASKS), "block_length": presets_of(models.default)["S"]["block_length"]}
    d |= defaults or {}
    with gr.Column(elem_id="explorer"):
        gr.Markdown(INTRO.read_text(encoding="utf-8") if INTRO.exists() else "### Score | TPF")
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                p.tau_masks = gr.CheckboxGroup(TAU_MASKS, value=d["tau_masks"], elem_id="explorer-tau-mask",
                                               label="τ_mask values (draft a mask when p > τ_mask)")
                p.tau_edits = gr.CheckboxGroup(TAU_EDITS, value=d["tau_edits"], elem_id="explorer-tau-edit",
                                               label="τ_edit values (edit a token when p > τ_edit; off: no editing)")
                p.mbe = gr.CheckboxGroup(["off", "on"], value=d["mbe"], label="MBE series", elem_id="explorer-mbe")
                with gr.Accordion("Model, tasks, items and block length", open=False, elem_id="explorer-more"):
                    p.model = gr.Dropdown(models.choices(), value=models.default, label="Model",
                                          elem_id="explorer-model")
                    p.tasks = gr.CheckboxGroup(list(TASKS), value=d["tasks"], label="tasks (held-out items)",
                                               elem_id="explorer-tasks")
                    p.n = gr.Slider(*N_LIMITS, value=d["n"], step=1, label="items per task", elem_id="explorer-n")
                    p.block_length = gr.Slider(*LIMITS["block_length"], value=d["block_length"], step=4,
                                               label="block length of the grid (presets keep their own)",
                                               elem_id="explorer-block-length")
                with gr.Row():
                    p.run = gr.Button("Run sweep", variant="primary", elem_id="explorer-run")
                    p.stop = gr.Button("Stop", elem_id="explorer-stop")
            with gr.Column(scale=2, min_width=320):
                p.progress = gr.Markdown("Open this tab to see the points measured before, or press **Run sweep**.",
                                         elem_id="explorer-progress")
                p.chart = gr.Plot(pareto.figure([]), elem_id="explorer-chart", show_label=False)
                p.pick = gr.HTML("", js_on_load=(ASSETS / "explorer.js").read_text(encoding="utf-8"),
                                 elem_id="explorer-pick", container=False, padding=False, apply_default_css=False)
                p.table = gr.Dataframe(pareto.table([]), elem_id="explorer-table", interactive=False, max_height=360,
                                       label="Every point: click a row to load its settings into the Playground")
                p.csv = gr.File(label="CSV of these points", elem_id="explorer-csv", interactive=False)
    return p


def wire(models: Models, p: SimpleNamespace, playground: SimpleNamespace, tabs: gr.Tabs, tab: gr.Tab | None = None,
         cache_dir: str | Path | None = None) -> None:
    """The explorer's events. `playground` holds the controls a point sets (mode, tau_mask, edit_on, tau_edit,
    mbe, block_length; model too when given); `tabs` is the Tabs holding the "playground" tab; `tab`, the
    explorer's own, shows the cached points when opened."""
    cache = SweepCache(cache_dir or os.environ.get(CACHE_ENV) or None)
    settings = [p.model, p.tau_masks, p.tau_edits, p.mbe, p.tasks, p.n, p.block_length]
    outputs = [getattr(p, name) for name in ExplorerFrame._fields]

    @on_gpu(seconds=lambda *_: GPU_SECONDS[1])  # the longest slot: finished points are cached if it runs out
    def run(*args):
        yield from run_sweep(models, cache, *args)

    def cached(*args):
        return show_cached(models, cache, *args)

    def stopped(*args):
        if SWEEP_LOCK.acquire(timeout=LOCK_WAIT_S):  # the cancelled sweep has closed: its last point is saved
            SWEEP_LOCK.release()
        return show_cached(models, cache, *args, stopped=True)

    event = p.run.click(run, settings, outputs, show_progress="minimal", **PRIVATE, **DECODE)
    p.stop.click(None, None, None, cancels=[event]).then(stopped, settings, outputs, **PRIVATE, **REPLAY)
    triggers = [p.model.change] + [c.input for c in settings[1:]] + ([tab.select] if tab is not None else [])
    gr.on(triggers, cached, settings, outputs, trigger_mode="always_last", **PRIVATE, **REPLAY)
    _wire_loading(p, playground, tabs)


def _wire_loading(p: SimpleNamespace, playground: SimpleNamespace, tabs: gr.Tabs) -> None:
    has_model = getattr(playground, "model", None) is not None
    targets = [playground.mode, playground.tau_mask, playground.edit_on, playground.tau_edit, playground.mbe,
               playground.block_length, tabs] + ([playground.model] if has_model else [])

    def from_row(model_path, evt: gr.SelectData):
        return load_point(evt.row_value, has_model, model_path)

    def from_chart(model_path, evt: gr.SelectData):
        return load_point(evt.value, has_model, model_path)

    p.table.select(from_row, [p.model], targets, **PRIVATE, **REPLAY)
    p.pick.select(from_chart, [p.model], targets, **PRIVATE, **REPLAY)
