"""HumanEval / HumanEval+: the data, EvalPlus's comparison and extraction, the evaluator and the command.

The evaluator tests run real programs in the sandbox on a subset of the real problems (chosen for a
float atol, HumanEval/32's oracle, outputs long enough to travel as digests, and quick canonical runs);
the full 164 (canonical: 164/164 on both) is docs/humaneval.md's command.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from llada.eval.humaneval import decode_problems, fit_gen_length, format_table
from llada.presets import load_presets
from llada.eval.humaneval_child import decode, digest, encode, matches
from llada.eval.humaneval_data import HumanEvalError, load_problems
from llada.eval.humaneval_prompt import INSTRUCTION, Prompt, build_prompt, code_extract, sanitize, solution_of
from llada.eval.humaneval_score import read_samples
from llada.pipeline import Pipeline
from he_subset import subset_evaluator, write_subset

ROOT = Path(__file__).resolve().parents[1]
SUBSET = ("HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/32", "HumanEval/53", "HumanEval/106",
          "HumanEval/123")


@pytest.fixture(scope="module")
def problems():
    return {p.task_id: p for p in load_problems()}


@pytest.fixture(scope="module")
def subset_file(problems, tmp_path_factory) -> Path:
    """The subset as an EvalPlus data file (rows as they are in the shipped file)."""
    return write_subset(tmp_path_factory.mktemp("he"), SUBSET)


@pytest.fixture(scope="module")
def evaluator(subset_file, tmp_path_factory):
    return subset_evaluator(subset_file, tmp_path_factory.mktemp("cache"))


def test_the_shipped_data_is_all_of_humaneval_plus(problems):
    assert len(problems) == 164 and list(problems)[0] == "HumanEval/0"
    assert sum(len(p.base_input) for p in problems.values()) == 1570
    assert sum(len(p.plus_input) for p in problems.values()) == 122683
    assert (ROOT / "assets" / "humanevalplus" / "LICENSE").read_text().count("Apache License") >= 1


def test_a_broken_data_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "X/0", "prompt": "def f():"}\n')
    with pytest.raises(HumanEvalError, match="line 1 lacks entry_point"):
        load_problems(bad)
    with pytest.raises(HumanEvalError, match="cannot read"):
        load_problems(tmp_path / "missing.jsonl.gz")


def test_values_travel_with_their_types():
    value = [(1, 2.5), {3, 4}, {1: "a", (2, 3): None}, float("inf"), -float("inf"), 10 ** 5000, b"\x00x", 1j, True]
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back[0]) is tuple and type(back[1]) is set and back[-1] is True
    assert math.isnan(decode(json.loads(json.dumps(encode(float("nan"))))))
    with pytest.raises(TypeError, match="cannot be encoded"):
        encode(object())


def test_a_digest_equates_what_python_equates():
    assert digest([1, 2.0, -0.0]) == digest([1.0, 2, 0])  # 1 == 1.0, -0.0 == 0.0
    assert digest({1: "a"}) == digest({1.0: "a"}) and digest({1, 2}) == digest(frozenset({2, 1}))
    assert digest((1, 2)) != digest([1, 2]) and digest(["1"]) != digest([1])  # (1, 2) != [1, 2]
    assert digest([2 ** 60]) != digest([2 ** 60 + 1])  # big ints are not rounded through floats


@pytest.mark.parametrize("out, exp, ok", [
    (0.1 + 0.2, 0.3, True),  # a float expected: atol 1e-6 (EvalPlus)
    (3, 3.0, True),  # equal: ==
    ([1.0, 2.0], (1.0, 2.0), False),  # close floats need the same type
    ([1.0, 2.0000001], [1.0, 2.0], True),
    ([1.0], [1.0, 2.0], False),
    ("1", 1, False),
    (None, 0.5, False),
])
def test_outputs_are_compared_as_evalplus_compares_them(out, exp, ok):
    assert matches(out, exp, [], 0, "f")[0] is ok


def test_find_zero_passes_on_its_oracle():
    xs = [-6, 11, -6, 1]  # (x - 1)(x - 2)(x - 3)
    assert matches(2.00000001, 1.0, [xs], 1e-4, "find_zero")[0]  # a root other than the canonical one
    assert not matches(1.5, 1.0, [xs], 1e-4, "find_zero")[0]


def test_sanitize_keeps_what_the_entry_point_needs():
    reply = ("Here is the code:\n```python\nimport math\n\ndef helper(x):\n    return math.sqrt(x)\n\n"
             "def unused():\n    return 0\n\ndef f(x):\n    return helper(x) + K\n\nK = 1\n\n"
             "if __name__ == '__main__':\n    print(f(4))\n```\nIt uses a helper.")
    assert sanitize(reply, "f") == ("import math\ndef helper(x):\n    return math.sqrt(x)\n"
                                    "def f(x):\n    return helper(x) + K\nK = 1")
    decorated = "import functools\n@functools.lru_cache(None)\ndef f(n):\n    return n if n < 2 else f(n - 1)\n"
    assert sanitize(decorated, "f") == decorated.strip()
    assert code_extract("no code here at all\nnor here") == "no code here at all"


def test_a_base_model_continues_the_code_prefix(problems):
    p = problems["HumanEval/53"]
    prompt = Prompt([], p.prompt.strip() + "\n", False, ("\ndef ", "\nprint("))
    solution = solution_of(p, prompt, "    return x + y\n\ndef extra():\n    pass\nprint(add(1, 2))")
    assert solution == p.prompt.strip() + "\n    return x + y"  # cut at the stop, the prefix kept


def test_an_instruct_model_gets_evalplus_chat_prompt(replica_dir, problems):
    from llada.weights.tokenizer import load_tokenizer

    tok = load_tokenizer(replica_dir)
    prompt = build_prompt(tok, problems["HumanEval/0"])
    assert prompt.chat and INSTRUCTION in prompt.text and prompt.text.endswith("```python\n")
    assert "<role>HUMAN</role>" in prompt.text and prompt.text.rstrip().count("<role>ASSISTANT</role>") == 1
    assert "\n```\n" in prompt.stops
    assert not build_prompt(tok, problems["HumanEval/0"], chat=False).chat


def test_the_canonical_solutions_pass_both(evaluator):
    verdicts = evaluator.check_all([(p, p.canonical) for p in evaluator.problems.values()])
    assert [(v.base, v.plus, v.error) for v in verdicts] == [(True, True, None)] * len(SUBSET)


def test_find_zero_solutions_other_than_the_canonical_one_pass(evaluator):
    """Newton's method from 1.0 finds another root than the canonical solution on 201 of the 888 inputs.

    Where it has not converged in 100 steps it starts again from a root bracketed to 1e-6: every input takes
    milliseconds, far under the 1 s time limit even on a loaded machine (10,000 steps from 1.0 alone took 2.2 s
    over the inputs, and went past the limit once in a whole run beside other work)."""
    p = evaluator.problems["HumanEval/32"]
    newton = p.prompt + (
        "    def newton(x):\n"
        "        for _ in range(100):\n            fx = poly(xs, x)\n"
        "            if abs(fx) < 1e-9:\n                break\n"
        "            d = sum(i * c * x ** (i - 1) for i, c in enumerate(xs) if i)\n"
        "            x = x - fx / d if d else x + 0.5\n"
        "        return x, abs(fx) < 1e-9\n"
        "    x, done = newton(1.0)\n"
        "    if done:\n        return x\n"
        "    lo, hi = -1.0, 1.0\n    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo, hi = 2 * lo, 2 * hi\n"
        "    while hi - lo > 1e-6:\n        mid = (lo + hi) / 2\n"
        "        lo, hi = (mid, hi) if poly(xs, mid) * poly(xs, lo) > 0 else (lo, mid)\n"
        "    return newton(lo)[0]\n")
    assert evaluator.check(p, newton)[1:3] == (True, True)


def test_a_solution_that_only_knows_the_base_inputs_fails_humaneval_plus(evaluator):
    p = evaluator.problems["HumanEval/53"]
    known = {tuple(i): i[0] + i[1] for i in p.base_input}
    v = evaluator.check(p, f"def add(x, y):\n    return {known!r}.get((x, y), 0)\n")
    assert (v.base, v.plus, v.error) == (True, False, "wrong")


def test_wrong_and_hostile_solutions_fail_with_their_kind(evaluator):
    p = evaluator.problems["HumanEval/106"]  # outputs travel as digests
    cases = {"wrong": "def f(n):\n    return [1] * n\n", "timeout": "def f(n):\n    while True:\n        pass\n",
             "exit": "import sys\ndef f(n):\n    sys.exit(1)\n", "missing": "def g(n):\n    return n\n"}
    verdicts = evaluator.check_all([(p, code) for code in cases.values()])
    assert [(v.base, v.plus, v.error) for v in verdicts] == [(False, False, kind) for kind in cases]


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llada.eval", "humaneval", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def test_completions_are_scored_into_the_evalplus_json(subset_file, tmp_path, problems):
    samples = tmp_path / "samples.jsonl"
    rows = [{"task_id": t, "solution": problems[t].canonical} for t in SUBSET[:3]]
    rows.append({"task_id": "HumanEval/53", "completion": "    return x - y\n"})  # prompt + completion, wrong
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run_cli("--completions", str(samples), "--data", str(subset_file), "--cache", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    scores = json.loads(out.stdout)
    assert list(scores) == ["base", "plus", "problems"]
    assert scores["base"] == {"passed": 3, "total": 4} and scores["plus"] == {"passed": 3, "total": 4}
    assert scores["problems"][3] == {"task_id": "HumanEval/53", "base": False, "plus": False, "error": "wrong"}
    assert [list(p) for p in scores["problems"]] == [["task_id", "base", "plus", "error"]] * 4


def test_a_bad_samples_file_is_one_error_line(tmp_path, problems):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"task_id": "HumanEval/9999", "solution": ""}\n')
    with pytest.raises(HumanEvalError, match="unknown task_id 'HumanEval/9999'"):
        read_samples(samples, problems)
    out = run_cli("--completions", str(samples))
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in out.stderr


def test_the_embedded_model_run_writes_the_table_and_the_rows(subset_file, tmp_path):
    out = run_cli("--model", "assets/model", "--data", str(subset_file), "--n", "2", "--modes", "S", "Q", "--plus",
                  "--gen-length", "16", "--cache", str(tmp_path), "--out", str(tmp_path / "run"), "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert list(report["modes"]) == ["S", "Q"] and report["n"] == 2 and report["plus"]
    assert json.loads((tmp_path / "run" / "report.json").read_text()) == report
    for mode, m in report["modes"].items():
        rows = [json.loads(line) for line in (tmp_path / "run" / f"{mode}.jsonl").read_text().splitlines()]
        assert [r["task_id"] for r in rows] == list(SUBSET[:2])
        assert m["passed"] == {"base": sum(r["base"] for r in rows), "plus": sum(r["plus"] for r in rows), "total": 2}
        assert m["forwards"] == sum(r["forwards"] for r in rows) > 0
        assert m["tpf"] == pytest.approx(sum(r["tokens"] for r in rows) / m["forwards"])
        for r in rows:
            assert {"completion", "solution", "base", "plus", "error", "forwards", "seconds", "check_seconds"} <= set(r)
            assert r["prompt_tokens"] > 0 and r["mode"] == mode and r["gen_length"] == 16
    table = format_table(report)
    s = load_presets(ROOT / "assets" / "model")["S"]  # the model's own S (calibrated), as the table shows it
    assert f"| S | {s['threshold']:g} | {s['editing_threshold']:g} | " in table and "HumanEval+ score \\| TPF" in table
    assert f"{report['modes']['Q']['humaneval']:.2f} \\| {report['modes']['Q']['tpf']:.2f}" in table


def test_batched_problems_decode_as_they_would_alone(problems):
    pipe = Pipeline.load(ROOT / "assets" / "model")
    some = [problems[t] for t in SUBSET[:3]]
    rows = {b: [row for _, row in decode_problems(pipe, some, "S", Namespace(gen_length=24, chat=None, batch=b))]
            for b in (1, 3)}
    for row in rows[1] + rows[3]:
        row.pop("seconds")  # engine time: the one thing that differs
    assert [r["task_id"] for r in rows[3]] == list(SUBSET[:3]) and rows[3] == rows[1]
    assert all(r["forwards"] > 0 and r["skip"] is None for r in rows[1])
    assert run_cli("--model", "assets/model", "--batch", "0").stderr.strip().endswith("--batch must be at least 1")


def test_a_long_prompt_gets_the_room_that_is_left():
    assert fit_gen_length(100, 512, 32, 1024) == 512
    assert fit_gen_length(700, 512, 32, 1024) == 324  # 1024 positions, whole blocks counted from 0
    assert fit_gen_length(1020, 512, 32, 1024) == 4 and fit_gen_length(1030, 512, 32, 1024) < 1


@pytest.mark.parametrize("args, message", [
    (("--model", "assets/model", "--modes", "X"), "unknown mode 'X'; this model has S, Q, M2T"),
    (("--model", "assets/model", "--data", "nowhere.jsonl"), "nowhere.jsonl: cannot read the problems"),
    (("--model", "no/such/model",), "no/such/model"),
])
def test_bad_settings_are_one_error_line(args, message):
    out = run_cli(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
