"""One workload at this checkout against an earlier commit, interleaved in one run.

    python -m llada.bench versus --before 2fa3e87 --workload eval --repeats 2
    python -m llada.bench versus --before 2fa3e87 --workload explorer --repeats 2
    python -m llada.bench versus --before 555de56 --workload single --repeats 3 --threads 2

The earlier commit is checked out in a temporary `git worktree` (removed afterwards). Both trees run
the same command line in a fresh process with the same Python, one thread unless `--threads`
(`OMP_NUM_THREADS`, `OMP_WAIT_POLICY=PASSIVE`) and the same model: this checkout's `assets/model`,
passed by absolute path to both, so that only the code differs. The runs alternate (before, after,
after, before, ...: each repeat starts with the tree the last one ended with), so a machine whose load
changes over time slows both alike. Each run keeps its wall seconds, its CPU seconds (user + system of
the child, less sensitive to other jobs than wall time) and the load average before and after.

Workloads (`WORKLOADS`):

* `eval`: `python -m llada.eval --n 100 --code-n 0` (5 modes x 4 tasks x 100 items);
* `explorer`: the Score | TPF explorer's default grid run headless (`python -m llada.eval.sweep` with
  the tab's first-shown settings, `ui/explorer/sweeps.py` `DEFAULTS`: τ_mask 0.05, 0.3, 0.5, 0.7, 0.9;
  τ_edit off, 0, 0.5, 0.9; MBE off and on; the S, Q and M2T presets marked; all four tasks, 10 items
  each; S's block length; 256 forwards and 10 s per decode) with a fresh, empty point cache each run
  (`--cache-dir` and `LLADA_EXPLORER_CACHE`), so nothing is read back;
* `startup`: only what every run of the two above pays first (importing torch and transformers, loading
  the model and its tokenizer), to tell that fixed cost from the decoding;
* `single`: lone runs, one `generate()` at a time, S and Q over a few prompts (`llada/bench/lone.py`,
  this checkout's file run in both trees): median seconds per run and Python calls per forward of each
  tree, kept in the report under `trees`.

Both print JSON; the reports of the two trees are compared with the timing keys (`tps`, `seconds`)
left out, and `same_results` says whether they agree. The report (medians, ratio before / after,
every run) goes to `bench/results/versus-<workload>.json` unless `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .timing import device_info, write_report

ROOT = Path(__file__).resolve().parents[2]  # this checkout
TIMING_KEYS = frozenset({"tps", "seconds", "cpu_seconds", "calls", "calls_per_forward"})  # measures, not results
LONE = Path(__file__).with_name("lone.py")
EXPLORER_GRID = ["--tau-mask", "0.05,0.3,0.5,0.7,0.9", "--tau-edit", "off,0,0.5,0.9", "--mbe", "off,on",
                 "--presets", "S,Q,M2T", "--tasks", "add,reverse,sort,rename", "--n", "10"]
WORKLOADS = {
    "eval": ["-m", "llada.eval", "--n", "100", "--code-n", "0", "--threads", "1", "--json"],
    "explorer": ["-m", "llada.eval.sweep", *EXPLORER_GRID, "--threads", "1", "--json"],
    "startup": ["-c", "import sys; from llada.pipeline import Pipeline; Pipeline.load(sys.argv[-1]); print('{}')"],
    "single": ["-P", str(LONE), "--threads", "1"],  # -P: the script's folder off sys.path, llada from the tree
}


@dataclass
class Run:
    """One run of the workload in one tree."""

    tree: str  # "before" or "after"
    repeat: int
    wall_s: float
    cpu_s: float  # user + system seconds of the child process
    load_before: tuple[float, float, float]  # os.getloadavg() as it started
    load_after: tuple[float, float, float]


def command(workload: str, model: Path, cache_dir: Path, threads: int = 1) -> list[str]:
    """The argument list (after the Python executable) of one run of `workload` on `threads` threads."""
    args = [*WORKLOADS[workload], "--model", str(model)]
    if "--threads" in args:
        args[args.index("--threads") + 1] = str(threads)
    return args + ["--cache-dir", str(cache_dir)] if workload == "explorer" else args


def environment(tree: Path, cache_dir: Path, threads: int = 1) -> dict[str, str]:
    """The child's environment: this one, the tree first on the path, `threads` threads, a fresh sweep cache."""
    return os.environ | {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                         "OMP_WAIT_POLICY": "PASSIVE", "LLADA_EXPLORER_CACHE": str(cache_dir),
                         "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_once(tree: Path, name: str, repeat: int, workload: str, model: Path, threads: int = 1) -> tuple[Run, dict]:
    """Run the workload once in `tree`; its Run and the JSON report it printed."""
    with tempfile.TemporaryDirectory(prefix="llada-versus-cache-") as cache:
        argv = [sys.executable, *command(workload, model, Path(cache), threads)]
        load_before = os.getloadavg()
        cpu_before = _children_cpu()
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=tree, env=environment(tree, Path(cache), threads), capture_output=True,
                              text=True)
        wall = time.perf_counter() - start
        cpu = _children_cpu() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"{name} tree ({tree}): {' '.join(argv[1:])} exited with {done.returncode}:\n"
                           + done.stderr[-2000:])
    run = Run(name, repeat, round(wall, 2), round(cpu, 2), _rounded(load_before), _rounded(os.getloadavg()))
    return run, json.loads(done.stdout)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _rounded(load) -> tuple[float, float, float]:
    return tuple(round(x, 2) for x in load)


def without_timing(report):
    """The report with every timing key (`tps`, `seconds`) left out, at any depth."""
    if isinstance(report, dict):
        return {k: without_timing(v) for k, v in report.items() if k not in TIMING_KEYS}
    if isinstance(report, list):
        return [without_timing(v) for v in report]
    return report


def order(repeats: int) -> list[tuple[int, str]]:
    """(repeat, tree) in run order: before, after | after, before | ... (each repeat starts where the last ended)."""
    pairs = (("before", "after"), ("after", "before"))
    return [(r, name) for r in range(repeats) for name in pairs[r % 2]]


def summary(runs: list[Run]) -> dict:
    """Median wall and CPU seconds of each tree and the ratios before / after (overall and per repeat)."""
    out = {}
    for key in ("wall_s", "cpu_s"):
        med = {t: statistics.median(getattr(r, key) for r in runs if r.tree == t) for t in ("before", "after")}
        per = {r.repeat: {} for r in runs}
        for r in runs:
            per[r.repeat][r.tree] = getattr(r, key)
        out[key] = {"median_before": med["before"], "median_after": med["after"],
                    "ratio": round(med["before"] / med["after"], 2),
                    "ratio_per_repeat": [round(p["before"] / p["after"], 2) for p in per.values() if len(p) == 2]}
    return out


def versus(before: str, workload: str, repeats: int, model: Path, threads: int = 1) -> dict:
    """Check out `before` in a temporary worktree, run both trees interleaved, return the report."""
    commits = {"before": _git("rev-parse", before), "after": _git("rev-parse", "HEAD")}
    with tempfile.TemporaryDirectory(prefix="llada-versus-") as parent:
        old = Path(parent) / "tree"
        _git("worktree", "add", "--detach", str(old), commits["before"])
        try:
            trees = {"before": old, "after": ROOT}
            runs, reports = [], {}
            for repeat, name in order(repeats):
                run, report = run_once(trees[name], name, repeat, workload, model, threads)
                print(f"  repeat {repeat} {name:6s} wall {run.wall_s:8.1f} s  cpu {run.cpu_s:8.1f} s  "
                      f"load {run.load_before[0]:.1f} -> {run.load_after[0]:.1f}", file=sys.stderr, flush=True)
                runs.append(run)
                reports.setdefault(name, []).append(report)
        finally:
            _git("worktree", "remove", "--force", str(old))
    same = without_timing(reports["before"][0]) == without_timing(reports["after"][0])
    trees = {}
    if workload == "single":  # each tree's seconds per run and calls per forward, every run
        trees = {"trees": {name: [lone_measures(r) for r in reports[name]] for name in reports}}
    shown = command(workload, Path(_shown(model)), Path("FRESH"), threads)
    if workload == "single":
        shown[shown.index(str(LONE))] = _shown(LONE)
    return {"workload": workload, "command": ["python", *shown],
            "before": {"rev": before, "commit": commits["before"]},
            "after": {"commit": commits["after"], "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))},
            "model": _shown(model), "threads": threads,
            "env": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(threads)},
            "machine": device_info_cpu(), "repeats": repeats, "same_results": same, **summary(runs), **trees,
            "runs": [asdict(r) for r in runs]}


def lone_lines(trees: dict) -> list[tuple[str, str]]:
    """Per mode of a `single` report: median seconds per run and calls per forward of each tree."""
    lines = []
    for mode in trees.get("after", [{}])[0]:
        seen = {name: [run[mode] for run in trees[name]] for name in ("before", "after")}
        parts = [f"{name} {statistics.median(r['seconds'] for r in runs):.3f} s/run "
                 f"(CPU {statistics.median(r['cpu_seconds'] for r in runs):.3f} s), "
                 f"{runs[0]['calls_per_forward']:.0f} calls/forward" for name, runs in seen.items()]
        lines.append((mode, "; ".join(parts)))
    return lines


def lone_measures(report: dict) -> dict:
    """A `single` child's report without its outputs: per mode forwards, seconds per run, calls per forward."""
    return {mode: {k: v for k, v in values.items() if k != "outputs"} for mode, values in report["modes"].items()}


def _shown(path: Path) -> str:
    """A path inside this checkout relative to it (the same in the other tree), else as it is."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def device_info_cpu() -> dict:
    import torch

    return device_info(torch.device("cpu")) | {"cpus": os.cpu_count()}


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m llada.bench versus", description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    ap.add_argument("--repeats", type=int, default=2, help="runs per tree (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="threads of both trees' runs (default 1)")
    ap.add_argument("--model", default=str(ROOT / "assets" / "model"), help="model directory given to both trees")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/versus-<workload>.json)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    if not (Path(args.model) / "config.json").is_file():
        ap.error(f"--model {args.model}: no config.json there")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    model = Path(args.model).resolve()
    try:
        report = versus(args.before, args.workload, args.repeats, model, args.threads)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = write_report(report, args.out, ROOT / "bench" / "results" / f"versus-{args.workload}.json")
    wall, cpu = report["wall_s"], report["cpu_s"]
    print(f"{args.workload}: before {wall['median_before']:.1f} s, after {wall['median_after']:.1f} s wall "
          f"({wall['ratio']:.2f}x; CPU {cpu['ratio']:.2f}x); same results: {report['same_results']}; {out}")
    for mode, line in lone_lines(report.get("trees", {})):
        print(f"  {mode}: {line}")
    return 0
