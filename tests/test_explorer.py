"""The Score | TPF explorer without a browser: the chart and table builders, the settings, the handlers."""

from __future__ import annotations

import csv
import threading

import gradio as gr
import pytest

from llada.eval.sweep import Cell, Point, Progress, engine_of, pareto_front
from llada.eval.sweep_cache import SweepCache
from ui.explorer import sweeps as explorer, view
from ui.render import pareto
from ui.models import Models


def point(acc: float, tpf: float, tau_mask: float = 0.5, tau_edit: float | None = 0.0, mbe: bool = False,
          preset: str = "", block: int = 32) -> Point:
    return Point(Cell(tau_mask, tau_edit, mbe, block, preset), acc, tpf, 100.0, 1.0, 8, 0, 0.1)


GRID_OFF = [point(0.9, 2.0, 0.7), point(0.8, 3.0, 0.3), point(0.7, 2.5, 0.5, None)]  # the last is dominated
GRID_ON = [point(0.95, 2.2, 0.7, mbe=True)]
PRESETS = [point(0.85, 3.5, 0.05, preset="S"), point(0.97, 1.5, 0.9, 0.5, preset="Q", block=16),
           point(0.85, 3.6, 0.05, mbe=True, preset="S")]
POINTS = GRID_OFF + GRID_ON + PRESETS


def traces(fig) -> dict:
    return {t.name: t for t in fig.data}


# ---- the chart --------------------------------------------------------------------------------------------

def test_chart_has_two_series_their_fronts_and_the_presets():
    by_name = traces(pareto.figure(POINTS, subtitle="tiny · 1 task × 2 items"))
    assert set(by_name) == {"MBE off", "MBE off: Pareto front", "MBE on", "MBE on: Pareto front",
                            "presets (S, Q, M2T)"}
    off, on = by_name["MBE off"], by_name["MBE on"]
    assert list(off.x) == [2.0, 3.0, 2.5] and list(off.y) == [90.0, 80.0, 70.0]  # presets are drawn as stars only
    assert off.marker.symbol != on.marker.symbol and off.marker.color != on.marker.color
    assert [list(c) for c in off.customdata] == [[0.7, "0", False, 32], [0.3, "0", False, 32], [0.5, "off", False, 32]]
    # the MBE-off front runs through Q (1.5, 97), the τ_mask 0.7 cell (2, 90) and S (3.5, 85); 3.0/80 loses to S
    front = by_name["MBE off: Pareto front"]
    assert list(zip(front.x, front.y)) == [(1.5, 97.0), (2.0, 90.0), (3.5, 85.0)]
    assert list(zip(by_name["MBE on: Pareto front"].x, by_name["MBE on: Pareto front"].y)) == [(2.2, 95.0),
                                                                                               (3.6, 85.0)]
    stars = by_name["presets (S, Q, M2T)"]
    assert list(stars.text) == ["S", "Q", "S + MBE"] and stars.marker.symbol == "star"
    assert [list(c) for c in stars.customdata][1] == [0.9, "0.5", False, 16]


def test_presets_on_one_spot_share_one_label():
    q, q_mbe, s = point(0.9, 2.0, preset="Q"), point(0.9, 2.0, mbe=True, preset="Q"), point(0.8, 3.0, preset="S")
    assert pareto.preset_labels([q, s, q_mbe]) == ["Q / Q + MBE", "S", ""]


def test_chart_front_matches_the_engine_front():
    front = traces(pareto.figure(GRID_OFF))["MBE off: Pareto front"]
    expected = pareto_front(GRID_OFF)
    assert list(front.x) == [p.tpf for p in expected] == [2.0, 3.0]


def test_an_empty_chart_says_what_to_do():
    fig = pareto.figure([])
    assert fig.data == () and "Run sweep" in fig.layout.annotations[0].text


def test_one_series_alone_is_drawn_alone():
    assert set(traces(pareto.figure(GRID_ON))) == {"MBE on", "MBE on: Pareto front"}


@pytest.mark.parametrize("accs, expected", [([0.0, 0.0], [0.0, 10.0]), ([0.85, 1.0], [80.0, 100.0]),
                                            ([0.5, 0.52], [45.0, 57.0]), ([0.99, 1.0], [90.0, 100.0])])
def test_accuracy_axis_fits_the_points(accs, expected):
    assert pareto.accuracy_range([point(a, 1.0, tau_mask=i / 10) for i, a in enumerate(accs)]) == expected


# ---- the table and the settings it loads --------------------------------------------------------------------

def test_table_rows_load_the_settings_of_their_points():
    table = pareto.table(POINTS)
    assert list(table.columns) == pareto.COLUMNS and len(table) == len(POINTS)
    assert list(table["series"]) == ["MBE off"] * 5 + ["MBE on"] * 2  # best accuracy first in each series
    assert list(table["accuracy %"][:5]) == [97.0, 90.0, 85.0, 80.0, 70.0]
    assert list(table["front"][:5]) == ["★", "★", "★", "", ""]
    loaded = {pareto.parse_settings(row) for row in table.astype(str).values.tolist()}  # rows come back as text
    assert loaded == {pareto.Settings(p.cell.tau_mask, p.cell.tau_edit, p.cell.mbe, p.cell.block_length)
                      for p in POINTS}


@pytest.mark.parametrize("values", [[], ["x", "off", False, 8], [0.5, "often", False, 8], [None] * 4,
                                    ["MBE on", "", "0.5"]])
def test_settings_that_are_not_a_point_are_refused(values):
    with pytest.raises(ValueError, match="not a sweep point's settings"):
        pareto.parse_settings(values)


def test_a_point_loads_into_the_playground_as_custom():
    mode, tau_mask, edit, tau_edit, mbe, block, tabs = explorer.load_point([0.3, "off", True, 16], False, "m")
    assert (mode, tau_mask, edit, mbe, block) == ("Custom", 0.3, False, True, 16)
    assert isinstance(tau_edit, type(gr.skip())) and tabs.selected == "playground"  # editing off keeps τ_edit
    updates = explorer.load_point(["MBE off", "Q", "0.9", "0.5", "16", "97.0"], True, "models/a")
    assert updates[:6] == ("Custom", 0.9, True, 0.5, False, 16) and updates[-1] == "models/a"
    assert all(isinstance(u, type(gr.skip())) for u in explorer.load_point(["series", "preset"], True, "m"))


# ---- the tab's settings and text -----------------------------------------------------------------------------

def test_settings_become_a_spec():
    spec = explorer.spec_of(["0.9", "0.05"], ["0.5", "off"], ["on", "off"], ["add"], 3, 16.0)
    assert (spec.tau_masks, spec.tau_edits, spec.mbe, spec.n, spec.block_length) == ((0.05, 0.9), (None, 0.5),
                                                                                     (False, True), 3, 16)


@pytest.mark.parametrize("args, words", [
    (([], ["off"], ["off"], ["add"], 1, 8), "choose at least one τ_mask value"),
    ((["0.5"], ["off"], [], ["add"], 1, 8), "choose at least one MBE series value"),
    ((["0.5"], ["sometimes"], ["off"], ["add"], 1, 8), "τ values must be numbers in [0, 1] or off"),
    ((["0.5"], ["off"], ["off"], ["add"], 0, 8), "items per task must be a whole number from 1 to 25, got 0"),
    ((["0.5"], ["off"], ["off"], ["add"], 2.5, 8), "items per task must be a whole number"),
    ((["0.5"], ["off"], ["off"], ["add"], 1, float("nan")), "block length must be a whole number from 4 to 128"),
    ((["0.5"], ["off"], ["off"], ["poetry"], 1, 8), "tasks must be some of"),
])
def test_bad_settings_are_refused_by_name(args, words):
    with pytest.raises(ValueError) as err:
        explorer.spec_of(*args)
    assert words in str(err.value)


def test_progress_lines():
    running = Progress(done=30, total=90, cells=9, points=(POINTS[0],) * 3, cached=1, decoded=20, seconds=10.0)
    assert explorer.progress_text("tiny", running) == ("Sweeping **tiny**: 3 of 9 points (1 from the cache) · "
                                                       "30 of 90 decodes (33%) · 10 s, about 30 s left")
    done = running._replace(done=90, points=(POINTS[0],) * 9, status="done")
    assert explorer.progress_text("tiny", done).startswith("**Done**: 9 of 9 points (1 from the cache) of **tiny**")
    stopped = running._replace(status="stopped", note="time budget reached: 300 s per sweep")
    assert "**Stopped** after 10 s (time budget reached: 300 s per sweep): 3 of 9 points" in \
        explorer.progress_text("tiny", stopped)


# ---- the handlers on the tiny model ---------------------------------------------------------------------------

SETTINGS = (["0.5"], ["off", "0.5"], ["off"], ["add"], 1, 8)


@pytest.fixture(scope="module")
def models(tiny_model_dir):
    return Models([str(tiny_model_dir)])


def test_expected_engine_is_the_loaded_models(models):
    assert explorer.expected_engine(models, models.default) == engine_of(models.get(models.default))


def test_a_sweep_streams_then_the_tab_shows_it_from_the_cache(models, tmp_path):
    cache = SweepCache(tmp_path)
    frames = list(explorer.run_sweep(models, cache, models.default, *SETTINGS))
    name = models.get(models.default).name
    assert frames[0].progress.startswith(f"Sweeping **{name}**: 0 of 5 points")  # 2 grid cells, S, Q, M2T
    last = frames[-1]
    assert last.progress.startswith("**Done**: 5 of 5 points") and len(last.table) == 5
    with open(last.csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["preset"] for r in rows] == ["", "", "S", "Q", "M2T"]
    again = explorer.show_cached(models, cache, models.default, *SETTINGS)
    assert again.progress.startswith("All 5 points of this grid come from the cache")
    assert again.table.equals(last.table)
    fewer = explorer.show_cached(models, cache, models.default, ["0.5", "0.9"], *SETTINGS[1:])
    assert fewer.progress.startswith("5 of 7 points of this grid are cached; **Run sweep** measures the other 2")


def test_a_second_sweep_waits_for_the_first_then_says_so(models, tmp_path, monkeypatch):
    monkeypatch.setattr(explorer, "LOCK_WAIT_S", 0.05)
    held = threading.Event()
    with explorer.SWEEP_LOCK:
        held.set()
        (only,) = explorer.run_sweep(models, SweepCache(tmp_path), models.default, *SETTINGS)
    assert "Another sweep is running" in only.progress and not explorer.SWEEP_LOCK.locked()


def test_refused_settings_and_models_are_explained(models, tmp_path):
    (frame,) = explorer.run_sweep(models, SweepCache(tmp_path), models.default, [], *SETTINGS[1:])
    assert frame.progress == "**Refused:** choose at least one τ_mask value"
    shown = explorer.show_cached(models, SweepCache(tmp_path), "/elsewhere", *SETTINGS)
    assert shown.progress.startswith("**Refused:** unknown model '/elsewhere'")


def test_the_sweep_runs_in_the_playgrounds_decode_group_and_stop_cancels_it(models, tmp_path):
    from ui.frame import DECODE_CONCURRENCY

    with gr.Blocks() as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Playground", id="playground"):
                pg = view.PointTargets(mode=gr.Radio(["S", "Custom"]), tau_mask=gr.Slider(), edit=gr.Checkbox(),
                                       tau_edit=gr.Slider(), mbe=gr.Checkbox(), block_length=gr.Slider(4, 128))
            with gr.Tab("Score | TPF", id="explorer"):
                parts = view.build_view(models)
        view.wire(models, parts, pg, tabs, cache_dir=tmp_path)
    fns = {fn.name: fn for fn in demo.fns.values()}
    run = fns["run"]
    assert (run.concurrency_id, run.concurrency_limit) == ("decode", DECODE_CONCURRENCY)
    free = fns["sweep_free"]  # Run sweep checks for a running sweep first, without a decode slot; then it runs
    assert [target for target, _ in free.targets] == [parts.run._id] and free.concurrency_id != "decode"
    assert run.trigger_after == free._id and run.trigger_only_on_success
    cancels = [fn for fn in demo.fns.values() if fn.is_cancel_function and run._id in fn.cancels]
    assert [target for fn in cancels for target, _ in fn.targets] == [parts.stop._id]
