"""Python code to learn from: the functions of the running interpreter's standard library.

Nothing is downloaded. Every `.py` file under `sysconfig.get_paths()["stdlib"]` (skipping tests,
site-packages and GUI demos) is parsed with `ast`; every function definition becomes one example,
its docstring dropped and its text normalised by `ast.unparse` (one style, no comments). An example
splits into a prompt (the `def` line) and a body, which is exactly how the playground is used:

    def fibonacci(n):              <- prompt
        if n < 2: ...              <- what the model writes

Functions are split between train and eval by a stable hash of their text, like the tasks.
"""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..eval.split import is_held_out

SKIP_PARTS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo",
              "lib2to3", "ensurepip", "pydoc_data", "__phello__"}
EVAL_BUCKETS = 20


@dataclass(frozen=True)
class CodeExample:
    prompt: str  # "def name(args):\n"
    body: str  # the indented body, ending with a newline

    @property
    def text(self) -> str:
        return self.prompt + self.body


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The standard library's .py files, sorted, without tests and vendored packages."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not SKIP_PARTS & set(p.relative_to(root).parts)]
    return sorted(files)


def _drop_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        fn.body = body[1:] or [ast.Pass()]


def functions_of(source: str, max_chars: int) -> Iterator[CodeExample]:
    """Every plain function of a module (methods and nested ones included), docstrings dropped."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.decorator_list:
            continue
        _drop_docstring(node)
        text = ast.unparse(node) + "\n"
        head, sep, body = text.partition(":\n")
        if sep and 40 <= len(text) <= max_chars and "\n" not in head and text.isascii():
            yield CodeExample(head + ":\n", body)


def is_eval(example: CodeExample) -> bool:
    return is_held_out(example.text, EVAL_BUCKETS)


def load_functions(split: str = "train", max_chars: int = 600, root: str | Path | None = None,
                   limit: int | None = None) -> list[CodeExample]:
    """Deduplicated stdlib functions of one split, in a stable order."""
    seen, out = set(), []
    for path in stdlib_files(root):
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for ex in functions_of(source, max_chars):
            if ex.text in seen or is_eval(ex) != (split == "eval"):
                continue
            seen.add(ex.text)
            out.append(ex)
            if limit is not None and len(out) >= limit:
                return out
    return out
