"""Score samples files with the `evalplus` package's own checking code (run inside the sandbox).

    python evalplus_child.py RESULT_FD job.json

job.json: {"evalplus_path": DIR, "data": FILE (in the working directory), "samples": [NAME, ...], "jobs": N}.
DIR holds the package (`pip install --no-deps --target DIR evalplus==0.3.1` and the few modules its evaluation
imports). This program is started by `llada.eval.evalplus_agree` inside bubblewrap, never on its own:
EvalPlus runs each program in a `multiprocessing` child guarded only by `reliability_guard`.

What runs is EvalPlus's: the problems from `evalplus.data.get_human_eval_plus()` reading FILE through
`HUMANEVAL_OVERRIDE_PATH`, the expected outputs from `evalplus.evaluate.get_groundtruth`, each sample
through `evalplus.evaluate.check_correctness` with the arguments `evaluate()` passes it (fast_check on,
1 s minimum, 4 x the ground-truth time), `N` at a time in a ProcessPoolExecutor as `evaluate()` does,
and a sample's solution as `evalplus.data.load_solutions` reads it. `evaluate()` itself is not called:
it asserts that the samples cover all 164 problems and reports pass@k only.

One JSON line per sample on RESULT_FD: {"file", "line", "task_id", "base_status", "plus_status",
"base_details", "plus_details"} (details: EvalPlus's per-input pass flags, as many as it recorded),
then {"done": true, "version": ..., "seconds_groundtruth": ...}.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor


def _import_evalplus(path: str, data: str):
    """EvalPlus's modules, reading `data`. `evalplus.data` imports Hugging Face `datasets` for its EvalPerf
    loader only; where that is not installed a stand-in whose `load_dataset` raises takes its place."""
    os.environ["HUMANEVAL_OVERRIDE_PATH"] = data
    sys.path.insert(0, path)
    try:
        import datasets  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("datasets")

        def load_dataset(*_args, **_kwargs):
            raise RuntimeError("the datasets package is not installed (only EvalPerf needs it)")

        stand_in.load_dataset = load_dataset
        sys.modules["datasets"] = stand_in
    import evalplus
    from evalplus import evaluate
    from evalplus.data import get_human_eval_plus, get_human_eval_plus_hash, load_solutions
    return evalplus, evaluate, get_human_eval_plus, get_human_eval_plus_hash, load_solutions


def _write(fd: int, row: dict) -> None:
    data = memoryview((json.dumps(row) + "\n").encode())
    while data:
        data = data[os.write(fd, data):]


def main(argv: list[str]) -> None:
    fd, job_path = int(argv[0]), argv[1]
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    evalplus, ev, get_problems, get_hash, load_solutions = _import_evalplus(job["evalplus_path"],
                                                                             os.path.abspath(job["data"]))
    problems = get_problems()
    start = time.monotonic()
    expected = ev.get_groundtruth(problems, get_hash(), [])
    seconds = time.monotonic() - start
    with ProcessPoolExecutor(max_workers=job["jobs"]) as pool:
        for name in job["samples"]:
            futures = []
            for line, sample in enumerate(load_solutions(name), 1):
                task = sample["task_id"]
                solution = (sample["solution"] if "solution" in sample
                            else problems[task]["prompt"] + sample["completion"])
                futures.append((line, pool.submit(ev.check_correctness, "humaneval", line, problems[task], solution,
                                                  expected[task], False, True, sample["_identifier"],
                                                  ev.DEFAULT_MIN_TIME_LIMIT, ev.DEFAULT_GT_TIME_LIMIT_FACTOR)))
            for line, future in futures:
                res = future.result()
                _write(fd, {"file": name, "line": line, "task_id": res["task_id"],
                            "base_status": res["base"][0], "plus_status": res["plus"][0],
                            "base_details": [bool(x) for x in res["base"][1]],
                            "plus_details": [bool(x) for x in res["plus"][1]]})
    _write(fd, {"done": True, "version": getattr(evalplus, "__version__", "?"),
                "seconds_groundtruth": round(seconds, 1)})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
