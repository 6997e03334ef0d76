"""One budget, one edge rule: a run that ends on its last allowed forward is done; one that needs more is cut
at its budget (never given a forward more), in the playground and in a sweep alike."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llada.budget import Budget
from llada.eval import sweep as sw
from llada.data.tasks import Item
from llada.pipeline import Pipeline
from ui.runs import drain, start
from ui.settings import check_request

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return Pipeline.load(tiny_model_dir)


def engine(n: int):
    """A stand-in engine of `n` forwards, counting how many it ran and whether it was closed."""
    state = {"ran": 0, "closed": False}

    def records():
        try:
            for k in range(n):
                state["ran"] += 1
                yield k
        finally:
            state["closed"] = True

    return records(), state


# ---- the rule, on a stand-in engine -------------------------------------------------------------------------

@pytest.mark.parametrize("needed, allowed, kept, cut", [(3, 3, 3, False), (3, 4, 3, False), (4, 3, 3, True),
                                                        (1, 1, 1, False), (2, 1, 1, True)])
def test_the_edge_rule(needed, allowed, kept, cut):
    records, state = engine(needed)
    bounded = Budget(forwards=allowed, seconds=60).bound(records)
    assert list(bounded) == list(range(kept))
    assert bool(bounded.cut) is cut and bounded.forwards == kept
    assert state["closed"]
    if cut:
        assert bounded.cut == f"budget reached: {allowed:,} forwards (at most {allowed:,} per run)"
        assert state["ran"] == allowed + 1  # the engine is pulled once more only to learn that it needs more


def test_the_wall_clock_cuts_a_run():
    now = iter([0.0, 1.0, 2.5, 100.0])  # started, after forward 1, after forward 2, ...
    records, state = engine(10)
    bounded = Budget(forwards=100, seconds=2.0).bound(records, clock=lambda: next(now))
    assert list(bounded) == [0, 1]
    assert bounded.cut == "budget reached: 2 s of wall time per request" and state["closed"]


def test_closing_early_closes_the_engine():
    records, state = engine(10)
    bounded = Budget(forwards=5, seconds=60).bound(records)
    next(bounded)
    bounded.close()
    assert state["closed"] and state["ran"] == 1


@pytest.mark.parametrize("bad", [dict(forwards=0), dict(forwards=True), dict(forwards=2.0), dict(seconds=-1.0),
                                 dict(seconds=float("nan"))])
def test_a_budget_that_allows_nothing_is_refused(bad):
    with pytest.raises(ValueError, match="budget"):
        Budget(**bad)


# ---- the playground's runs -----------------------------------------------------------------------------------

def forwards_needed(pipe) -> int:
    req = check_request(pipe.presets, PROMPT, "S", block_length=8, gen_length=16)
    return pipe.generate(pipe.encode(PROMPT), req.settings.config).forwards


def test_a_run_that_ends_on_its_last_allowed_forward_is_done(pipe):
    n = forwards_needed(pipe)
    req = check_request(pipe.presets, PROMPT, "S", block_length=8, gen_length=16)
    done = drain(start(pipe, req, Budget(forwards=n, seconds=600)))
    assert (done.status, done.forwards, done.note) == ("done", n, "")
    cut = drain(start(pipe, req, Budget(forwards=n - 1, seconds=600)))
    assert (cut.status, cut.forwards) == ("stopped", n - 1)
    assert cut.note == f"budget reached: {n - 1:,} forwards (at most {n - 1:,} per run)"


def test_the_wall_clock_budget_stops_a_run(pipe):
    req = check_request(pipe.presets, PROMPT, "S", block_length=8, gen_length=64)
    assert forwards_needed(pipe) > 1
    trace = drain(start(pipe, req, Budget(forwards=1000, seconds=0.0)))  # any forward takes more than 0 s
    assert trace.status == "stopped" and trace.forwards == 1
    assert trace.note == "budget reached: 0 s of wall time per request"


# ---- a sweep's decodes ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AlwaysRight(Item):
    """An item whose every answer checks: only the budget can make it wrong."""

    def check(self, text: str) -> bool:
        return True


def test_a_cut_sweep_item_counts_as_wrong(pipe):
    item = AlwaysRight("add", PROMPT, "")
    cfg = pipe.config("S", block_length=8, gen_length=16)
    n = pipe.generate(pipe.encode(PROMPT), cfg).forwards
    tally, cut = sw.score(pipe, item, cfg, Budget(forwards=n, seconds=600))
    assert (cut, tally.correct, tally.forwards) == (False, 1, n)  # ends on its last allowed forward: done
    tally, cut = sw.score(pipe, item, cfg, Budget(forwards=n - 1, seconds=600))
    assert (cut, tally.correct, tally.items) == (True, 0, 1)
    assert tally.forwards == n - 1  # never a forward past the budget in its counts
