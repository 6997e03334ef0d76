"""HumanEval+ problems and the canonical solutions' outputs on their inputs (the expected outputs).

    problems = load_problems()                       # 164 `Problem`s from assets/humanevalplus/
    refs = references(problems, Sandbox())           # task_id -> Reference(outputs, seconds per input)

The data is EvalPlus v0.1.10 (`assets/humanevalplus/README.md`: provenance, Apache-2.0). As EvalPlus
does, the expected outputs are what the canonical solution returns on each input, with the seconds each
call took: a candidate gets `max(1 s, 4 x that)` per input. They are computed once, in the sandbox like
any other program, and kept in a cache file named by the data's and the harness's hashes (default
`~/.cache/llada/humaneval/`), so a changed file or harness never reads stale outputs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .sandbox import Limits, Sandbox

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "humanevalplus"
DATA = ASSETS / "HumanEvalPlus-v0.1.10.jsonl.gz"
MINI = ASSETS / "HumanEvalPlus-Mini-v0.1.10.jsonl.gz"
CHILD = Path(__file__).resolve().with_name("humaneval_child.py")
REFERENCE_LIMITS = Limits(wall_seconds=300.0)  # the canonical solutions take seconds, not minutes
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input", "atol")


class HumanEvalError(ValueError):
    """The data, a samples file or a reference run is not usable; the message says why."""


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str  # imports, signature and docstring: what the model continues
    entry_point: str  # the function the tests call
    canonical_solution: str  # the body that completes `prompt`
    base_input: list  # HumanEval's inputs: a list of argument lists
    plus_input: list  # EvalPlus's extra inputs
    atol: float

    @property
    def canonical(self) -> str:
        return self.prompt + self.canonical_solution


class Reference(NamedTuple):
    """The canonical solution's outputs (tagged JSON, `humaneval_child.encode`) and seconds per input."""

    base: list
    base_time: list[float]
    plus: list
    plus_time: list[float]


def load_problems(path: str | Path = DATA) -> list[Problem]:
    """The problems of an EvalPlus HumanEval+ file (.jsonl or .jsonl.gz), in file order."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HumanEvalError(f"{path}: cannot read the problems ({err})") from None
    problems = []
    for n, row in enumerate(rows, 1):
        missing = [k for k in FIELDS if not isinstance(row, dict) or k not in row]
        if missing:
            raise HumanEvalError(f"{path}: line {n} lacks {', '.join(missing)}")
        problems.append(Problem(**{k: row[k] for k in FIELDS}))
    if not problems:
        raise HumanEvalError(f"{path}: no problems")
    return problems


def data_hash(path: str | Path) -> str:
    """What the cached outputs depend on: the data file and the harness that ran it."""
    digest = hashlib.sha256(Path(path).read_bytes())
    digest.update(CHILD.read_bytes())
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llada" / "humaneval"


def references(problems: list[Problem], sandbox: Sandbox, data: str | Path = DATA,
               cache_dir: str | Path | None = None, jobs: int = 2) -> dict[str, Reference]:
    """The canonical outputs of every problem: read from the cache, the missing ones computed and added."""
    stem = Path(data).name.removesuffix(".gz").removesuffix(".jsonl")
    cache = Path(cache_dir or default_cache_dir()) / f"{stem}-{data_hash(data)}.json.gz"
    known = _read_cache(cache)
    todo = [p for p in problems if p.task_id not in known]
    if todo:
        print(f"humaneval: computing the canonical outputs of {len(todo)} problems (cached in {cache})",
              file=sys.stderr)
        with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
            for problem, ref in zip(todo, pool.map(lambda p: reference(p, sandbox), todo)):
                known[problem.task_id] = ref
        _write_cache(cache, known)
    return {p.task_id: known[p.task_id] for p in problems}


def reference(problem: Problem, sandbox: Sandbox) -> Reference:
    """Run the canonical solution on every input (in the sandbox); its outputs and seconds."""
    groups = [{"name": name, "inputs": getattr(problem, f"{name}_input"), "timeout": 120.0}
              for name in ("base", "plus")]
    job = {"mode": "reference", "code": problem.canonical, "entry_point": problem.entry_point,
           "atol": problem.atol, "groups": groups}
    done = sandbox.run(str(CHILD), ["job.json"], REFERENCE_LIMITS, files={"job.json": json.dumps(job).encode()})
    lines = {}
    for line in done.result.decode(errors="replace").splitlines():
        row = json.loads(line)
        lines[row["group"]] = row
    if set(lines) != {"base", "plus"}:
        tail = done.output.decode(errors="replace")[-500:]
        raise HumanEvalError(f"{problem.task_id}: the canonical solution did not finish (exit {done.returncode}, "
                             f"timed out {done.timed_out}): {tail}")
    return Reference(lines["base"]["outputs"], lines["base"]["times"], lines["plus"]["outputs"],
                     lines["plus"]["times"])


def _read_cache(path: Path) -> dict[str, Reference]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            raw = json.load(f)
        return {task: Reference(*row) for task, row in raw.items()}
    except (OSError, EOFError, ValueError, TypeError):
        return {}  # no cache yet, or a broken one: computed again


def _write_cache(path: Path, refs: dict[str, Reference]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump({task: list(ref) for task, ref in refs.items()}, f)
        os.replace(tmp, path)
    except OSError as err:
        print(f"humaneval: cannot write the cache {path} ({err}); the outputs will be computed again",
              file=sys.stderr)
