"""Comparing the HumanEval+ scorer with EvalPlus: the sample sets, the reasons, the command.

The sets' programs run in the sandbox on a few real problems. The comparison with the `evalplus`
package itself runs where it is installed (EVALPLUS_PATH, default /tmp/evalplus-scratch; see
`llada/eval/evalplus_agree.py`) and is skipped elsewhere: it is not a dependency of the project. The
whole comparison (164 canonical, 464 wrong, 11 hostile programs and model completions) is in
bench/results/evalplus-agreement.json.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

from llada.eval.evalplus_agree import DEFAULT_PATH, Row, Sample, main, reason
from llada.eval.evalplus_samples import HOSTILE_PREFIX, _before_body, base_only, canonical, edge, hostile, wrong
from llada.eval.humaneval_data import Reference, load_problems
from llada.eval.humaneval_score import Verdict
from he_subset import subset_evaluator, write_subset

SUBSET = ("HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/32")
HAVE_EVALPLUS = Path(DEFAULT_PATH, "evalplus", "evaluate.py").is_file()


@pytest.fixture(scope="module")
def problems():
    return {p.task_id: p for p in load_problems()}


@pytest.fixture(scope="module")
def subset_file(tmp_path_factory) -> Path:
    return write_subset(tmp_path_factory.mktemp("agree"), SUBSET)


@pytest.fixture(scope="module")
def evaluator(subset_file, tmp_path_factory):
    return subset_evaluator(subset_file, tmp_path_factory.mktemp("cache"))


def test_every_mutant_parses_and_differs_from_the_canonical_program(problems):
    rows = wrong(list(problems.values()))
    counts = Counter(r["label"] for r in rows)
    assert counts["edge"] == counts["base_only"] == 164 and 100 <= counts["off_by_one"] < 164
    for r in rows:
        code = ast.unparse(ast.parse(r["solution"]))
        assert code != ast.unparse(ast.parse(problems[r["task_id"]].canonical)), r
    assert len(canonical(list(problems.values()))) == 164
    assert {r["label"] for r in hostile(list(problems.values()))} >= set(HOSTILE_PREFIX)


def test_the_mutants_fail_where_they_are_wrong(problems, evaluator):
    p0, p4 = problems["HumanEval/0"], problems["HumanEval/4"]
    gated = evaluator.check(p0, base_only(p0))
    assert gated.base and gated.plus is False and gated.error == "wrong"  # right on the base inputs only
    guarded = evaluator.check(p0, edge(p0))  # has_close_elements([], t) is False, not None: a plus input
    assert guarded.base and guarded.plus is False and guarded.error == "wrong"
    harmless = evaluator.check(p4, edge(p4))  # mean_absolute_deviation([]) is no input at all
    assert harmless.base and harmless.plus


def test_the_hostile_programs_fail_with_their_kind(problems, evaluator):
    by_task = {r["task_id"]: r for r in hostile(list(problems.values()))}
    kinds = {task: evaluator.check(problems[task], by_task[task]["solution"]).error
             for task in ("HumanEval/0", "HumanEval/2", "HumanEval/4")}
    assert kinds == {"HumanEval/0": "timeout", "HumanEval/2": "memory", "HumanEval/4": "exit"}


def _row(problems, task, ours, ep, label="x") -> Row:
    return Row(Sample("f.jsonl", 1, label, problems[task], ""), ours, ep)


def test_each_known_difference_is_named(problems):
    ours_pass = Verdict("HumanEval/32", True, True, None, "", 0.5)
    ep_32 = {"base_status": "fail", "plus_status": "fail", "base_details": [], "plus_details": []}
    row = _row(problems, "HumanEval/32", ours_pass, ep_32)
    assert not row.agrees and "find_zero oracle" in reason(row) and "0 of 100 base" in reason(row)
    refused = Verdict("HumanEval/0", False, False, "write", "write refused", 0.5)
    ep_pass = {"base_status": "pass", "plus_status": "pass", "base_details": [True], "plus_details": [True]}
    assert "refuses the write" in reason(_row(problems, "HumanEval/0", refused, ep_pass))
    odd = Verdict("HumanEval/0", False, False, "wrong", "input 3: wrong output", 0.5)
    assert reason(_row(problems, "HumanEval/0", odd, ep_pass)).startswith("unexplained")
    assert _row(problems, "HumanEval/0", ours_pass._replace(task_id="HumanEval/0"), ep_pass).agrees
    slow_ref = Reference([], [0.0] * 7, [], [0.0, 0.4, 0.0])  # plus input 1 takes the canonical solution 0.4 s
    ep_slow = {"base_status": "pass", "plus_status": "fail", "base_details": [True] * 7, "plus_details": [True, False]}
    slow = Row(Sample("f.jsonl", 1, "x", problems["HumanEval/0"], ""), ours_pass, ep_slow, slow_ref)
    assert reason(slow).startswith("a time limit, probably: EvalPlus fails plus input 1")
    quick = slow._replace(ref=Reference([], [0.0] * 7, [], [0.0, 0.001, 0.0]))
    assert reason(quick).startswith("unexplained")  # a quick input that fails is not blamed on the clock


def test_without_evalplus_the_command_says_how_to_install_it(tmp_path, capsys):
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return False\n"}) + "\n")
    assert main(["--samples", str(samples), "--evalplus-path", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no evalplus package in" in err and "pip install --no-deps --target" in err
    assert main(["--samples", str(tmp_path / "missing.jsonl"), "--evalplus-path", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.skipif(not HAVE_EVALPLUS, reason=f"evalplus is not installed in {DEFAULT_PATH} (not a dependency)")
def test_evalplus_agrees_but_for_the_known_differences(problems, subset_file, tmp_path, capsys):
    subset = [problems[t] for t in SUBSET]
    rows = canonical(subset) + wrong(subset) + [
        {"task_id": "HumanEval/0", "label": "swallowed_write",
         "solution": _before_body(problems["HumanEval/0"], "    try:\n        open('/x-outside', 'w')\n"
                                                           "    except Exception:\n        pass\n")}]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "agree.json"
    assert main(["--samples", str(samples), "--data", str(subset_file), "--cache", str(tmp_path / "cache"),
                 "--recheck", "--json", str(out)]) == 1  # 1: there are differences
    report = json.loads(out.read_text())
    assert report["evalplus_version"] == "0.3.1" and report["total"]["samples"] == len(rows)
    reasons = Counter(d["reason"].split(":")[0] for d in report["disagreements"])
    tasks = {(d["task_id"], d["label"]) for d in report["disagreements"]}
    assert all(t == "HumanEval/32" or label == "swallowed_write" for t, label in tasks), tasks
    assert ("HumanEval/32", "canonical") in tasks and ("HumanEval/0", "swallowed_write") in tasks
    assert not any(r.startswith("unexplained") for r in reasons), report["disagreements"]
    again = {(d["task_id"], d["label"]): d["second_run"] for d in report["disagreements"]}
    assert again[("HumanEval/0", "swallowed_write")] == {"ours": {"base": False, "plus": False, "error": "write"},
                                                        "evalplus": {"base": True, "plus": True}, "agrees": False}
    assert "per problem" in capsys.readouterr().out
