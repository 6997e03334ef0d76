"""Tasks (answers, checkers, train/eval split), the stdlib corpus and batch layout."""

from __future__ import annotations

import random

import pytest

from llada.eval import tasks
from llada.train import corpus
from llada.train.data import Encoded, to_batch


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_every_task_has_one_checkable_answer(task):
    item = tasks.sample(task, random.Random(3), "train")
    assert item.task == task and item.prompt and item.answer
    assert item.check(item.answer)
    assert not item.check(item.answer + " ")


def test_answers_are_right():
    rng = random.Random(0)
    add = tasks.make_add(rng)
    a, b = add.prompt[:-1].split("+")
    assert int(add.answer) == int(a) + int(b)
    srt = tasks.make_sort(rng)
    assert srt.answer == "".join(sorted(srt.prompt.removeprefix("sort ").removesuffix("=")))
    rev = tasks.make_reverse(rng)
    words = rev.prompt.removeprefix("reverse ").removesuffix(":").split()
    assert rev.answer.split() == words[::-1]
    ren = tasks.make_rename(rng)
    name = ren.prompt[ren.prompt.index("(") + 1:ren.prompt.index(")")]
    assert ren.answer.count(name) >= 1 and ren.answer.endswith("\n")


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_eval_items_never_come_from_training(task):
    held_out = tasks.eval_items(task, 30, seed=5)
    assert len(held_out) == 30 and len({it.prompt for it in held_out}) == 30
    assert all(tasks.is_eval(it) for it in held_out)
    rng = random.Random(1)
    trained = {tasks.sample(task, rng, "train").prompt for _ in range(300)}
    assert not trained & {it.prompt for it in held_out}


def test_eval_items_are_deterministic_per_seed():
    assert tasks.eval_items("add", 5, 0) == tasks.eval_items("add", 5, 0)
    assert tasks.eval_items("add", 5, 0) != tasks.eval_items("add", 5, 1)


def test_unknown_task_and_split_are_refused():
    with pytest.raises(ValueError, match="unknown task"):
        tasks.sample("divide", random.Random(0), "train")
    with pytest.raises(ValueError, match="split"):
        tasks.sample("add", random.Random(0), "test")


def test_corpus_reads_stdlib_functions(tmp_path):
    (tmp_path / "mod.py").write_text(
        'def area(width, height):\n    """Docstring dropped."""\n    return width * height\n\n'
        "class A:\n    def grow(self, n):\n        self.n = self.n + n\n        return self.n\n")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "skip.py").write_text("def skipped(x):\n    return x + x + x + x + x + x\n")
    both = corpus.load_functions("train", root=tmp_path) + corpus.load_functions("eval", root=tmp_path)
    texts = sorted(ex.text for ex in both)
    assert texts == ["def area(width, height):\n    return width * height\n",
                     "def grow(self, n):\n    self.n = self.n + n\n    return self.n\n"]
    assert all(ex.prompt.startswith("def ") and ex.prompt.endswith(":\n") for ex in both)


def test_real_stdlib_is_found():
    found = corpus.load_functions("train", limit=20)
    assert len(found) == 20 and all(ex.body.startswith("    ") for ex in found)


def test_batch_rows_are_prompt_answer_eos_padding():
    rows = [Encoded([5, 6, 7], [8, 9, 0]), Encoded([5], [4] * 10 + [0])]
    batch = to_batch(rows, 8, eos_id=0)  # (2, 8); the second answer is cut
    assert batch.ids.tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], [5, 4, 4, 4, 4, 4, 4, 4]]
    assert batch.prompt_len.tolist() == [3, 1] and batch.answer_len.tolist() == [3, 7]
    assert batch.generated()[0].tolist() == [False] * 3 + [True] * 5
