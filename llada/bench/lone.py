"""Lone runs: one `generate()` at a time (batch 1), seconds per run and Python calls per forward.

    python -P llada/bench/lone.py --model assets/model --modes S,Q --runs 3 --threads 1
    python -m llada.bench versus --before 555de56 --workload single --threads 1

It is written for `versus --workload single`: run as a script with `-P` (the script's folder stays off
`sys.path`), it imports `llada` from whatever tree `PYTHONPATH` names, so the same file measures this
checkout and an earlier commit. It uses only what every tree since 555de56 has (`Pipeline.load`,
`config`, `encode`, `generate`, a `Trace`'s `output_ids` and `forwards`).

For each mode, every prompt decodes once to warm up, then `--runs` times more; each run's wall and CPU
seconds (this process's, which other jobs on the machine disturb less) are kept and the medians per
mode reported. One more run per mode is counted under `sys.setprofile`: every Python function call
and every call into C (a torch op, a builtin) is one call, the count a profiler sees; divided by the
run's forwards (decode and cache) it is the Python work one forward costs. Printed as JSON; the
outputs (token ids per prompt) let `versus` check that both trees decode alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

PROMPTS = ["def fibonacci(n):\n", "def is_prime(n):\n", "def reverse_words(text):\n", "def add(a, b):\n"]
MEASURED_KEYS = ("seconds", "cpu_seconds", "calls_per_forward", "calls")  # differ between trees, not results


def counted_calls(fn) -> int:
    """Python and C calls made while fn() runs (profile events 'call' and 'c_call')."""
    count = [0]

    def tally(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(tally)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def timed(fn) -> tuple[float, float]:
    """Wall and CPU seconds of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def mode_report(pipe, mode: str, gen_length: int, runs: int) -> dict:
    """One mode over every prompt: outputs, forwards, median seconds per run, calls per forward."""
    cfg = pipe.config(mode, gen_length=gen_length)
    prompts = [pipe.encode(text) for text in PROMPTS]
    traces = [pipe.generate(ids, cfg) for ids in prompts]  # warm-up, and the outputs compared
    walls, cpus = [], []
    for _ in range(runs):
        for ids in prompts:
            wall, cpu = timed(lambda: pipe.generate(ids, cfg))
            walls.append(wall)
            cpus.append(cpu)
    calls = counted_calls(lambda: [pipe.generate(ids, cfg) for ids in prompts])
    forwards = sum(trace.forwards for trace in traces)
    return {"outputs": [trace.output_ids for trace in traces], "forwards": forwards,
            "seconds": round(statistics.median(walls), 4), "cpu_seconds": round(statistics.median(cpus), 4),
            "calls": calls, "calls_per_forward": round(calls / forwards, 1)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--modes", default="S,Q")
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3, help="timed runs of every prompt per mode (default 3)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from llada.pipeline import Pipeline

    pipe = Pipeline.load(args.model)
    modes = {mode: mode_report(pipe, mode, args.gen_length, args.runs) for mode in args.modes.split(",")}
    print(json.dumps({"threads": args.threads, "gen_length": args.gen_length, "prompts": len(PROMPTS),
                      "runs": args.runs, "modes": modes}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
