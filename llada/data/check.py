"""Is a free prompt one of the checkable tasks? Then its one right answer (see `llada.data.tasks`).

    expected_answer("317+985=")            -> "1302"
    expected_answer("sort 73914=")         -> "13479"
    expected_answer("reverse red fox sun:") -> " sun fox red"
    expected_answer("def square(kelto):\\n") -> "    return kelto * kelto\\n"
    expected_answer("hello")               -> None

The playground uses it to mark outputs right or wrong (S vs Q); prompts are matched exactly in the
format the tasks write them, so anything else is simply not checkable.
"""

from __future__ import annotations

import re

from .tasks import BODIES, is_right as matches

_ADD = re.compile(r"^(\d+)\+(\d+)=$")
_SORT = re.compile(r"^sort (\d+)=$")
_REVERSE = re.compile(r"^reverse ((?:[a-z]+ )*[a-z]+):$")
_RENAME = re.compile(r"^def (\w+)\((\w+)\):\n$")


def expected_answer(prompt: str) -> str | None:
    """The answer a checkable prompt must get, or None when the prompt is no task."""
    if m := _ADD.match(prompt):
        return str(int(m[1]) + int(m[2]))
    if m := _SORT.match(prompt):
        return "".join(sorted(m[1]))
    if m := _REVERSE.match(prompt):
        return " " + " ".join(reversed(m[1].split()))
    if (m := _RENAME.match(prompt)) and m[1] in BODIES:
        return BODIES[m[1]].format(v=m[2])
    return None


def is_right(prompt: str, output: str | None) -> bool | None:
    """True / False for a checkable prompt's output (the generated text, EOS excluded); None otherwise."""
    answer = expected_answer(prompt)
    return None if answer is None else matches(output, answer)
