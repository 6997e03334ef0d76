"""Scoring HumanEval / HumanEval+ solutions as EvalPlus scores them, every program in the sandbox.

    ev = Evaluator(load_problems())                        # the canonical outputs: cached, else computed
    v = ev.check(problem, solution)                         # Verdict(task_id, base, plus, error, ...)
    verdicts = ev.check_all([(problem, solution), ...])     # `jobs` sandboxes at a time

    python -m llada.eval humaneval --completions samples.jsonl [--json]

A solution is a whole program (the prompt's imports and signature included). It passes HumanEval
(`base`) when its outputs on every base input equal the canonical solution's, and HumanEval+ (`plus`)
when it also does on every plus input (`humaneval_child.matches`: EvalPlus's comparison, floats within
atol). As in EvalPlus, each input has `max(1 s, 4 x the canonical seconds)`, and a group of inputs at
most `min(60 s, the sum) + 1 s`; a group stops at its first failure. One child runs both groups of a
problem, each on a fresh exec of the code.

Where this differs from the `evalplus` package (0.3.1): HumanEval/32's oracle (|poly(xs, x)| <= atol)
passes an input that meets it, where evalplus `continue`s before recording the pass and so fails every
solution, the canonical one included. The package itself is not a dependency: it pulls in model API
clients (openai, anthropic, google-generativeai) and tree-sitter, and runs programs with
`multiprocessing` in a guarded but unsandboxed child.

Samples files (`--completions`) are EvalPlus's: one JSON object per line with `task_id` and
`solution` (the whole program) or `completion` (appended to the problem's prompt).
"""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from .humaneval_data import CHILD, DATA, HumanEvalError, Problem, Reference, references
from .sandbox import Finished, Limits, Sandbox

MIN_TIME_LIMIT = 1.0  # EvalPlus DEFAULT_MIN_TIME_LIMIT
TIME_LIMIT_FACTOR = 4.0  # EvalPlus DEFAULT_GT_TIME_LIMIT_FACTOR
GROUP_CAP = 60.0  # EvalPlus EVALPLUS_TIMEOUT_PER_TASK
START_SECONDS = 10.0  # the child's start (bubblewrap, the interpreter, reading the job) on a busy machine


class Verdict(NamedTuple):
    task_id: str
    base: bool
    plus: bool | None  # None when the plus inputs were not run
    error: str | None  # the kind of the first failure (see humaneval_child), None when it passed
    detail: str  # what failed, for the per-problem log
    seconds: float  # wall time of the check


def time_limits(seconds: list[float]) -> list[float]:
    return [max(MIN_TIME_LIMIT, TIME_LIMIT_FACTOR * t) for t in seconds]


def group_timeout(limits: list[float]) -> float:
    return min(GROUP_CAP, sum(limits)) + 1.0


class Evaluator:
    """Checks solutions of `problems` against their canonical outputs; `jobs` sandboxes at a time."""

    def __init__(self, problems: list[Problem], sandbox: Sandbox | None = None, data: str | Path = DATA,
                 cache_dir: str | Path | None = None, jobs: int | None = None, limits: Limits | None = None):
        self.problems = {p.task_id: p for p in problems}
        self.sandbox = sandbox or Sandbox()
        self.jobs = jobs or min(4, os.cpu_count() or 1)
        self.limits = limits or Limits()
        self.refs: dict[str, Reference] = references(problems, self.sandbox, data, cache_dir, self.jobs)

    def job(self, problem: Problem, solution: str, plus: bool = True) -> dict:
        """The child's job: both groups of inputs with their expected outputs and time limits."""
        ref = self.refs[problem.task_id]
        groups = []
        for name in ("base", "plus") if plus else ("base",):
            limits = time_limits(getattr(ref, f"{name}_time"))
            groups.append({"name": name, "inputs": getattr(problem, f"{name}_input"),
                           "expected": getattr(ref, name), "limits": limits, "timeout": group_timeout(limits)})
        return {"mode": "check", "code": solution, "entry_point": problem.entry_point, "atol": problem.atol,
                "groups": groups}

    def check(self, problem: Problem, solution: str, plus: bool = True) -> Verdict:
        """Run one solution in the sandbox; its verdict (never raises for what the solution does)."""
        job = self.job(problem, solution, plus)
        wall = START_SECONDS + sum(g["timeout"] for g in job["groups"])
        done = self.sandbox.run(str(CHILD), ["job.json"], replace(self.limits, wall_seconds=wall),
                                files={"job.json": json.dumps(job).encode()})
        return verdict(problem.task_id, [g["name"] for g in job["groups"]], done)

    def check_all(self, pairs: Iterable[tuple[Problem, str]], plus: bool = True,
                  done: Callable[[Verdict], None] | None = None) -> list[Verdict]:
        """Verdicts of many solutions in order; `done` is called as each one finishes."""
        pairs = list(pairs)

        def one(pair):
            v = self.check(pair[0], pair[1], plus)
            if done is not None:
                done(v)
            return v

        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(one, pairs))


def verdict(task_id: str, groups: list[str], done: Finished) -> Verdict:
    """Read the child's lines; a group without one failed the way the child ended."""
    lines = {}
    for raw in done.result.decode(errors="replace").splitlines():
        try:
            row = json.loads(raw)
            lines[row["group"]] = row
        except (ValueError, KeyError, TypeError):
            break
    ended = end_kind(done)
    results = [lines.get(g, {"passed": False, "kind": ended, "detail": f"the program ended: {ended}"})
               for g in groups]
    failed = next((r for r in results if not r["passed"]), None)
    plus = results[0]["passed"] and results[1]["passed"] if len(results) > 1 else None
    return Verdict(task_id, bool(results[0]["passed"]), plus, failed and failed["kind"],
                   failed["detail"] if failed else "", round(done.seconds, 3))


def end_kind(done: Finished) -> str:
    """Why a child stopped before reporting: timeout, output, exit (it exited itself) or crash (a signal)."""
    if done.timed_out or done.returncode == -signal.SIGXCPU:
        return "timeout"
    if done.output_over:
        return "output"
    if done.returncode is not None and done.returncode >= 0:
        return "exit"
    return "crash"


def read_samples(path: str | Path, problems: dict[str, Problem]) -> list[tuple[Problem, str]]:
    """(problem, whole program) per line of an EvalPlus samples file."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise HumanEvalError(f"{path}: cannot read ({err})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise HumanEvalError(f"{path}: line {n} is not JSON ({err.msg})") from None
        out.append(_sample(row, problems, f"{path}: line {n}"))
    if not out:
        raise HumanEvalError(f"{path}: no samples")
    return out


def _sample(row, problems: dict[str, Problem], where: str) -> tuple[Problem, str]:
    if not isinstance(row, dict) or row.get("task_id") not in problems:
        task = row.get("task_id") if isinstance(row, dict) else None
        raise HumanEvalError(f"{where}: unknown task_id {task!r} (expected e.g. 'HumanEval/0')")
    problem = problems[row["task_id"]]
    if isinstance(row.get("solution"), str):
        return problem, row["solution"]
    if isinstance(row.get("completion"), str):
        return problem, problem.prompt + row["completion"]
    raise HumanEvalError(f"{where}: needs a string 'solution' or 'completion'")


def scores_json(verdicts: list[Verdict]) -> dict:
    """The --completions JSON: totals, then one entry per sample."""
    base = sum(v.base for v in verdicts)
    plus = sum(bool(v.plus) for v in verdicts)
    return {"base": {"passed": base, "total": len(verdicts)}, "plus": {"passed": plus, "total": len(verdicts)},
            "problems": [{"task_id": v.task_id, "base": v.base, "plus": bool(v.plus), "error": v.error}
                         for v in verdicts]}
