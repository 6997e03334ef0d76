"""A few HumanEval+ problems as their own EvalPlus data file, and an evaluator on them (shared test helpers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from llada.eval.humaneval_data import DATA, load_problems
from llada.eval.humaneval_score import Evaluator


def write_subset(folder: Path, task_ids: tuple[str, ...]) -> Path:
    """The problems `task_ids` as FOLDER/subset.jsonl.gz, rows as they are in the shipped file."""
    path = folder / "subset.jsonl.gz"
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        rows = [line for line in f if json.loads(line)["task_id"] in task_ids]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(rows)
    return path


def subset_evaluator(subset_file: Path, cache_dir: Path) -> Evaluator:
    return Evaluator(load_problems(subset_file), data=subset_file, cache_dir=cache_dir, jobs=2)
