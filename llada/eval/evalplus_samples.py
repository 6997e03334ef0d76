"""Sample sets for comparing two HumanEval+ evaluators: right, wrong and hostile programs.

    python -m llada.eval.evalplus_samples --out DIR      # DIR/canonical.jsonl, wrong.jsonl, hostile.jsonl

Each line is EvalPlus's samples format (`task_id`, `solution`: the whole program) plus `label`, what
the program is:

    canonical    the canonical solution of every problem (164 lines)
    wrong        three plausible bugs per problem, made from the canonical solution's syntax tree:
                 `off_by_one` (the first <, <=, >, >= of the entry point flipped to its neighbour, else
                 its first integer constant plus one), `edge` (returns None when the first argument is
                 falsy: an empty list, 0, ""), `base_only` (right on HumanEval's base inputs only,
                 None on every other input). A mutant equal to the canonical program is left out.
    hostile      programs that misbehave: an endless loop, a fork bomb, a memory bomb, a write outside
                 their directory, sys.exit at import, os._exit inside the call, a flood of output, and
                 right answers that first try (and swallow) a refused write, socket or process.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Callable, Iterator

from .humaneval_data import DATA, HumanEvalError, Problem, load_problems

FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


def canonical(problems: list[Problem]) -> list[dict]:
    return [{"task_id": p.task_id, "label": "canonical", "solution": p.canonical} for p in problems]


def wrong(problems: list[Problem]) -> list[dict]:
    """Up to three mutants per problem (fewer where a mutation finds nothing to change)."""
    rows = []
    for p in problems:
        for label, mutate in MUTANTS.items():
            code = mutate(p)
            if code is not None and code != _normal(p.canonical):
                rows.append({"task_id": p.task_id, "label": label, "solution": code})
    return rows


def _normal(code: str) -> str:
    return ast.unparse(ast.parse(code))


def _entry(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def off_by_one(p: Problem) -> str | None:
    """The first ordering comparison flipped (< to <=, ...), else the first int constant plus one."""
    tree = ast.parse(p.canonical)
    fn = _entry(tree, p.entry_point)
    if fn is None:
        return None
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in FLIP:
                    node.ops[i] = FLIP[type(op)]()
                    return ast.unparse(tree)
    for node in ast.walk(fn):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            node.value += 1
            return ast.unparse(tree)
    return None


def edge(p: Problem) -> str | None:
    """`if not first_arg: return None` before the body: wrong wherever an empty or zero input expects more."""
    tree = ast.parse(p.canonical)
    fn = _entry(tree, p.entry_point)
    if fn is None or not fn.args.args:
        return None
    guard = ast.parse(f"if not {fn.args.args[0].arg}:\n    return None").body[0]
    start = 1 if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else 0
    fn.body.insert(start, guard)
    return ast.unparse(ast.fix_missing_locations(tree))


def base_only(p: Problem) -> str:
    """The canonical solution behind a gate that knows HumanEval's base inputs: None for any other call
    from outside (calls the solution makes to itself, as a recursion does, pass through)."""
    keys = sorted({repr(tuple(inp)) for inp in p.base_input})
    gate = f'''

_solution = {p.entry_point}
_BASE_INPUTS = {keys!r}
_depth = [0]


def {p.entry_point}(*args):
    if _depth[0] == 0 and repr(args) not in _BASE_INPUTS:
        return None
    _depth[0] += 1
    try:
        return _solution(*args)
    finally:
        _depth[0] -= 1
'''
    return _normal(p.canonical + gate)


MUTANTS: dict[str, Callable[[Problem], str | None]] = {"off_by_one": off_by_one, "edge": edge,
                                                       "base_only": base_only}

# ------------------------------------------------------------------------------------------ hostile ----

# label -> (task, code placed before the canonical body's return value is computed, or a whole program)
HOSTILE_PREFIX = {
    "endless_loop": ("HumanEval/0", "    while True:\n        pass\n"),
    "fork_bomb": ("HumanEval/1", "    import os\n    while True:\n        os.fork()\n"),
    "memory_bomb": ("HumanEval/2", "    blocks = []\n    while True:\n        blocks.append(bytes(1 << 30))\n"),
    "write_outside": ("HumanEval/3", "    open('/llada-agree-written-outside', 'w').write('x')\n"),
    "exit_in_call": ("HumanEval/4", "    import os\n    os._exit(0)\n"),
    "output_flood": ("HumanEval/5", "    print('x' * (8 << 20))\n"),
    "swallowed_write": ("HumanEval/6", "    try:\n        open('/llada-agree-written-outside', 'w')\n"
                                       "    except Exception:\n        pass\n"),
    "swallowed_socket": ("HumanEval/7", "    try:\n        import socket\n        socket.socket()\n"
                                        "    except Exception:\n        pass\n"),
    "swallowed_process": ("HumanEval/8", "    try:\n        import subprocess\n        subprocess.run(['true'])\n"
                                         "    except Exception:\n        pass\n"),
    "recursion": ("HumanEval/9", "    def down(n):\n        return down(n + 1)\n    down(0)\n"),
}
HOSTILE_WHOLE = {
    "exit_at_import": ("HumanEval/10", "import sys\nsys.exit(0)\n"),
}


def hostile(problems: list[Problem]) -> list[dict]:
    by_id = {p.task_id: p for p in problems}
    rows = []
    for label, (task, lines) in HOSTILE_PREFIX.items():
        if task in by_id:
            p = by_id[task]
            rows.append({"task_id": task, "label": label, "solution": _before_body(p, lines)})
    for label, (task, code) in HOSTILE_WHOLE.items():
        if task in by_id:
            rows.append({"task_id": task, "label": label, "solution": code + by_id[task].canonical})
    return rows


def _before_body(p: Problem, lines: str) -> str:
    """The canonical program with `lines` (indented for the entry point's body) run first in each call."""
    tree = ast.parse(p.canonical)
    fn = _entry(tree, p.entry_point)
    if fn is None:
        raise HumanEvalError(f"{p.task_id}: no function {p.entry_point} in its canonical solution")
    start = 1 if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else 0
    fn.body[start:start] = ast.parse(_dedent(lines)).body
    return ast.unparse(ast.fix_missing_locations(tree))


def _dedent(lines: str) -> str:
    return "\n".join(line[4:] if line.startswith("    ") else line for line in lines.splitlines()) + "\n"


SETS: dict[str, Callable[[list[Problem]], list[dict]]] = {"canonical": canonical, "wrong": wrong,
                                                          "hostile": hostile}


def write_sets(problems: list[Problem], out: Path) -> Iterator[tuple[str, Path, int]]:
    """Write each set as OUT/NAME.jsonl; (name, path, lines) per set."""
    out.mkdir(parents=True, exist_ok=True)
    for name, make in SETS.items():
        rows = make(problems)
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        yield name, path, len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llada.eval.evalplus_samples", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for canonical.jsonl, wrong.jsonl, hostile.jsonl")
    ap.add_argument("--data", default=str(DATA), help="an EvalPlus HumanEval+ file (default: the shipped v0.1.10)")
    args = ap.parse_args(argv)
    try:
        problems = load_problems(args.data)
    except HumanEvalError as err:
        ap.exit(2, f"evalplus_samples: {err}\n")
    for name, path, n in write_sets(problems, Path(args.out)):
        print(f"{name}: {n} samples in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
