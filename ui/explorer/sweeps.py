"""The Score | TPF explorer's handlers: the tab's settings as a sweep, the sweep streamed, cached points.

A sweep (`llada.eval.sweep`) runs inside one
event that streams the growing chart and a progress line. It shares the playground's `decode`
concurrency group and runs one at a time on a server (a second visitor is told to wait rather than take
the playground's other decode slot); it is bounded in decodes (`MAX_DECODES`) and in time
(`SWEEP_SECONDS`), every decode by `DECODE_BUDGET`, and Stop cancels it. Finished points are cached per
model on disk (`llada.eval.sweep_cache`): opening the tab shows a grid measured before at once, and a
stopped sweep continues where it stopped.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any, NamedTuple

import gradio as gr

from llada.budget import Budget
from llada.eval.sweep import Point, Progress, SweepSpec, sweep
from llada.eval.sweep_cache import SweepCache
from llada.eval.sweep_report import to_csv

from ..export import ExportDir
from ..frame import Problem, Throttle, frame, problem
from ..models import Models
from ..render import pareto
from ..runs import BUDGET
from ..settings import LIMITS, presets_of

CACHE_ENV = "LLADA_EXPLORER_CACHE"  # where sweep points are kept (default ~/.cache/llada-playground/explorer)
TAU_MASKS = ["0.05", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "0.95"]
TAU_EDITS = ["off", "0", "0.25", "0.5", "0.75", "0.9"]
DEFAULTS = {"tau_masks": ["0.05", "0.3", "0.5", "0.7", "0.9"], "tau_edits": ["off", "0", "0.5", "0.9"],
            "mbe": ["off", "on"], "n": 10}
N_LIMITS = (1, 25)
MAX_DECODES = 4_000  # per sweep (~5 min of the shipped model on one CPU core); more items: the command line
SWEEP_SECONDS = 300.0  # per sweep request; finished points are cached, Run sweep again continues
TIME_UP = "time budget reached"  # the note of a sweep stopped by its seconds (llada.eval.sweep)
DECODE_BUDGET = Budget(forwards=min(BUDGET.forwards, 256), seconds=10.0)
PROGRESS_INTERVAL_S = 0.5
LOCK_WAIT_S = 3.0  # a new sweep waits this long for a stopped one to let go
STOP_WAIT_S = 30.0  # Stop shows the saved points once the cancelled sweep lets go: at most this long (a loaded host)
SWEEP_LOCK = threading.Lock()  # one sweep per server: playground runs keep the other decode slot
BUSY = ("Another sweep is running on this server (one at a time, so that playground runs keep their share); try "
        "again when it is done.")
EXPORTS = ExportDir()


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
    offered = all(isinstance(v, str) for v in [*tau_masks, *tau_edits])  # the checkboxes' values only
    if not (offered and set(tau_masks) <= set(TAU_MASKS) and set(tau_edits) <= set(TAU_EDITS)):
        raise ValueError(f"τ values must be numbers in [0, 1] or off, as offered, got {[*tau_masks, *tau_edits]}"[:300])
    masks = tuple(float(v) for v in tau_masks)
    edits = tuple(None if v == "off" else float(v) for v in tau_edits)
    if not all(isinstance(m, str) for m in mbe) or not set(mbe) <= {"off", "on"}:
        raise ValueError(f"MBE series must be off and/or on, got {list(mbe)}")
    return SweepSpec(masks, edits, tuple(m == "on" for m in mbe), tasks=tuple(tasks),
                     n=_whole("items per task", n, *N_LIMITS),
                     block_length=_whole("block length", block_length, *LIMITS["block_length"]))


def expected_engine(models: Models, model_path) -> str:
    """What `engine_of` says of an offered model once ui.models loads it (its device and dtype), unloaded."""
    offered = next((m for m in models.offered if m.path == model_path), None)
    dtype = str(offered.dtype).removeprefix("torch.") if offered is not None else "float32"
    return f"{models.rt.device}/{dtype}"


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


LOAD_NOTE = ("Accuracy and TPF do not depend on the machine; **TPS then** is the speed measured when the point was "
             "computed, under that moment's load (shared cores make it swing several-fold), so compare speeds by TPF. "
             "Bars: 95% Wilson intervals of accuracy over the items.")


def cached_text(found: int, cells: int, decodes: int, stopped: bool = False) -> str:
    head = "**Stopped.** " if stopped else ""
    if found == cells:
        return (f"{head}All {cells} points of this grid come from the cache (measured before on this model: same "
                "weights, items and budget). Click a point or a row to load its settings into the Playground. "
                + LOAD_NOTE)
    if found:
        return (f"{head}{found} of {cells} points of this grid are cached; **Run sweep** measures the other "
                f"{cells - found}. {LOAD_NOTE}")
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


def told(err: BaseException) -> ExplorerFrame:
    """A refused or failed sweep, told in the progress line (ui.frame.problem)."""
    return frame(ExplorerFrame, progress=problem(err).markdown)


def subtitle_of(name: str, spec: SweepSpec) -> str:
    tasks, items = len(spec.tasks), spec.n
    return f"{name} · {tasks} task{'s' * (tasks != 1)} × {items} held-out item{'s' * (items != 1)} per point"


# ---- handlers -------------------------------------------------------------------------------------------

def sweep_free() -> str:
    """Before a sweep queues for a decode slot: refuse at once (a Gradio error) while another sweep runs."""
    if SWEEP_LOCK.locked():
        raise gr.Error(BUSY, title="Busy", print_exception=False)
    return "Waiting for a decode slot…"


def run_sweep(models: Models, cache: SweepCache, model_path, tau_masks, tau_edits, mbe, tasks, n, block_length,
              seconds: float = SWEEP_SECONDS):
    """Run one sweep (one at a time per server) for at most `seconds`, streaming the growing chart and the
    progress line (a sweep stopped by that time says TIME_UP; its finished points are cached)."""
    try:
        spec = spec_of(tau_masks, tau_edits, mbe, tasks, n, block_length)
        model_path = models.checked_path(model_path)
    except ValueError as err:
        yield told(err)
        return
    if not SWEEP_LOCK.acquire(timeout=LOCK_WAIT_S):
        yield frame(ExplorerFrame, progress=BUSY)
        return
    try:
        pipe = models.get(model_path)
        yield from _stream(pipe, spec, cache, str(model_path or models.default), seconds)
    except Exception as err:  # noqa: BLE001 - refused or failed: told in the progress line
        yield told(err)
    finally:
        SWEEP_LOCK.release()


def _stream(pipe, spec: SweepSpec, cache: SweepCache, model_path: str, seconds: float = SWEEP_SECONDS):
    name = pipe.name
    due, drawn, subtitle = Throttle(PROGRESS_INTERVAL_S), -1, subtitle_of(name, spec)
    progress = None
    for progress in sweep(pipe, spec, cache, DECODE_BUDGET, seconds, MAX_DECODES):
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
    except (ValueError, OSError) as err:  # a bad setting, or an unreadable model directory
        return frame(ExplorerFrame, progress=Problem(True, str(err)).markdown)
    known = cache.load(model_path, expected_engine(models, model_path), spec, DECODE_BUDGET)
    points = [known[c.key] for c in cells if c.key in known]
    decodes = len(cells) * spec.n * len(spec.tasks)
    return shown(points, model_path, cached_text(len(points), len(cells), decodes, stopped),
                 subtitle_of(model_name(model_path), spec))


def load_point(values, has_model: bool, model_path) -> tuple:
    """Playground updates for a point's settings: mode Custom, thresholds, MBE, block length, its tab."""
    try:
        s = pareto.parse_settings(values)
    except (ValueError, TypeError, KeyError, IndexError):
        return (gr.skip(),) * (7 + has_model)  # a click on no point (a header, an empty row)
    updates = ("Custom", s.tau_mask, s.tau_edit is not None, gr.skip() if s.tau_edit is None else s.tau_edit, s.mbe,
               s.block_length, gr.Tabs(selected="playground"))
    return updates + ((model_path,) if has_model else ())
