"""HumanEval+ as a task of the Score | TPF sweep: items, their check in the sandbox, one sweep on the shipped model."""

from __future__ import annotations

from pathlib import Path

import pytest

from llada.eval.humaneval_task import GEN_LENGTH, HUMANEVAL, humaneval_items
from llada.eval.sweep import sweep
from llada.eval.sweep_grid import TASK_SETS, SweepSpec


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    import os

    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg"))  # canonical outputs cached here
    try:
        yield humaneval_items(2)
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME")
        else:
            os.environ["XDG_CACHE_HOME"] = old


def test_humaneval_plus_is_a_task_set_of_the_sweep():
    assert HUMANEVAL in TASK_SETS
    assert SweepSpec(tasks=(HUMANEVAL, "add")).tasks == ("add", HUMANEVAL)  # one order, whatever was given
    with pytest.raises(ValueError, match="humaneval\\+"):
        SweepSpec(tasks=("mbpp",))


def test_an_item_is_right_when_its_program_passes_humaneval_plus(items):
    first = items[0]
    assert first.task == HUMANEVAL and first.problem.task_id == "HumanEval/0"
    assert first.check(first.problem.canonical_solution)  # the body after the code prefix
    assert not first.check("    return True\n")


def test_a_sweep_on_humaneval_plus(items, embedded_pipe):
    spec = SweepSpec(tau_masks=(0.9,), tau_edits=(0.5,), mbe=(False,), presets=(), tasks=(HUMANEVAL,), n=2)
    last = None
    for last in sweep(embedded_pipe, spec):
        pass
    assert last.status == "done" and last.total == 2 and len(last.points) == 1
    point = last.points[0]
    assert set(point.tasks) == {HUMANEVAL} and point.items == 2 and 0.0 <= point.accuracy <= 1.0
    assert point.tpf > 0


def test_an_item_writes_a_program_sized_answer(items, embedded_pipe):
    item, ids, cfg = items[0].prepare(embedded_pipe, embedded_pipe.config("S", gen_length=32))
    assert item.prompt_kind is not None and not item.prompt_kind.chat  # the shipped model has no chat template
    assert cfg.gen_length == GEN_LENGTH and cfg.eos_early_stop
    assert ids == embedded_pipe.encode(items[0].prompt, chat=False)


@pytest.fixture(scope="module")
def embedded_pipe():
    from llada.pipeline import Pipeline

    return Pipeline.load(Path(__file__).resolve().parents[1] / "assets" / "model")
