"""The code track: complete a held-out function from its signature and docstring, then check it.

A function of a source file (any depth: module level, methods, nested) is cut in two, exactly as
the playground is used:

    def mean(values):                          <- signature   \
        \"\"\"The arithmetic mean of values.\"\"\"    <- docstring    > the prompt
        total = sum(values)                    <- body: what the model writes, then EOS
        return total / len(values)

The text is the file's own (comments kept, decorators dropped), dedented to column 0. Each function
carries the names visible from outside it: the module's top-level names and the names bound in the
functions around it (class bodies are not visible from methods, as in Python).

Two checks of a completion, both on `prompt + completion`:

    parses     `ast.parse` accepts it and the function holds a statement besides its docstring (an
               empty completion would otherwise pass: a docstring alone is a valid body)
    in scope   it parses, and every name it reads is a builtin, a module or enclosing-function name,
               or bound inside the function itself (a parameter, an assignment, an import, ...)

Held-out items come from the held-out files of `sources` (split by file path), with a docstring,
a body of a few lines, and no `from x import *` in the file (its names would be unknown).
"""

from __future__ import annotations

import ast
import builtins
import random
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

from .sources import SourceFile

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__", "__loader__",
                                            "__package__", "__path__", "__builtins__", "__class__"}
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class CodeFunction:
    key: str  # "file/key.py:LINE" of the def line
    signature: str  # the def line(s), ending with a newline
    docstring: str  # the docstring's lines ("" when there is none)
    body: str  # the rest of the function, ending with a newline
    scope: frozenset[str] | None  # names visible from outside; None when the file star-imports

    @property
    def prompt(self) -> str:
        return self.signature + self.docstring

    @property
    def text(self) -> str:
        return self.prompt + self.body


class CodeScore(NamedTuple):
    parses: bool
    in_scope: bool
    unknown: tuple[str, ...]  # names read that are not in scope (empty when it does not parse)
    body_lines: int = 0  # source lines of the function's statements, docstring left out (0: does not parse)


def bound_names(nodes: Iterable[ast.AST], into_defs: bool) -> set[str]:
    """Names bound by these nodes; into_defs=False stops at function, lambda and class bodies (module scope)."""
    names, todo = set(), list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (*DEFS, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        if into_defs or not isinstance(node, (*DEFS, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return names


def module_scope(tree: ast.Module) -> frozenset[str] | None:
    """Top-level names of a module (and names its functions declare `global`); None if it star-imports."""
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree)):
        return None
    declared = {name for n in ast.walk(tree) if isinstance(n, ast.Global) for name in n.names}
    return frozenset(bound_names(tree.body, into_defs=False) | declared)


def _defs_with_scope(node: ast.AST, outer: frozenset[str] | None,
                     scoped: bool) -> Iterator[tuple[ast.AST, frozenset | None]]:
    """Every function under `node` with the names visible from outside it (None when not `scoped`)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, DEFS):
            yield child, outer
            inner = outer | bound_names([child], into_defs=True) if scoped and outer is not None else outer
            yield from _defs_with_scope(child, inner, scoped)
        else:  # class bodies do not add to what their methods see
            yield from _defs_with_scope(child, outer, scoped)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _dedent(lines: list[str], indent: str) -> tuple[str, bool]:
    """Strip the def line's indentation from every line; also whether every non-blank line had it.

    Lines without it (string continuations, bracketed lines) are kept as they are."""
    regular = all(line.startswith(indent) or not line.strip() for line in lines)
    return "".join(line[len(indent):] if line.startswith(indent) else line for line in lines), regular


def _cut(fn: ast.AST, lines: list[str]) -> tuple[str, str, str, bool] | None:
    """(signature, docstring, body, regular dedent) of a function; None for one-liners and docstring-only ones."""
    first = fn.body[0]
    if first.lineno <= fn.lineno or lines[first.lineno - 1][:first.col_offset].strip():
        return None  # a one-liner, or a body that starts on the signature's last line
    indent = lines[fn.lineno - 1][:fn.col_offset]
    has_doc = _is_docstring(first)
    if has_doc and (len(fn.body) < 2 or fn.body[1].lineno <= first.end_lineno):
        return None
    body_start = first.end_lineno if has_doc else first.lineno - 1  # 0-based line where the body begins
    signature, a = _dedent(lines[fn.lineno - 1:first.lineno - 1], indent)
    docstring, b = _dedent(lines[first.lineno - 1:first.end_lineno], indent) if has_doc else ("", True)
    body, c = _dedent(lines[body_start:fn.end_lineno], indent)
    return signature, docstring, body, a and b and c


def functions_of(file_key: str, source: str, tree: ast.Module | None = None,
                 scoped: bool = True) -> list[CodeFunction]:
    """Every function of a source file whose text, cut from the file and dedented, parses on its own.

    scoped=False skips the scope analysis (training needs only the text): every scope is None."""
    if tree is None:
        tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    out = []
    for fn, scope in _defs_with_scope(tree, module_scope(tree) if scoped else None, scoped):
        parts = _cut(fn, lines)
        if parts is None:
            continue
        item = CodeFunction(f"{file_key}:{fn.lineno}", *parts[:3], scope=scope)
        if parts[3] or _parses(item.text):  # a regular dedent of valid source parses: no need to check
            out.append(item)
    return out


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _has_code(fn: ast.AST) -> bool:
    """A statement besides the docstring."""
    return len(fn.body) > int(_is_docstring(fn.body[0]))


def _body_lines(fn: ast.AST) -> int:
    """Source lines spanned by the function's statements after its docstring."""
    body = fn.body[int(_is_docstring(fn.body[0])):]
    return body[-1].end_lineno - body[0].lineno + 1


def read_names(fn: ast.AST) -> set[str]:
    """Names a function reads (loads), default values and decorators included."""
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def check_completion(item: CodeFunction, completion: str) -> CodeScore:
    """Does `item.prompt + completion` parse, and does the function read only names in scope?"""
    try:
        tree = ast.parse(item.prompt + completion)
    except (SyntaxError, ValueError):
        return CodeScore(False, False, ())
    fn = next((n for n in tree.body if isinstance(n, DEFS)), None)
    if fn is None or not _has_code(fn):
        return CodeScore(False, False, ())  # an empty completion leaves a docstring-only function: not counted
    if item.scope is None:
        return CodeScore(True, False, (), _body_lines(fn))
    allowed = BUILTIN_NAMES | item.scope | bound_names([fn], into_defs=True)
    unknown = tuple(sorted(read_names(fn) - allowed))
    return CodeScore(True, not unknown, unknown, _body_lines(fn))


def is_eval_item(item: CodeFunction, max_prompt: int = 400, max_body: int = 400) -> bool:
    """A held-out prompt worth asking: a docstring, a known scope, a body of a few short lines."""
    body_lines = [line for line in item.body.splitlines() if line.strip()]
    return bool(item.docstring) and item.scope is not None and len(item.prompt) <= max_prompt \
        and 20 <= len(item.body) <= max_body and 1 <= len(body_lines) <= 12 and item.text.isascii()


def code_items(files: Iterable[SourceFile], n: int, seed: int) -> list[CodeFunction]:
    """`n` held-out functions (fewer if the files hold fewer), the same for the same files and seed."""
    pool = []
    for file in files:
        if file.split != "eval":
            continue
        try:
            pool += [f for f in functions_of(file.key, file.text) if is_eval_item(f)]
        except (SyntaxError, ValueError):
            continue
    rng = random.Random(f"code/{seed}")
    return rng.sample(pool, min(n, len(pool)))
