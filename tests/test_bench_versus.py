"""The versus benchmark: run order, timing-free comparison, ratios, and the explorer grid it runs."""

from llada.bench.versus import EXPLORER_GRID, Run, order, summary, without_timing
from llada.data.tasks import TASKS
from llada.eval.sweep import parse_args
from ui.explorer.sweeps import DEFAULTS, spec_of


def test_order_alternates_so_each_repeat_starts_where_the_last_ended():
    assert order(3) == [(0, "before"), (0, "after"), (1, "after"), (1, "before"), (2, "before"), (2, "after")]


def test_without_timing_drops_tps_and_seconds_at_any_depth():
    report = {"tps": 3.0, "modes": {"S": {"accuracy": 0.5, "tps": 9.0}}, "points": [{"seconds": 1.0, "tpf": 2.0}]}
    assert without_timing(report) == {"modes": {"S": {"accuracy": 0.5}}, "points": [{"tpf": 2.0}]}


def test_summary_ratio_is_before_over_after():
    load = (1.0, 1.0, 1.0)
    runs = [Run("before", 0, 30.0, 20.0, load, load), Run("after", 0, 10.0, 5.0, load, load),
            Run("after", 1, 12.0, 5.0, load, load), Run("before", 1, 30.0, 20.0, load, load)]
    out = summary(runs)
    assert out["wall_s"]["ratio"] == round(30.0 / 11.0, 2)
    assert out["wall_s"]["ratio_per_repeat"] == [3.0, 2.5]
    assert out["cpu_s"]["ratio"] == 4.0


def test_explorer_workload_is_the_tabs_default_grid():
    _, spec = parse_args(EXPLORER_GRID)
    shown = spec_of(DEFAULTS["tau_masks"], DEFAULTS["tau_edits"], DEFAULTS["mbe"], list(TASKS), DEFAULTS["n"], 32)
    assert spec.tasks == shown.tasks and spec.n == shown.n
    assert (spec.tau_masks, spec.tau_edits, spec.mbe, spec.presets) == (shown.tau_masks, shown.tau_edits, shown.mbe,
                                                                         shown.presets)
