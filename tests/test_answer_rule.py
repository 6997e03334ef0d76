"""One answer rule: every "is this output right" in the project gives `llada.data.tasks.is_right`'s verdict.

The readers: `Item.check` (the task track and the sweep), `llada.data.check.is_right` (a free prompt),
the playground's right / wrong column (`ui.render.tables.correctness`), a lesson's verdict
(`ui.learn.lessons.Recording.right`) and the lesson search (`ui.learn.lesson_search.Runner`). Each is
asked about the same outputs, among them the edge cases a local rule would treat differently
(trailing whitespace or newline, the EOS text, a leading space, no text at all): when one of them
strips, lower-cases or drops EOS on its own, its verdict differs from the rule's and this fails.
"""

from __future__ import annotations

import pytest

from llada.data import check, tasks
from llada.data.tasks import Item, is_right
from llada.trace import Trace
from ui.learn import lesson_search
from ui.learn.lessons import Recording
from ui.learn.record import RunSpec
from ui.render import tables
from ui_helpers import hand_trace

PROMPT, ANSWER = "317+985=", "1302"
# (output text, right?) — the rule: the generated text, EOS excluded, is exactly the answer
OUTPUTS = [("1302", True), ("1302 ", False), ("1302\n", False), (" 1302", False), ("1302<|endoftext|>", False),
           ("1303", False), ("", False), (None, False)]


def finished(text: str | None) -> Trace:
    trace = hand_trace()
    trace.prompt = PROMPT
    return trace.finish(text=text)


def verdicts(text: str | None) -> dict[str, bool | None]:
    """Every reader's verdict on `text` as the output of PROMPT."""
    trace = finished(text)
    return {"rule": is_right(text, ANSWER),
            "Item.check": Item("add", PROMPT, ANSWER).check(text),
            "check.is_right": check.is_right(PROMPT, text),
            "tables.correctness": {"right": True, "wrong": False}.get(tables.correctness(trace)),
            "Recording.right": Recording("t", (trace,), answer=ANSWER).right(trace),
            "lesson_search": search_verdict(trace)}


def search_verdict(trace: Trace) -> bool | None:
    lesson_search.run_trace, before = (lambda pipe, prompt, spec, gen_length: trace), lesson_search.run_trace
    try:
        return lesson_search.Runner(None, 8)(Item("add", PROMPT, ANSWER), RunSpec("S")).right
    finally:
        lesson_search.run_trace = before


def test_the_prompt_is_checkable():
    assert check.expected_answer(PROMPT) == ANSWER


@pytest.mark.parametrize("text, right", OUTPUTS)
def test_every_reader_gives_the_rules_verdict(text, right):
    got = verdicts(text)
    assert got == {name: right for name in got}, f"output {text!r}: {got}"


def test_a_reader_with_its_own_rule_is_caught(monkeypatch):
    # the test bites: a reader that strips the output on its own disagrees on "1302 "
    monkeypatch.setattr(Item, "check", lambda self, text: (text or "").strip() == self.answer)
    got = verdicts("1302 ")
    assert got["Item.check"] is True and got["rule"] is False


def test_the_rule_lives_in_one_place():
    assert check.matches is tasks.is_right  # check.is_right delegates to the rule, it keeps no copy
