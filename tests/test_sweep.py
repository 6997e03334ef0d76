"""Score | TPF sweeps: the grid's cells, the Pareto front, progress, bounds, the cache and the command line."""

from __future__ import annotations

import csv
import io
import json

import pytest

from llada.budget import Budget
from llada.eval import sweep as sw
from llada.eval import sweep_report as report
from llada.eval.sweep_cache import SweepCache, model_fingerprint
from llada.pipeline import Pipeline

TIMING = {"tps", "seconds"}  # wall-clock numbers: the only ones allowed to differ between two runs


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return Pipeline.load(tiny_model_dir)


def tiny_spec(**changes) -> sw.SweepSpec:
    values = {"tau_masks": (0.9, 0.3), "tau_edits": (0.5, None), "mbe": (True, False), "presets": (),
              "tasks": ("add", "sort"), "n": 1, "block_length": 8, "gen_length": 8}
    return sw.SweepSpec(**(values | changes))


def run(pipe, spec, cache=None, **kw) -> list[sw.Progress]:
    return list(sw.sweep(pipe, spec, cache, **kw))


def counting(monkeypatch, pipe) -> list:
    """Count the decodes a sweep runs (each one a row of a batch, streamed once)."""
    calls, row = [], sw.SharedBatch.row
    monkeypatch.setattr(sw.SharedBatch, "row", lambda self, index: calls.append(index) or row(self, index))
    return calls


def without_timing(points) -> list[dict]:
    return [{k: v for k, v in p.to_dict().items() if k not in TIMING} for p in points]


def point(acc: float, tpf: float, mbe: bool = False, tau_mask: float = 0.5) -> sw.Point:
    return sw.Point(sw.Cell(tau_mask, 0.0, mbe, 32), acc, tpf, 0.0, 0.0, 8, 0, 0.0)


# ---- the grid -------------------------------------------------------------------------------------------

def test_cells_are_the_grid_in_order_then_the_presets(pipe):
    cells = tiny_spec(presets=("S", "M2T")).cells(pipe.presets)
    keys = [c.key for c in cells]
    assert keys == ["grid|0.3|off|nombe|8", "grid|0.9|off|nombe|8", "grid|0.3|0.5|nombe|8", "grid|0.9|0.5|nombe|8",
                    "grid|0.3|0.5|mbe|8", "grid|0.9|0.5|mbe|8",  # MBE without editing is not a cell
                    "S|0.5|0|nombe|32", "S|0.5|0|mbe|32", "M2T|0.95|off|nombe|32"]  # official presets
    cfg = cells[4].config(pipe, 8)
    assert (cfg.threshold, cfg.editing_threshold, cfg.mbe, cfg.block_length, cfg.eos_early_stop) == (0.3, 0.5, True,
                                                                                                     8, True)


@pytest.mark.parametrize("changes, words", [
    ({"tau_masks": (1.5,)}, "tau_mask values must be numbers in [0, 1]"),
    ({"tau_edits": ("0.5",)}, "tau_edit values"),
    ({"tau_masks": (None,)}, "only tau_edit may be off"),
    ({"tasks": ("add", "poetry")}, "tasks must be some of add, sort, reverse, rename"),
    ({"n": 0}, "n (items per task) must be a whole number in [1, 200]"),
    ({"split": "test"}, "split"),
])
def test_a_bad_spec_is_refused_by_name(changes, words):
    with pytest.raises(ValueError) as err:
        tiny_spec(**changes)
    assert words in str(err.value)


def test_an_unknown_preset_is_refused(pipe):
    with pytest.raises(ValueError, match="unknown preset 'X'"):
        tiny_spec(presets=("X",)).cells(pipe.presets)


# ---- the Pareto front -------------------------------------------------------------------------------------

def test_pareto_front_of_hand_made_points():
    a, a_twin, b = point(0.9, 2.0), point(0.9, 2.0, tau_mask=0.6), point(0.8, 3.0)
    c, d, e, f = point(0.7, 2.5), point(0.9, 1.5), point(0.5, 4.0), point(0.5, 3.5)
    front = sw.pareto_front([c, a, d, e, b, f, a_twin])
    # c loses to b on both axes, d to a on TPF, f to e on TPF; equal points do not beat each other
    assert front == [a, a_twin, b, e]
    assert sw.pareto_front([]) == [] and sw.pareto_front([c]) == [c]


def test_csv_marks_the_front_of_each_mbe_series_apart():
    points = [point(0.9, 2.0), point(0.5, 1.0, tau_mask=0.7), point(0.6, 1.0, mbe=True)]  # MBE on: a series of one
    assert [r["front"] for r in report.rows(points)] == [True, False, True]


# ---- a sweep on the tiny model ----------------------------------------------------------------------------

def test_sweep_yields_progress_then_every_point(pipe):
    updates = run(pipe, tiny_spec(presets=("S",)))
    cells = tiny_spec(presets=("S",)).cells(pipe.presets)
    assert [u.done for u in updates] == sorted(u.done for u in updates)  # progress never goes back
    assert updates[0].done == 0 and updates[-1].done == updates[-1].total == len(cells) * 2
    assert updates[-1].status == "done" and updates[-1].decoded == len(cells) * 2
    completed = [u.point for u in updates if u.point is not None]
    assert [p.cell for p in completed] == cells == [p.cell for p in updates[-1].points]
    for p in completed:
        assert p.items == 2 and p.cut == 0 and set(p.tasks) == {"add", "sort"}
        assert p.accuracy == 0.0  # a random model never writes an exact sum or sorted digits
        assert p.tpf > 0


def test_sweep_is_deterministic_except_time(pipe):
    spec = tiny_spec(tau_masks=(0.3,))
    first, second = run(pipe, spec)[-1].points, run(pipe, spec)[-1].points
    assert without_timing(first) == without_timing(second)
    def strip(text):
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(io.StringIO(text))]

    assert strip(report.to_csv(list(first))) == strip(report.to_csv(list(second)))


def test_csv_and_json_hold_one_row_per_point(pipe):
    points = list(run(pipe, tiny_spec(tau_masks=(0.5,), tau_edits=(0.0,), mbe=(False,)))[-1].points)
    table = list(csv.DictReader(io.StringIO(report.to_csv(points))))
    assert list(table[0]) == ["preset", "tau_mask", "tau_edit", "mbe", "block_length", "accuracy", "tpf", "tps",
                              "edits_per_100", "items", "cut", "front", "add_accuracy", "sort_accuracy"]
    assert len(table) == 1 and table[0]["tau_edit"] == "0.0" and table[0]["mbe"] == "False"
    data = json.loads(json.dumps(report.to_json(pipe, tiny_spec(), points)))
    assert data["points"][0]["tpf"] == pytest.approx(points[0].tpf, abs=1e-4)  # rounded to 4 places


def test_a_preset_equal_to_a_grid_cell_is_decoded_once(pipe, monkeypatch):
    calls = counting(monkeypatch, pipe)
    # the grid's one cell is the official S preset
    spec = tiny_spec(tau_masks=(0.5,), tau_edits=(0.0,), mbe=(False,), presets=("S",), block_length=32)
    last = run(pipe, spec)[-1]
    grid, preset = last.points
    assert preset.cell.preset == "S" and grid.cell.preset == ""
    assert without_timing([grid])[0] | {"preset": "S"} == without_timing([preset])[0]
    assert len(calls) == 2 and last.done == last.total  # one cell's items (the warm-up is not a stream), none for S


# ---- bounds -----------------------------------------------------------------------------------------------

def test_a_grid_over_the_cap_is_refused_before_decoding(pipe, monkeypatch):
    calls = counting(monkeypatch, pipe)
    with pytest.raises(ValueError, match=r"needs 12 decodes \(6 cells x 2 items\); at most 11"):
        run(pipe, tiny_spec(), max_decodes=11)
    assert calls == []


def test_each_decode_is_bounded_and_a_cut_one_counts_wrong(pipe):
    last = run(pipe, tiny_spec(tau_masks=(1.0,), tau_edits=(0.5,), mbe=(False,)),
               budget=Budget(forwards=2))[-1]
    (p,) = last.points
    assert p.cut == p.items == 2 and p.accuracy == 0.0
    # cut after its 2 forwards: tau_mask 1.0 drafts one token per forward (nothing passes p > 1), so the first
    # block of 8 holds 2 tokens and 6 masks and no token is output (a third forward would give TPF 1/6 or more)
    assert p.tpf == 0.0 and p.tasks == {"add": {"accuracy": 0.0, "tpf": 0.0}, "sort": {"accuracy": 0.0, "tpf": 0.0}}


def test_a_sweep_out_of_time_stops_and_says_so(pipe):
    updates = run(pipe, tiny_spec(), max_seconds=0.0)
    assert updates[-1].status == "stopped" and "time budget reached" in updates[-1].note
    assert updates[-1].points == () and updates[-1].done == 0


# ---- the cache --------------------------------------------------------------------------------------------

def test_a_second_sweep_reads_every_point_from_the_cache(pipe, tmp_path, monkeypatch):
    cache = SweepCache(tmp_path)
    first = run(pipe, tiny_spec(), cache)[-1]
    calls = counting(monkeypatch, pipe)
    updates = run(pipe, tiny_spec(), cache)
    assert calls == [] and updates[0].cached == len(first.points) and updates[0].done == first.total
    assert updates[-1].points == first.points and updates[-1].decoded == 0
    (path,) = tmp_path.glob("*.json")
    assert path.name.startswith(pipe.path.name + "-")


def test_a_stopped_sweep_continues_where_it_stopped(pipe, tmp_path, monkeypatch):
    cache = SweepCache(tmp_path)
    for update in sw.sweep(pipe, tiny_spec(), cache):
        if len(update.points) == 3:
            break  # the caller stops (a closed tab, Stop): the three finished points are kept
    calls = counting(monkeypatch, pipe)
    last = run(pipe, tiny_spec(), cache)[-1]
    assert last.cached == 3 and len(calls) == (6 - 3) * 2  # only the three missing cells


def test_a_grid_sharing_cells_shares_their_points(pipe, tmp_path, monkeypatch):
    cache = SweepCache(tmp_path)
    run(pipe, tiny_spec(tau_masks=(0.3,)), cache)
    calls = counting(monkeypatch, pipe)
    last = run(pipe, tiny_spec(), cache)[-1]
    assert last.cached == 3 and len(calls) == 3 * 2  # τ_mask 0.9 adds three cells


def test_other_items_or_weights_use_another_file(pipe, tmp_path):
    cache = SweepCache(tmp_path)
    base = cache.path(pipe.path, "cpu/float32", tiny_spec(), Budget())
    assert cache.path(pipe.path, "cpu/float32", tiny_spec(tau_masks=(0.1,)), Budget()) == base  # same items
    for other in (cache.path(pipe.path, "cpu/float32", tiny_spec(n=3), Budget()),
                  cache.path(pipe.path, "cpu/float32", tiny_spec(seed=1), Budget()),
                  cache.path(pipe.path, "cuda/bfloat16", tiny_spec(), Budget()),
                  cache.path(pipe.path, "cpu/float32", tiny_spec(), Budget(forwards=9))):
        assert other != base


def test_the_fingerprint_follows_the_weights_not_the_readme(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(bytes(1000))
    before = model_fingerprint(tmp_path)
    (tmp_path / "README.md").write_text("notes")
    assert model_fingerprint(tmp_path) == before
    (tmp_path / "model.safetensors").write_bytes(bytes(999) + b"\x01")  # same size, one byte changed
    assert model_fingerprint(tmp_path) != before


def test_an_unreadable_cache_file_is_ignored(pipe, tmp_path):
    cache = SweepCache(tmp_path)
    path = cache.path(pipe.path, sw.engine_of(pipe), tiny_spec(), sw.DECODE_BUDGET)
    path.write_text("{not json")
    assert run(pipe, tiny_spec(tau_masks=(0.3,), tau_edits=(0.5,), mbe=(False,)), cache)[-1].cached == 0
    assert len(json.loads(path.read_text())["points"]) == 1  # rewritten whole


# ---- the command line -------------------------------------------------------------------------------------

def test_command_line_prints_csv_and_json(tiny_model_dir, tmp_path, capsys):
    args = ["--model", str(tiny_model_dir), "--n", "1", "--tau-mask", "0.5", "--tau-edit", "off,0", "--mbe", "off",
            "--presets", "", "--tasks", "add", "--gen-length", "8", "--cache-dir", str(tmp_path)]
    sw.main(args + ["--csv"])
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["tau_mask"], r["tau_edit"]) for r in table] == [("0.5", "off"), ("0.5", "0.0")]
    sw.main(args + ["--json"])
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["n"] == 1 and len(data["points"]) == 2 and "2 from the cache" in out.err


@pytest.mark.parametrize("bad, words", [(["--tau-mask", "fast"], "--tau-mask: 'fast' is not a number"),
                                        (["--mbe", "maybe"], "--mbe: 'maybe' is not off or on"),
                                        (["--tasks", "poetry"], "tasks must be some of")])
def test_command_line_refuses_bad_values(bad, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        sw.parse_args(bad)
    assert exit_.value.code == 2 and words in capsys.readouterr().err
