"""Calibrating presets (llada/eval/calibrate.py): the rule that picks S and Q, and the command end to end."""

import json

import pytest

from code_corpus import write_tree
from llada.eval import calibrate
from llada.eval.calibrate import Measured, choose
from llada.presets import load_presets


def cell(tau_mask, tau_edit, tasks, parses, code_tpf) -> Measured:
    return Measured(tau_mask, tau_edit, tasks, 3.0, parses, parses / 2, code_tpf)


GRID = [  # a small model: eager drafting is fast and loses quality, editing wins part of it back
    cell(0.15, None, 0.90, 0.10, 2.2), cell(0.15, 0.0, 0.95, 0.20, 2.0), cell(0.15, 0.5, 0.94, 0.18, 2.1),
    cell(0.3, None, 0.93, 0.20, 1.6), cell(0.3, 0.0, 0.96, 0.28, 1.5),
    cell(0.7, None, 0.96, 0.40, 0.8), cell(0.7, 0.5, 0.98, 0.42, 0.8), cell(0.7, 0.0, 0.97, 0.41, 0.8),
]


def test_q_is_the_best_quality_and_s_the_best_that_drafts_fast_enough_and_gains_from_editing():
    choice = choose(GRID)  # S at least 1.5x Q's code TPF (0.8)
    assert (choice.q.tau_mask, choice.q.tau_edit) == (0.7, 0.5)
    assert (choice.s.tau_mask, choice.s.tau_edit) == (0.3, 0.0) and choice.s_noedit == GRID[3]
    fast = choose(GRID, speedup=2.0)  # 0.3 drafts 1.9x Q: not fast enough; 0.15 with τ_edit 0 is the better of two
    assert (fast.s.tau_mask, fast.s.tau_edit) == (0.15, 0.0) and fast.s_noedit == GRID[0]
    assert "2.50x Q's" in fast.reason and "editing adds 7.5 points" in fast.reason


def test_no_s_when_editing_does_not_help_or_nothing_is_fast_enough():
    no_gain = [c if c.tau_edit is not None or c.tau_mask == 0.7 else cell(c.tau_mask, None, 0.99, 0.5, c.code_tpf)
               for c in GRID]
    assert choose(no_gain).s is None and "gains from editing" in choose(no_gain).reason
    assert choose(GRID, speedup=5).s is None
    with pytest.raises(ValueError, match="no cell with editing on"):
        choose([c for c in GRID if c.tau_edit is None])


def test_chosen_presets_keep_the_models_other_settings(tmp_path):
    (tmp_path / "presets.json").write_text(json.dumps({"S": {"threshold": 0.5, "eos_early_stop": True},
                                                       "M2T": {"threshold": 0.9}}))
    own = calibrate.chosen_presets(tmp_path, choose(GRID))
    assert own["S"] == {"threshold": 0.3, "editing_threshold": 0.0, "eos_early_stop": True}
    assert own["Q"] == {"threshold": 0.7, "editing_threshold": 0.5} and own["M2T"] == {"threshold": 0.9}


def test_the_command_measures_both_tracks_keeps_cells_and_writes_presets(tiny_model_dir, tmp_path, monkeypatch, capsys):
    write_tree(tmp_path / "src")
    model = tmp_path / "model"
    model.mkdir()
    for f in tiny_model_dir.iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "report.json"
    args = ["--model", str(model), "--n", "2", "--code-n", "2", "--code-gen-length", "8", "--code-root",
            str(tmp_path / "src"), "--tau-mask", "0.05,0.9", "--tau-edit", "off,0", "--cache-dir",
            str(tmp_path / "cache"), "--out", str(out), "--speedup", "1.0"]
    calibrate.main(args)
    report = json.loads(out.read_text())
    assert report["command"].startswith("python -m llada.eval.calibrate --model")
    assert {"commit", "date", "threads"} <= set(report["machine"]) and len(report["load_average"]["start"]) == 3
    assert [(c["tau_mask"], c["tau_edit"]) for c in report["cells"]] == [(0.05, None), (0.9, None), (0.05, 0.0),
                                                                        (0.9, 0.0)]
    assert report["chosen"]["Q"]["tau_edit"] == 0.0 and "| τ_mask |" in capsys.readouterr().out

    def no_decode(*a, **k):
        raise AssertionError("a cached cell was decoded again")

    monkeypatch.setattr("llada.eval.codetrack.evaluate_code_configs", no_decode)
    calibrate.main(args)  # every cell of both tracks from the cache
    assert json.loads(out.read_text())["cells"] == report["cells"]
    if report["chosen"]["S"] is None:  # a random model need not gain from editing
        with pytest.raises(SystemExit, match="not written"):
            calibrate.main(args + ["--write"])
        return
    calibrate.main(args + ["--write"])
    table = load_presets(model)
    assert table["S"]["threshold"] == report["chosen"]["S"]["tau_mask"]
    assert table["S_OFFICIAL"]["threshold"] == 0.5  # the official values stay one name away
