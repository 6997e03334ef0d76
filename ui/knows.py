"""What a model knows, in one line, and whether a prompt lies outside it.

A model this project trains writes `model_info.json` beside its weights (`llada.train.loop.MODEL_INFO`):
`{"knows": "<one line>"}`. Such a model is small and knows only that (a few task formats and code), so a
prompt in no format it learned gets a hint instead of silence: its output is text of the shapes it was
trained on, not an answer. A checkpoint without the file (LLaDA2.1-mini, any other) is described by the
first sentence of its model card (README.md), or by its name; no prompt is called outside it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

from llada.data.check import expected_answer

MODEL_INFO = "model_info.json"  # the file llada.train.loop.MODEL_INFO names (not imported: it loads torch)
MAX_LINE = 240  # characters of a model card's sentence shown as the line
CODE = re.compile(r"^\s*(def |class |import |from \w|@\w|async def |if |for |while |return\b|#)", re.MULTILINE)


class Knows(NamedTuple):
    """One line on what a model can do; `limited`: it knows only that (a small model of this project)."""

    line: str
    limited: bool


def knows(model_path: str | Path | None) -> Knows:
    """What the model in `model_path` knows: its model_info.json, else its model card's first sentence."""
    if not model_path:
        return Knows("No model is offered.", False)
    path = Path(model_path)
    try:
        line = json.loads((path / MODEL_INFO).read_text(encoding="utf-8"))["knows"]
        if isinstance(line, str) and line.strip():
            return Knows(" ".join(line.split()), True)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no file, or not the documented shape: fall back to the model card
    return Knows(card_line(path) or f"A LLaDA2.x checkpoint ({path.name}); its model card says what it was "
                                     "trained on.", False)


def card_line(path: Path) -> str:
    """The first sentence of a model card's first paragraph of prose ('' when there is none)."""
    try:
        text = (path / "README.md").read_text(encoding="utf-8")
    except OSError:
        return ""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.DOTALL)  # a hub card's YAML front matter
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if para and para[0].isalnum():  # prose, not a heading, table, image, list, badge or code fence
            sentence = re.split(r"(?<=[.!?])\s", para, maxsplit=1)[0]
            return sentence if len(sentence) <= MAX_LINE else sentence[: MAX_LINE - 1] + "…"
    return ""


def in_scope(prompt: str) -> bool:
    """True for a prompt in a format this project's models learn: one of the checkable tasks, or code."""
    return expected_answer(prompt) is not None or bool(CODE.search(prompt))


def scope_hint(prompt: str | None, info: Knows) -> str:
    """A hint for a prompt outside what a limited model knows ('' when none is needed)."""
    if not info.limited or prompt is None or in_scope(prompt):
        return ""
    return (f"This prompt is in no format the model learned, so expect text of the shapes it was trained on, "
            f"not an answer. The model knows this much: {info.line}")
