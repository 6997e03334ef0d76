"""The eval harness: JSON shape of UI_CONTRACT.md, determinism, the readable table."""

from __future__ import annotations

import pytest
import torch

from llada import eval as evaluation
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
        assert 0.0 <= mode["accuracy"] <= 1.0 and mode["tpf"] > 0
    assert report["modes"]["S_noedit"]["editing_threshold"] is None
    assert report["modes"]["S_noedit"]["edits_per_100"] == 0.0


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
