"""Runs that share forwards in the playground (`ui.runs.start_batch`, Compare): each trace is its run alone,
each run keeps its own budget and Stop."""

from __future__ import annotations

import pytest

from llada.budget import Budget
from ui.models import Models
from ui.playground.compare import compare_runs
from ui.runs import drain, interleave, start, start_batch
from ui.settings import check_request

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def models(tiny_model_dir) -> Models:
    return Models([str(tiny_model_dir)])


def _records(trace):
    return [r.to_dict() | {"seconds": 0} for r in trace.records]


def _requests(pipe, gen_length=16):
    return {mode: check_request(pipe.presets, PROMPT, mode, block_length=8, gen_length=gen_length)
            for mode in ("S", "Q", "M2T only")}


def test_batched_runs_equal_runs_alone(models):
    pipe = models.get(None)
    reqs = _requests(pipe)
    runs = start_batch(pipe, reqs)
    labels = [label for label, _ in interleave(runs)]
    assert labels[:3] == ["S", "Q", "M2T only"]
    for mode, req in reqs.items():
        alone = drain(start(pipe, req))
        assert runs[mode].trace.status == "done" and _records(runs[mode].trace) == _records(alone), mode
        assert runs[mode].trace.text == alone.text


def test_a_stopped_or_cut_row_leaves_the_others_going(models):
    pipe = models.get(None)
    reqs = _requests(pipe, gen_length=24)
    runs = start_batch(pipe, reqs, budget=Budget(forwards=2, seconds=600.0))  # every run cut at 2 forwards
    for _ in interleave(runs):
        pass
    assert all(run.trace.forwards == 2 and run.trace.status == "stopped" for run in runs.values())
    runs = start_batch(pipe, reqs)
    next(runs["S"].records)
    runs["S"].close()  # Stop on one side only
    for mode in ("Q", "M2T only"):
        assert _records(drain(runs[mode])) == _records(drain(start(pipe, reqs[mode])))
    assert runs["S"].trace.status == "stopped" and runs["S"].trace.forwards == 1


def test_compare_shares_one_batch(models):
    runs = compare_runs(models, None, PROMPT, 8, 16)
    assert set(runs) == {"S", "Q"} and runs["S"].records is not runs["Q"].records
    for _ in interleave(runs):
        pass
    pipe = models.get(None)
    for mode in ("S", "Q"):
        alone = drain(start(pipe, check_request(pipe.presets, PROMPT, mode, block_length=8, gen_length=16)))
        assert _records(runs[mode].trace) == _records(alone)


def test_sessions_on_one_model_share_forwards_from_their_own_threads(models, monkeypatch):
    """Two visitors' runs, each pulled by its own worker thread: fewer model calls, each trace as alone."""
    import threading

    pipe = models.get(None)
    reqs = _requests(pipe, gen_length=24)
    alone = {mode: drain(start(pipe, req)) for mode, req in reqs.items()}
    real, calls = pipe.model.forward_rows, []
    monkeypatch.setattr(pipe.model, "forward_rows", lambda rows: calls.append(len(rows)) or real(rows))
    runs = {mode: start(pipe, req) for mode, req in reqs.items()}  # all join the model's step scheduler
    threads = [threading.Thread(target=drain, args=(run,)) for run in runs.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for mode, run in runs.items():
        assert run.trace.status == "done" and _records(run.trace) == _records(alone[mode]), mode
    assert max(calls) > 1 and len(calls) < sum(t.forwards for t in alone.values())
