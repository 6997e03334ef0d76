"""One budget, one edge rule: a run that ends on its last allowed forward is done; one that needs more is cut
at its budget (never given a forward more), in the playground and in a sweep alike."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from llada.budget import Budget
from llada.eval import sweep as sw
from llada.data.tasks import Item
from llada.pipeline import Pipeline
from ui.runs import BUDGET, drain, start
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
        assert state["ran"] == allowed + 1  # a stream that cannot be asked is pulled once more at the edge


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


# ---- the engine is asked before each forward: at the budget no forward is computed for nothing ---------------

@pytest.fixture
def calls(pipe, monkeypatch):
    """How many times the model computed a forward (every decode and cache forward is one call)."""
    count = {"n": 0}
    real = pipe.model.forward_rows

    def counted(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pipe.model, "forward_rows", counted)
    return count


def long_config(pipe):
    """Q on a long output: hundreds of forwards on the tiny model (more than the sweep's budget allows)."""
    return pipe.config("Q", block_length=8, gen_length=320)


def test_the_playground_budget_computes_exactly_its_forwards(pipe, calls):
    req = check_request(pipe.presets, PROMPT, "S", block_length=8, gen_length=16)
    calls["n"] = 0
    n = forwards_needed(pipe)
    assert calls["n"] == n  # one model call per forward of a run alone
    for allowed in (1, 2, n - 1, n, n + 5):
        calls["n"] = 0
        trace = drain(start(pipe, req, replace(BUDGET, forwards=allowed, seconds=600)))
        assert calls["n"] == trace.forwards == min(allowed, n), allowed
        assert trace.status == ("done" if allowed >= n else "stopped")
        assert bool(trace.note) is (allowed < n)


def test_the_sweeps_budget_computes_exactly_its_forwards(pipe, calls):
    cfg = long_config(pipe)
    budget = replace(sw.DECODE_BUDGET, seconds=600)  # its forwards, whatever the machine's speed
    item = AlwaysRight("add", PROMPT, "")
    tally, cut = sw.score(pipe, item, cfg, budget)
    assert cut and tally.forwards == budget.forwards and calls["n"] == budget.forwards


def test_a_refused_run_keeps_the_records_of_its_allowed_forwards(pipe):
    cfg = pipe.config("S", block_length=8, gen_length=16)
    ids = pipe.encode(PROMPT)
    whole = pipe.generate(ids, cfg)
    for allowed in (1, whole.forwards - 1):
        trace = pipe.new_trace(ids, cfg)
        bounded = Budget(forwards=allowed, seconds=600).bound(pipe.stream(ids, cfg))
        list(trace.follow(bounded))
        assert bounded.cut and bounded.refused == bounded.cut
        timeless = lambda records: [replace(r, seconds=0.0) for r in records]  # noqa: E731
        assert timeless(trace.records) == timeless(whole.records[:allowed])  # the same run, cut at its budget


def test_a_batched_sweep_computes_no_forward_past_a_decodes_budget(pipe, monkeypatch):
    """The sweep decodes a cell's items as rows of one batch: each row stops at its own budget, its forward
    never computed (rows counted in the model's row-batched calls)."""
    rows = {"n": 0}
    real = pipe.model.forward_rows

    def counted(batch_rows, *args, **kwargs):
        rows["n"] += len(batch_rows)
        return real(batch_rows, *args, **kwargs)

    monkeypatch.setattr(pipe.model, "forward_rows", counted)
    monkeypatch.setattr(sw, "BATCH", 3)
    spec = sw.SweepSpec((0.9,), (0.0,), (False,), (), ("add", "sort"), 3, 0, "eval", 8, 24)
    (cell,) = spec.cells(pipe.presets)
    cfg = cell.config(pipe, spec.gen_length)
    rows["n"] = 0
    needed = [pipe.generate(pipe.encode(it.prompt), cfg).forwards for items in spec.items().values() for it in items]
    assert rows["n"] == sum(needed) and max(needed) > 2
    for allowed in (1, 2, max(needed)):
        rows["n"] = 0
        last = list(sw.sweep(pipe, spec, budget=Budget(forwards=allowed, seconds=600)))[-1]
        (point,) = last.points
        assert last.status == "done" and point.cut == sum(n > allowed for n in needed)
        warm_up = needed[0]  # the sweep first decodes its first item once, unbounded and untimed
        assert rows["n"] == warm_up + sum(min(n, allowed) for n in needed), allowed
