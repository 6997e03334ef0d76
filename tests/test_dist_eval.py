"""Evaluations across workers (`llada.dist.share`): 2 gloo ranks split HumanEval's problems (or a sweep's
cells), rank 0 writes the report one process writes.

One torchrun launch (its start-up costs seconds) runs the embedded model on 3 problems (an odd count: the ranks
get 2 and 1) and is compared with one process's run of the same command in this process: the same rows in the
problems' order, the same scores, forwards and edits; only the times differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from he_subset import write_subset
from llada.dist.share import gather, share
from llada.eval.humaneval import parse_args, run

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT = 600  # seconds for the 2-rank run on a loaded machine; a hang fails here instead of blocking CI
PROBLEMS = ("HumanEval/0", "HumanEval/2", "HumanEval/4")
TIMES = {"seconds", "check_seconds", "tps", "wall_seconds", "out"}  # what may differ between the two runs


def test_share_deals_every_world_th_item_and_gather_restores_the_order():
    from llada.dist.group import Ranks

    items = list(range(7))
    shares = [share(items, Ranks(r, 3)) for r in range(3)]
    assert shares == [[0, 3, 6], [1, 4], [2, 5]]
    assert share(items, None) == items and gather(items, None) == items


def humaneval_args(subset: Path, cache: Path, out: Path) -> list[str]:
    return ["--model", "assets/model", "--data", str(subset), "--modes", "S", "--plus", "--gen-length", "16",
            "--batch", "2", "--cache", str(cache), "--out", str(out), "--json", "--quiet"]


def without_times(value):
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same evaluation by one process and by 2 ranks: their output folders and rank 0's printout."""
    root = tmp_path_factory.mktemp("he_dist")
    subset = write_subset(root, PROBLEMS)
    old = Path.cwd()
    os.chdir(ROOT)  # assets/model, as the command line gives it
    try:
        run(parse_args(humaneval_args(subset, root / "cache", root / "one")))
    finally:
        os.chdir(old)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launch = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "llada.eval", "humaneval",
                             *humaneval_args(subset, root / "cache", root / "two")],
                            capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)
    assert launch.returncode == 0, launch.stderr
    return {"one": root / "one", "two": root / "two", "stdout": launch.stdout}


def test_two_ranks_write_the_report_of_one_process(runs):
    one = json.loads((runs["one"] / "report.json").read_text())
    two = json.loads((runs["two"] / "report.json").read_text())
    assert json.loads(runs["stdout"]) == two, "rank 0 prints the report, once"
    assert two["n"] == len(PROBLEMS) and two["modes"]["S"]["forwards"] > 0
    assert without_times(two) == without_times(one)


def test_two_ranks_write_the_rows_of_one_process_in_the_problems_order(runs):
    rows = {name: [json.loads(line) for line in (runs[name] / "S.jsonl").read_text().splitlines()]
            for name in ("one", "two")}
    assert [r["task_id"] for r in rows["two"]] == list(PROBLEMS)
    assert [without_times(r) for r in rows["two"]] == [without_times(r) for r in rows["one"]]


SWEEP = ["--model", "assets/model", "--per-task", "2", "--tasks", "add,sort,reverse", "--tau-mask", "0.5,0.99,0.999",
         "--tau-edit", "off,0", "--mbe", "off", "--presets", "S", "--no-cache", "--json"]  # 7 cells: 4 and 3


def test_two_ranks_measure_the_sweep_of_one_process(capsys, monkeypatch):
    from llada.eval.sweep import main

    monkeypatch.chdir(ROOT)
    main(SWEEP)
    alone = json.loads(capsys.readouterr().out)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launch = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "llada.eval.sweep", *SWEEP],
                            capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)
    assert launch.returncode == 0, launch.stderr
    split = json.loads(launch.stdout)  # rank 0 prints, once
    assert [(p["preset"], p["tau_mask"], p["tau_edit"]) for p in split["points"]] == \
        [(p["preset"], p["tau_mask"], p["tau_edit"]) for p in alone["points"]]  # the grid's order
    assert len({p["tpf"] for p in alone["points"]}) > 1  # cells that differ, so an order mix-up shows
    assert without_times(split) == without_times(alone)
