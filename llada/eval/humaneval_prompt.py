"""HumanEval prompts as EvalPlus builds them, and the solution cut out of what the model wrote.

Two kinds of model, as in EvalPlus's code generation (`evalplus.codegen`, `provider/utility.py`):

    instruct    the tokenizer has a chat template: one user turn asking for a self-contained script
    (chat)      with the problem in a code block, and the assistant's turn begun with EvalPlus's
                response prefix and "```python\\n"; the model continues the code. Its output ends at
                the first stop string (EOS texts, "\\n```\\n", "\\nif __name__", "\\ndef main(", "\\nprint(").
    base        no template (the embedded model): the raw code prefix, `prompt.strip() + "\\n"`; the
    (direct)    output also ends at "\\ndef ", "\\nclass ", "\\nimport ", "\\nfrom ", "\\nassert ", and the
                solution is the prefix plus the output.

Then `sanitize` (EvalPlus's `sanitize.py`, written here with `ast` instead of tree-sitter): take the
longest run of lines that parses (by non-blank lines; runs of two lines or more, as EvalPlus), keep
its imports and the top-level functions, classes and simple assignments the entry point reaches
through the names it mentions (functions only if they `return`), in their order; if nothing is kept,
the longest parsing run itself. One difference: a decorated function keeps its decorators (EvalPlus's
tree-sitter pass drops decorated definitions).
"""

from __future__ import annotations

import ast
from typing import NamedTuple

from .humaneval_data import Problem

INSTRUCTION = ("Please provide a self-contained Python script that solves the following problem in a markdown "
               "code block:")
RESPONSE = ("Below is a Python script with a self-contained function that solves the problem and passes "
            "corresponding tests:")
STOPS = ("<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint(")
DIRECT_STOPS = ("\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert ")
CHAT_STOPS = ("\n```\n",)
_SPLIT = "-[[]]-split-here-[[]]-"
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class Prompt(NamedTuple):
    """What the model is given: token ids, their text, the kind, and where its output ends."""

    ids: list[int]
    text: str
    chat: bool
    stops: tuple[str, ...]


def build_prompt(tokenizer, problem: Problem, chat: bool | None = None) -> Prompt:
    """The prompt of a problem for this tokenizer; chat None: a chat prompt when it has a template."""
    task = problem.prompt.strip() + "\n"
    if chat is None:
        chat = tokenizer.has_chat_template
    if chat and not tokenizer.has_chat_template:
        raise ValueError("--chat on: this model's tokenizer has no chat template")
    if not chat:
        return Prompt(tokenizer.encode(task, chat=False), task, False, STOPS + DIRECT_STOPS)
    text = chat_text(tokenizer.hf, task)
    return Prompt(list(tokenizer.hf.encode(text, add_special_tokens=False)), text, True, STOPS + CHAT_STOPS)


def chat_text(hf, task: str) -> str:
    """EvalPlus's instruct prompt: the user's request, the assistant's answer begun up to the code."""
    user = f"{INSTRUCTION}\n```\n{task.strip()}\n```\n"
    answer = f"{RESPONSE}\n```python\n{_SPLIT}\n```\n"
    text = hf.apply_chat_template([{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
                                  tokenize=False)
    return text.split(_SPLIT)[0]


def cut_at_stops(output: str, stops: tuple[str, ...]) -> str:
    """The output up to the first stop string."""
    end = min((i for i in (output.find(s) for s in stops) if i >= 0), default=len(output))
    return output[:end]


def solution_of(problem: Problem, prompt: Prompt, output: str) -> str:
    """The program to test: the output cut at its stops (after the code prefix for a base model), sanitized."""
    body = cut_at_stops(output, prompt.stops)
    code = body if prompt.chat else problem.prompt.strip() + "\n" + body
    return sanitize(code, problem.entry_point)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def code_extract(text: str) -> str:
    """The longest run of at least two lines that parses, by count of non-blank lines (first one on ties)."""
    lines = text.split("\n")
    filled = [0]
    for line in lines:
        filled.append(filled[-1] + bool(line.strip()))
    best, pair = 0, (0, 0)
    for i in range(len(lines)):
        if filled[-1] - filled[i] <= best:
            break  # no run starting here can have more non-blank lines
        for j in range(len(lines) - 1, i, -1):  # the longest run from i that parses is the best from i
            count = filled[j + 1] - filled[i]
            if count <= best:
                break
            if _parses("\n".join(lines[i:j + 1])):
                best, pair = count, (i, j)
                break
    return "\n".join(lines[pair[0]:pair[1] + 1])


def _name_of(node: ast.stmt) -> str | None:
    """The name a top-level definition binds (None for what sanitize does not keep)."""
    if isinstance(node, DEFS):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _mentions(node: ast.AST) -> set[str]:
    """Identifiers in a definition (names, attributes, parameters, ...), as tree-sitter sees identifiers."""
    out = set()
    for n in ast.walk(node):
        for attr in ("id", "attr", "arg", "name", "asname"):
            value = getattr(n, attr, None)
            if isinstance(value, str):
                out.add(value)
    return out


def _has_return(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(fn))


def _segment(code: str, node: ast.stmt) -> str:
    """The source of a top-level statement, decorators included."""
    text = ast.get_source_segment(code, node) or ""
    decorators = getattr(node, "decorator_list", [])
    if decorators:
        lines = code.split("\n")
        text = "\n".join(lines[decorators[0].lineno - 1:node.lineno - 1]) + "\n" + text
    return text


def _definitions(tree: ast.Module) -> tuple[list[ast.stmt], list[tuple[str, ast.stmt]]]:
    """Imports, and the first definition of each name (functions only if they return)."""
    imports, defs, names = [], [], set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
            continue
        name = _name_of(node)
        if name is None or name in names:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _has_return(node):
            continue
        defs.append((name, node))
        names.add(name)
    return imports, defs


def _reachable(entry_point: str, defs: list[tuple[str, ast.stmt]]) -> set[str]:
    deps = {name: _mentions(node) for name, node in defs}
    seen, todo = {entry_point}, [entry_point]
    while todo:
        for name in deps.get(todo.pop(), ()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def sanitize(code: str, entry_point: str) -> str:
    """The program EvalPlus would test: imports and what the entry point needs, else the longest parsing run."""
    extracted = code_extract(code)
    try:
        tree = ast.parse(extracted)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return extracted
    imports, defs = _definitions(tree)
    keep = _reachable(entry_point, defs)
    parts = [_segment(extracted, n) for n in imports] + [_segment(extracted, n) for name, n in defs if name in keep]
    out = "\n".join(parts).strip()
    return out or extracted
