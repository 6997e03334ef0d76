"""The eval harness: JSON shape of UI_CONTRACT.md, determinism, the readable table."""

from __future__ import annotations

import pytest
import torch

from llada.eval import harness as evaluation
from llada.pipeline import Pipeline

KEYS = {"threshold", "editing_threshold", "accuracy", "tpf", "tps", "edits_per_100", "tasks"}


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread, no OpenMP waiting on shared cores
    yield Pipeline.load(tiny_model_dir)
    torch.set_num_threads(before)


def run(pipe, modes=None):
    return evaluation.evaluate(pipe, ["add", "sort"], n=2, seed=0, modes=modes, gen_length=8, progress=False)


def test_report_has_the_contract_shape(pipe):
    report = run(pipe)
    assert set(report) == {"model", "seed", "n", "modes"} and report["n"] == 2
    assert list(report["modes"]) == ["S", "Q", "M2T", "S_noedit", "S_MBE"]
    for name, mode in report["modes"].items():
        assert set(mode) == KEYS, name
        assert set(mode["tasks"]) == {"add", "sort"}
        assert all(set(t) == {"accuracy", "tpf"} for t in mode["tasks"].values())
        assert mode["accuracy"] == 0.0  # a random model never writes an exact sum or sorted digits
    assert report["modes"]["S_noedit"]["editing_threshold"] is None
    assert report["modes"]["S_noedit"]["edits_per_100"] == 0.0


def test_overall_numbers_weigh_tasks_equally_and_tokens_by_forward():
    report = evaluation.ModeReport(0.5, 0.0)
    report.tasks["add"] = evaluation.Tally(correct=1, items=2, tokens=10, forwards=5, seconds=2.0, edits=1)
    report.tasks["sort"] = evaluation.Tally(correct=4, items=4, tokens=6, forwards=3, seconds=1.0, edits=0)
    out = report.to_dict()
    assert out["accuracy"] == (1 / 2 + 4 / 4) / 2  # per-task accuracies averaged, as the paper averages benchmarks
    assert out["tpf"] == 16 / 8 and out["tps"] == 16 / 3 and out["edits_per_100"] == 100 / 16
    assert out["tasks"] == {"add": {"accuracy": 0.5, "tpf": 2.0}, "sort": {"accuracy": 1.0, "tpf": 2.0}}


def test_an_item_is_scored_by_exact_match_of_its_answer(pipe):
    from llada.eval.tasks import Item

    item = Item("add", "1+1=", "2")
    assert evaluation.score_item(pipe, item, evaluation.mode_config(pipe, "S", 8)).correct == 0
    assert item.check("2") and not item.check("2 ") and not item.check(" 2")


def test_report_is_deterministic_except_time(pipe):
    strip = lambda r: {m: {k: v for k, v in d.items() if k != "tps"} for m, d in r["modes"].items()}  # noqa: E731
    modes = ["S", "S_MBE"]
    assert strip(run(pipe, modes)) == strip(run(pipe, modes))


def test_table_and_cli_arguments(pipe, capsys):
    table = evaluation.format_table(run(pipe, ["S", "S_MBE"]))
    assert "| S_MBE |" in table and "add acc" in table
    with pytest.raises(SystemExit):
        evaluation.parse_args(["--tasks", "divide"])
    capsys.readouterr()
