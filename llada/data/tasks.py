"""Synthetic tasks with one checkable answer each, generated on the fly from a seed.

Every task maps a random generator to an `Item`: a plain-text prompt and the one answer text that the
model must write after it (then EOS). The checker is exact match of the decoded answer text.

The tasks are chosen so that drafting many tokens in one forward (M2T) makes mistakes that a later
forward can see and repair (T2T), because every answer token depends on the others:

    add      317+985=             -> 1302                   carries run from the right
    sort     sort 73914=          -> 13479                  each digit's slot depends on all others
    reverse  reverse red fox sun: -> " sun fox red"         word order flips
    rename   def square(kelto):\n -> "    return kelto * kelto\n"   one identifier, several times

Train/eval split: an item belongs to the eval split when a stable hash of its prompt falls in the
eval bucket (1 in `EVAL_BUCKETS`). Training draws only train items and evaluation only eval items,
whatever their seeds, so no eval prompt is ever trained on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from .split import check_split, is_held_out

EVAL_BUCKETS = 10  # 10% of the item space is held out for evaluation

WORDS = ("red", "blue", "green", "cat", "dog", "sun", "moon", "tree", "fish", "bird", "star", "rock",
         "book", "door", "cake", "milk", "rain", "snow", "wind", "fire", "gold", "ship", "road", "lamp")

SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "vo", "zel", "pa", "qi", "sor", "dun", "fe", "gri", "hol",
             "ix", "jo", "bat", "nim", "wex", "yul")

BODIES = {  # function name -> body template; {v} is the parameter, repeated on purpose
    "square": "    return {v} * {v}\n",
    "double": "    return {v} + {v}\n",
    "cube": "    return {v} * {v} * {v}\n",
    "inc": "    {v} = {v} + 1\n    return {v}\n",
    "dec": "    {v} = {v} - 1\n    return {v}\n",
    "is_zero": "    return {v} == 0\n",
    "negate": "    return -{v}\n",
    "halve": "    return {v} // 2\n",
}


def is_right(text: str | None, answer: str) -> bool:
    """The one answer rule: the generated text (EOS excluded) is exactly the answer, nothing stripped.

    Every "is this output right" reads it: `Item.check`, `llada.data.check.is_right`, the playground's
    right / wrong column and the Learn view's lessons. No text (a run without a tokenizer) is wrong."""
    return text is not None and text == answer


@dataclass(frozen=True)
class Item:
    task: str
    prompt: str
    answer: str

    def check(self, text: str | None) -> bool:
        """Exact match of the generated answer text (`is_right`)."""
        return is_right(text, self.answer)


def _number(rng: random.Random, lo_digits: int, hi_digits: int) -> int:
    digits = rng.randint(lo_digits, hi_digits)
    return rng.randint(10 ** (digits - 1), 10 ** digits - 1)


def make_add(rng: random.Random) -> Item:
    a, b = _number(rng, 3, 3), _number(rng, 3, 3)  # equal widths: digit i of a sits above digit i of b
    return Item("add", f"{a}+{b}=", str(a + b))


def make_sort(rng: random.Random) -> Item:
    digits = [rng.randint(0, 9) for _ in range(rng.randint(4, 8))]
    return Item("sort", "sort " + "".join(map(str, digits)) + "=", "".join(map(str, sorted(digits))))


def make_reverse(rng: random.Random) -> Item:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return Item("reverse", "reverse " + " ".join(words) + ":", " " + " ".join(reversed(words)))


def identifier(rng: random.Random) -> str:
    """A made-up name of 2-3 syllables, so that it spans several BPE tokens."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))


def make_rename(rng: random.Random) -> Item:
    name = rng.choice(sorted(BODIES))
    v = identifier(rng)
    return Item("rename", f"def {name}({v}):\n", BODIES[name].format(v=v))


TASKS: dict[str, Callable[[random.Random], Item]] = {
    "add": make_add, "sort": make_sort, "reverse": make_reverse, "rename": make_rename,
}
TRAIN_WEIGHTS = {"add": 3, "sort": 2, "reverse": 1, "rename": 1}  # share of each task in training batches


def is_eval(item: Item) -> bool:
    return is_held_out(f"{item.task}\x00{item.prompt}", EVAL_BUCKETS)


def sample(task: str, rng: random.Random, split: str) -> Item:
    """One item of `task` from `split` ("train" or "eval"), drawn by rejection on the hash bucket."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    check_split(split)
    while True:
        item = TASKS[task](rng)
        if is_eval(item) == (split == "eval"):
            return item


def eval_items(task: str, n: int, seed: int, split: str = "eval") -> list[Item]:
    """`n` distinct items of `task` (held-out ones by default), the same for the same seed.

    split="train" draws items the model may have seen: use it to tune decoding presets, so that the
    held-out items stay untouched until the final measurement."""
    rng = random.Random(f"{split}/{task}/{seed}")
    items, seen = [], set()
    for _ in range(100 * n):
        item = sample(task, rng, split)
        if item.prompt not in seen:
            seen.add(item.prompt)
            items.append(item)
        if len(items) == n:
            break
    return items
