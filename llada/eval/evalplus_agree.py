"""Does this project's HumanEval+ scorer agree with EvalPlus? Both score the same samples; every difference shown.

    python -m llada.eval.evalplus_samples --out /tmp/agree                    # right, wrong, hostile sets
    python -m llada.eval.evalplus_agree --samples /tmp/agree/canonical.jsonl /tmp/agree/wrong.jsonl \\
        --evalplus-path /tmp/evalplus-scratch [--json bench/results/evalplus-agreement.json]

The `evalplus` package is not a dependency of the project; put it in a scratch folder of its own:

    pip install --no-deps --target /tmp/evalplus-scratch evalplus==0.3.1 \\
        psutil termcolor appdirs wget tempdir tree-sitter tree-sitter-python

(numpy, tqdm and rich come from the project's environment). EvalPlus's side runs in
`evalplus_child.py` with EvalPlus's own ground truth and `check_correctness`, reading the shipped data
through `HUMANEVAL_OVERRIDE_PATH`; since EvalPlus runs each program in an unsandboxed
`multiprocessing` child, that whole child runs inside bubblewrap (read-only root, no network), and the
command refuses to run it without. This project's side is `humaneval_score.Evaluator`, as
`python -m llada.eval humaneval --completions` runs it.

A sample passes HumanEval when its base verdict is a pass, HumanEval+ when both are (EvalPlus:
base_status == plus_status == "pass"). The command prints per file how many each evaluator passes and
how many verdicts agree, a table per problem, and each disagreement with its reason where it is a known
one (`reason`); `--json FILE` keeps it all with the date, the EvalPlus version and the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from .humaneval_data import DATA, HumanEvalError, Problem, Reference, load_problems
from .humaneval_score import Evaluator, Verdict, read_samples
from .sandbox import BWRAP, Limits, Sandbox, _bwrap_flags

RUNNER = Path(__file__).resolve().with_name("evalplus_child.py")
DEFAULT_PATH = os.environ.get("EVALPLUS_PATH", "/tmp/evalplus-scratch")
INSTALL = ("pip install --no-deps --target DIR evalplus==0.3.1 psutil termcolor appdirs wget tempdir "
           "tree-sitter tree-sitter-python")
REFUSED = ("write", "network", "process", "ctypes")  # what the sandbox refuses even when it is swallowed
SLOW_INPUT = 0.05  # seconds of a canonical run: an input whose limit load can break


class Sample(NamedTuple):
    file: str
    line: int
    label: str  # the samples file's `label` field, or ""
    problem: Problem
    solution: str


class Row(NamedTuple):
    """One sample's verdicts from both evaluators."""

    sample: Sample
    ours: Verdict
    evalplus: dict  # evalplus_child's line: base_status, plus_status, base_details, plus_details
    ref: Reference | None = None  # this project's canonical outputs and seconds for the problem

    @property
    def ep_base(self) -> bool:
        return self.evalplus["base_status"] == "pass"

    @property
    def ep_plus(self) -> bool:
        return self.ep_base and self.evalplus["plus_status"] == "pass"

    @property
    def agrees(self) -> bool:
        return self.ours.base == self.ep_base and bool(self.ours.plus) == self.ep_plus


class EvalPlusBox(Sandbox):
    """The sandbox, with EvalPlus's folder (often under the hidden /tmp) bound read-only inside."""

    def __init__(self, evalplus_path: str):
        super().__init__(isolate="bwrap")
        self.keep = (os.path.realpath(evalplus_path),)

    def command(self, argv: list[str], workdir: str) -> list[str]:
        keep = (os.path.dirname(os.path.realpath(argv[0])), *self.keep)
        return [BWRAP, *_bwrap_flags(workdir, keep), self.python, "-I", "-B", *argv]


def read_all(paths: list[str], problems: dict[str, Problem]) -> list[Sample]:
    """Every sample of every file, validated as `--completions` validates them."""
    out = []
    for path in paths:
        pairs = read_samples(path, problems)
        labels = [json.loads(line).get("label", "") for line in Path(path).read_text(encoding="utf-8").splitlines()
                  if line.strip()]
        out += [Sample(path, n, str(label), p, s) for n, ((p, s), label) in enumerate(zip(pairs, labels), 1)]
    return out


def run_ours(samples: list[Sample], problems: list[Problem], data: str, cache: str | None,
             jobs: int) -> tuple[list[Verdict], dict[str, Reference]]:
    needed = {s.problem.task_id for s in samples}
    ev = Evaluator([p for p in problems if p.task_id in needed], data=data, cache_dir=cache, jobs=jobs)
    return ev.check_all([(s.problem, s.solution) for s in samples], plus=True), ev.refs


def evalplus_box(path: str) -> EvalPlusBox:
    """The sandbox EvalPlus runs in; one clear error where the package or bubblewrap is missing."""
    if not Path(path, "evalplus", "evaluate.py").is_file():
        raise HumanEvalError(f"no evalplus package in {path} (install it there: {INSTALL.replace('DIR', path)})")
    try:
        return EvalPlusBox(path)
    except RuntimeError as err:
        raise HumanEvalError(f"EvalPlus runs programs unsandboxed, so it runs here only inside bubblewrap: {err}")


def run_evalplus(box: EvalPlusBox, samples: list[Sample], path: str, data: str, jobs: int,
                 timeout: float) -> tuple[list[dict], dict]:
    """EvalPlus's verdict per sample (in order) and its closing line, from one sandboxed child."""
    names = {f: f"samples{i}.jsonl" for i, f in enumerate(dict.fromkeys(s.file for s in samples))}
    files = {name: _as_solutions(samples, f) for f, name in names.items()}
    local = "problems.jsonl.gz" if str(data).endswith(".gz") else "problems.jsonl"  # a copy: /tmp is hidden inside
    files[local] = Path(data).read_bytes()
    job = {"evalplus_path": os.path.realpath(path), "data": local, "samples": list(names.values()), "jobs": jobs}
    files["job.json"] = json.dumps(job).encode()
    limits = Limits(wall_seconds=timeout, cpu_seconds=int(timeout), memory_bytes=8 << 30, file_bytes=1 << 30,
                    processes=256, output_bytes=16 << 20)
    done = box.run(str(RUNNER), ["job.json"], limits, files=files)
    lines = [json.loads(x) for x in done.result.decode(errors="replace").splitlines() if x.strip()]
    if not lines or not lines[-1].get("done"):
        tail = done.output.decode(errors="replace")[-1500:]
        raise HumanEvalError(f"EvalPlus did not finish (exit {done.returncode}, timed out {done.timed_out}, "
                             f"{len(lines)} lines): {tail}")
    by_key = {(row["file"], row["line"]): row for row in lines[:-1]}
    position: dict[str, int] = defaultdict(int)  # the n-th sample of a file is line n of its copy
    out = []
    for s in samples:
        position[s.file] += 1
        out.append(by_key[(names[s.file], position[s.file])])
    return out, lines[-1]


def _as_solutions(samples: list[Sample], file: str) -> bytes:
    """The file's samples as EvalPlus reads them, each with its whole program (as ours reads it) and order."""
    rows = [{"task_id": s.problem.task_id, "solution": s.solution} for s in samples if s.file == file]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def reason(row: Row) -> str:
    """Why the two verdicts differ, where the cause is known; else both sides' words."""
    ours, ep, problem = row.ours, row.evalplus, row.sample.problem
    for group in ("base", "plus"):
        details, inputs = ep[f"{group}_details"], getattr(problem, f"{group}_input")
        if problem.entry_point == "find_zero" and ep[f"{group}_status"] == "fail" and all(details) \
                and len(details) < len(inputs):
            return (f"HumanEval/32: EvalPlus's find_zero oracle `continue`s before recording the input's pass "
                    f"({len(details)} of {len(inputs)} {group} inputs recorded), so it fails every solution")
    if ours.error in REFUSED and row.ep_plus:
        return (f"the sandbox refuses the {ours.error} and fails the program even though it swallows the "
                f"error and answers right; EvalPlus's guard does not look")
    if ours.error == "output" and row.ep_base:
        return "prints more than the sandbox keeps (1 MiB); EvalPlus swallows any amount of output"
    slow = _slow_input(row)
    if slow:
        return slow
    if ours.error == "timeout" or "timeout" in (ep["base_status"], ep["plus_status"]):
        return (f"a time limit on a busy machine: ours {ours.error or 'pass'} after {ours.seconds:.1f} s, "
                f"EvalPlus base {ep['base_status']}, plus {ep['plus_status']}")
    return (f"unexplained: ours base {ours.base} plus {ours.plus} ({ours.error}: {ours.detail}); EvalPlus base "
            f"{ep['base_status']} after {len(ep['base_details'])} inputs, plus {ep['plus_status']} after "
            f"{len(ep['plus_details'])}")


def _slow_input(row: Row) -> str | None:
    """EvalPlus failed an input where this scorer passed, and the canonical solution is slow on it."""
    for group, ours_passed in (("base", row.ours.base), ("plus", bool(row.ours.plus))):
        details = row.evalplus[f"{group}_details"]
        if not ours_passed or row.ref is None or row.evalplus[f"{group}_status"] != "fail" or not details \
                or details[-1]:
            continue
        index = len(details) - 1
        seconds = getattr(row.ref, f"{group}_time")[index]
        if seconds >= SLOW_INPUT:
            return (f"a time limit, probably: EvalPlus fails {group} input {index}, on which the canonical "
                    f"solution took {seconds:.2f} s here; each evaluator times the canonical solution itself and "
                    f"allows max(1 s, 4x) per input, and EvalPlus records an input's timeout as a failed input")
    return None


def summary(rows: list[Row]) -> dict:
    return {"samples": len(rows),
            "ours": {"base": sum(r.ours.base for r in rows), "plus": sum(bool(r.ours.plus) for r in rows)},
            "evalplus": {"base": sum(r.ep_base for r in rows), "plus": sum(r.ep_plus for r in rows)},
            "agree": {"base": sum(r.ours.base == r.ep_base for r in rows),
                      "plus": sum(bool(r.ours.plus) == r.ep_plus for r in rows),
                      "both": sum(r.agrees for r in rows)}}


def per_problem(rows: list[Row]) -> list[dict]:
    """Per task: samples, passes by each evaluator (base and plus), samples whose verdicts differ."""
    by_task: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_task[r.sample.problem.task_id].append(r)
    out = []
    for task in sorted(by_task, key=lambda t: int(t.split("/")[-1]) if t.split("/")[-1].isdigit() else 1 << 30):
        s = summary(by_task[task])
        out.append({"task_id": task, "samples": s["samples"], "ours_base": s["ours"]["base"],
                    "evalplus_base": s["evalplus"]["base"], "ours_plus": s["ours"]["plus"],
                    "evalplus_plus": s["evalplus"]["plus"], "disagree": s["samples"] - s["agree"]["both"]})
    return out


def disagreements(rows: list[Row], second: dict[int, dict]) -> list[dict]:
    """Each sample whose verdicts differ, why, and (with --recheck) both verdicts of a second run."""
    return [{"file": r.sample.file, "line": r.sample.line, "task_id": r.sample.problem.task_id,
             "label": r.sample.label,
             "ours": {"base": r.ours.base, "plus": bool(r.ours.plus), "error": r.ours.error, "detail": r.ours.detail},
             "evalplus": {"base_status": r.evalplus["base_status"], "plus_status": r.evalplus["plus_status"],
                          "base_recorded": len(r.evalplus["base_details"]),
                          "plus_recorded": len(r.evalplus["plus_details"])},
             "reason": reason(r), **({"second_run": second[i]} if i in second else {})}
            for i, r in enumerate(rows) if not r.agrees]


def verdicts(row: Row) -> dict:
    return {"ours": {"base": row.ours.base, "plus": bool(row.ours.plus), "error": row.ours.error},
            "evalplus": {"base": row.ep_base, "plus": row.ep_plus}, "agrees": row.agrees}


def by_label(rows: list[Row]) -> dict[str, dict]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        groups[f"{Path(r.sample.file).name}:{r.sample.label or '-'}"].append(r)
    return {k: summary(v) for k, v in groups.items()}


def print_report(report: dict, out=None) -> None:
    p = lambda *a: print(*a, file=out or sys.stdout)  # noqa: E731
    p(f"EvalPlus {report['evalplus_version']} vs llada.eval.humaneval_score on {report['data']}")
    p("| samples (file:label) | n | ours base | EvalPlus base | ours plus | EvalPlus plus | agree base | agree plus |")
    p("|---|---|---|---|---|---|---|---|")
    for key, s in report["by_label"].items():
        p(f"| {key} | {s['samples']} | {s['ours']['base']} | {s['evalplus']['base']} | {s['ours']['plus']} | "
          f"{s['evalplus']['plus']} | {s['agree']['base']} | {s['agree']['plus']} |")
    p("\nper problem (samples; passes ours/EvalPlus on base, then plus; samples that disagree):")
    for row in report["problems"]:
        mark = "  <- differs" if row["disagree"] else ""
        p(f"  {row['task_id']:<14} n={row['samples']:<3} base {row['ours_base']}/{row['evalplus_base']}  "
          f"plus {row['ours_plus']}/{row['evalplus_plus']}{mark}")
    p(f"\n{len(report['disagreements'])} disagreements:")
    for d in report["disagreements"]:
        p(f"  {d['task_id']} ({Path(d['file']).name} line {d['line']} {d['label']}): ours base {d['ours']['base']} "
          f"plus {d['ours']['plus']} ({d['ours']['error']}); EvalPlus base {d['evalplus']['base_status']} plus "
          f"{d['evalplus']['plus_status']}\n      {d['reason']}")
        if "second_run" in d:
            again = d["second_run"]
            p(f"      second run: {'they agree' if again['agrees'] else 'they differ again'} (ours base "
              f"{again['ours']['base']} plus {again['ours']['plus']}, EvalPlus base {again['evalplus']['base']} "
              f"plus {again['evalplus']['plus']})")


def compare(box: EvalPlusBox, samples: list[Sample], problems: list[Problem],
            args: argparse.Namespace) -> tuple[list[Row], dict, dict]:
    """Both evaluators' verdicts on the samples, EvalPlus's closing line and the seconds each took."""
    start = time.monotonic()
    ours, refs = run_ours(samples, problems, args.data, args.cache, args.jobs)
    ours_seconds = time.monotonic() - start
    ep, closing = run_evalplus(box, samples, args.evalplus_path, args.data, args.jobs, args.timeout)
    rows = [Row(s, o, e, refs[s.problem.task_id]) for s, o, e in zip(samples, ours, ep)]
    evalplus_seconds = time.monotonic() - start - ours_seconds
    return rows, closing, {"ours": round(ours_seconds, 1), "evalplus": round(evalplus_seconds, 1),
                           "evalplus_groundtruth": closing["seconds_groundtruth"]}


def agree(samples: list[Sample], problems: list[Problem], args: argparse.Namespace) -> dict:
    box = evalplus_box(args.evalplus_path)
    rows, closing, seconds = compare(box, samples, problems, args)
    differ = [i for i, r in enumerate(rows) if not r.agrees]
    second: dict[int, dict] = {}
    if args.recheck and differ:  # the differing samples once more, both sides: a verdict that flips is timing
        again, _, seconds["recheck"] = compare(box, [rows[i].sample for i in differ], problems, args)
        second = {i: verdicts(r) for i, r in zip(differ, again)}
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "evalplus_version": closing["version"], "evalplus_install": INSTALL.replace("DIR", args.evalplus_path),
            "data": str(args.data), "command": "python -m llada.eval.evalplus_agree " + shlex.join(args.argv),
            "isolated": Sandbox().isolated,
            "load_average": os.getloadavg(), "seconds": seconds, "total": summary(rows), "by_label": by_label(rows),
            "problems": per_problem(rows), "disagreements": disagreements(rows, second)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m llada.eval.evalplus_agree", description=__doc__.split("\n")[0])
    ap.add_argument("--samples", nargs="+", required=True,
                    help="EvalPlus samples files (task_id + solution/completion)")
    ap.add_argument("--evalplus-path", default=DEFAULT_PATH, help=f"where evalplus is installed ({INSTALL})")
    ap.add_argument("--data", default=str(DATA), help="the HumanEval+ file both read (default: shipped v0.1.10)")
    ap.add_argument("--jobs", type=int, default=2, help="programs checked at a time by each evaluator")
    ap.add_argument("--cache", default=None, help="this project's canonical-output cache folder")
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds EvalPlus's whole run may take")
    ap.add_argument("--recheck", action="store_true", help="run the samples that differ once more on both sides")
    ap.add_argument("--json", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    try:
        problems = load_problems(args.data)
        samples = read_all(args.samples, {p.task_id: p for p in problems})
        report = agree(samples, problems, args)
    except HumanEvalError as err:
        print(f"evalplus_agree: {err}", file=sys.stderr)
        return 2
    print_report(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0 if not report["disagreements"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
