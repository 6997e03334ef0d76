"""A slow model in the playground (ui/pace.py): progress while a forward runs, the pace measured and told, a
budget in forwards, and the int8 mini offered where only int8 fits.

The slow model is the tiny random one with a delay injected into every layer's FFN here (a sleep: a floor on
each forward's time, whatever the machine's speed); nothing waits on a fixed time, only for states.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from llada.budget import Budget
from llada.weights import memory
from llada.weights.replica import replica_config
from ui import models as m
from ui import pace
from ui.pace import Ahead, SlowBudget, slow_budget, working_line
from ui.playground import run as playground
from ui.runs import drain, start
from ui.settings import check_request

GIB = 2**30
PROMPT = "def add(a, b):"
LAYER_DELAY_S = 0.1  # injected into each layer's FFN: the tiny model's forward takes at least layers x this
BUDGET_DELAY_S = 0.01  # the budget tests count forwards, and need only a pace above SLOW.from_seconds: a small floor
WAIT_S = 120.0  # generous bound on any state a test waits for


def _slowed(model_dir, monkeypatch, delay: float) -> m.Models:
    """The tiny model, each forward slowed by `delay` per layer; slow from half of that per forward on."""
    models = m.Models([str(model_dir)])
    pipe = models.get(None)
    for layer in pipe.model.layers:
        plain = layer.mlp.forward

        def delayed(*args, _plain=plain, **kwargs):
            time.sleep(delay)
            return _plain(*args, **kwargs)

        monkeypatch.setattr(layer.mlp, "forward", delayed)
    monkeypatch.setattr(pace, "SLOW", SlowBudget(from_seconds=delay / 2, forwards=64, most_seconds=3600.0))
    monkeypatch.setattr(pace, "MARGIN", 100.0)  # the tests bound runs by forwards, not by this machine's speed
    return models


@pytest.fixture
def slow_models(tiny_model_dir, monkeypatch) -> m.Models:
    """Forwards slow enough (LAYER_DELAY_S a layer) that progress lines arrive while one runs."""
    return _slowed(tiny_model_dir, monkeypatch, LAYER_DELAY_S)


@pytest.fixture
def slow(tiny_model_dir, monkeypatch):
    """A model whose measured pace makes it slow (BUDGET_DELAY_S a layer), for the budget's forward counts."""
    return _slowed(tiny_model_dir, monkeypatch, BUDGET_DELAY_S).get(None)


def _slow_rule(forwards: int, most_seconds: float = 3600.0) -> SlowBudget:
    return SlowBudget(from_seconds=BUDGET_DELAY_S / 2, forwards=forwards, most_seconds=most_seconds)


def _request(pipe, gen_length=8):
    return check_request(pipe.presets, PROMPT, "S", block_length=8, gen_length=gen_length)


def forwards_needed(pipe, req) -> int:
    return pipe.generate(pipe.encode(PROMPT), req.settings.config).forwards


# ---- the budget ------------------------------------------------------------------------------------------

def test_a_fast_or_unmeasured_model_keeps_the_request_budget():
    base = Budget(forwards=1024, seconds=30.0)
    assert slow_budget(base, None) is base and slow_budget(base, 0.01) is base


def test_a_slow_model_is_bounded_in_forwards_with_time_for_them():
    base, rule = Budget(forwards=1024, seconds=30.0), SlowBudget(from_seconds=0.5, forwards=40, most_seconds=600.0)
    assert slow_budget(base, 2.0, rule) == Budget(forwards=40, seconds=100.0)  # 40 x 2 s x MARGIN 1.25
    assert slow_budget(base, 20.0, rule) == Budget(forwards=40, seconds=600.0)  # never past most_seconds
    assert slow_budget(base, 0.6, rule) == Budget(forwards=40, seconds=30.0)  # never below the request's
    assert slow_budget(Budget(forwards=8, seconds=30.0), 2.0, rule).forwards == 8  # nor more forwards


def test_a_slow_budget_refuses_nonsense():
    with pytest.raises(ValueError, match="at least 1 forward"):
        SlowBudget(forwards=0)


def test_the_forward_budget_lets_a_run_of_n_forwards_finish_and_stops_one_more(slow, monkeypatch):
    req = _request(slow)
    n = forwards_needed(slow, req)
    assert n > 1
    base = Budget(forwards=1024, seconds=0.0)  # in seconds alone, no slow run gets past its first forward
    monkeypatch.setattr(pace, "SLOW", _slow_rule(n))
    done = drain(start(slow, req, base))
    assert done.status == "done" and done.forwards == n, done.note
    monkeypatch.setattr(pace, "SLOW", _slow_rule(n - 1))
    cut = drain(start(slow, req, base))
    assert cut.status == "stopped" and cut.forwards == n - 1
    assert cut.note == f"budget reached: {n - 1} forwards (at most {n - 1} per run)"


def test_a_slow_run_is_still_bounded_in_time(slow, monkeypatch):
    """most_seconds caps a slow model's run however many forwards it may have."""
    monkeypatch.setattr(pace, "SLOW", _slow_rule(64, most_seconds=0.01))
    trace = drain(start(slow, _request(slow, 32), Budget(forwards=1024, seconds=0.0)))
    assert trace.status == "stopped" and trace.forwards == 1
    assert trace.note == "budget reached: 0.01 s of wall time per request"


# ---- progress while a forward runs ----------------------------------------------------------------------

def _page(models_, **widgets):
    page = {"mode": "S", "tau_mask": 0.7, "edit": True, "tau_edit": 0.5, "mbe": False, "mbe_window": 1,
            "block_length": 8, "gen_length": 8, "max_post_steps": 16, "temperature": 0.0, "seed": 0,
            "ghost": False}
    return playground.generate_ui(models_, prompt=PROMPT, **(page | widgets))


def test_progress_lines_arrive_while_one_forward_runs(slow_models, monkeypatch):
    monkeypatch.setattr(playground, "WORKING_TICK_S", LAYER_DELAY_S / 4)
    slow = slow_models.get(None)
    frames = list(_page(slow_models))
    working = [f.stats for f in frames if isinstance(f.stats, str) and "working: forward" in f.stats]
    firsts = [s for s in working if "working: forward 1," in s]
    assert firsts, "no progress line while the first forward ran"
    layers = slow.model.config.num_hidden_layers
    assert any(f"layer {layers} of {layers}" in s for s in firsts)  # the line follows the forward's layers
    assert "measures this model's pace" in firsts[0]  # before the first forward: nothing measured yet
    assert any("of about" in s for s in working if "working: forward 1," not in s)  # after it: what to expect
    last = frames[-1]
    assert last.trace.status == "done" and "s per forward on this machine" in last.stats


def test_a_slow_model_tells_its_pace_and_a_fast_one_does_not():
    assert pace.pace_sentence(None) == "" and pace.pace_sentence(0.01) == ""
    assert pace.pace_sentence(21.4).startswith("This model takes about 21.4 s per forward on this machine")
    assert working_line(2, 12.3, 4, 20, 25.0) == "⏳ working: forward 3, layer 5 of 20, 12 s of about 25.0 s"
    assert working_line(0, 1.26, 20, 20, None) == ("⏳ working: forward 1, output head, 1.3 s (the first forward "
                                                   "measures this model's pace)")


def test_stop_during_a_forward_returns_at_once_and_closes_the_engine_after_it():
    started, release, closed = threading.Event(), threading.Event(), threading.Event()

    def engine():
        try:
            yield "first"
            started.set()
            release.wait(WAIT_S)  # a forward in flight
            yield "second"
        finally:
            closed.set()

    ahead = Ahead(engine())
    assert next(ahead) == "first"
    ahead.ask()  # the next forward starts on the worker
    assert started.wait(WAIT_S)
    ahead.close()  # returns while the forward runs
    assert not closed.is_set()
    release.set()
    assert closed.wait(WAIT_S)  # the worker closed the engine once its forward ended
    with pytest.raises(StopIteration):
        next(ahead)  # that forward's record is dropped


def test_a_failure_in_a_forward_reaches_the_reader():
    def engine():
        yield "first"
        raise FloatingPointError("non-finite logits")

    ahead = Ahead(engine())
    assert next(ahead) == "first"
    with pytest.raises(FloatingPointError, match="non-finite"):
        next(ahead)


# ---- the int8 mini offered on a CPU ------------------------------------------------------------------------

@pytest.mark.parametrize("available_gib,offered", [(64, None), (24, "int8"), (8, "withheld")])
def test_the_mini_is_offered_in_int8_where_only_int8_fits(tmp_path, monkeypatch, available_gib, offered):
    """The memory available is faked (not the loader): bf16 (30.3 GiB) fits 64 GiB, only int8 fits 24 GiB."""
    mini = tmp_path / "mini"
    mini.mkdir()
    (mini / "config.json").write_text(json.dumps(replica_config("mini")))  # no weights: sized from the config
    monkeypatch.setattr(memory, "available_bytes", lambda device: available_gib * GIB)
    models = m.Models([("inclusionAI/LLaDA2.1-mini", str(mini))], rt=m.Runtime("cpu", "cpu"))
    if offered == "withheld":
        assert "with int8 weights they need" in models.withheld[0].reason
        return
    (model,) = models.offered
    assert model.quantize == offered
    assert model.dtype == torch.bfloat16
    if offered == "int8":
        assert model.note.startswith("bfloat16 with int8 weights (quantized at load)")


def test_the_page_says_how_long_a_slow_models_run_may_take(tmp_path, monkeypatch, tiny_model_dir):
    from ui.playground.controls import maybe_slow, wait_note

    assert "per forward" not in wait_note()  # only the embedded model: the page says nothing of slow ones
    assert wait_note(slow=SlowBudget(forwards=64, most_seconds=600.0)).endswith(
        "may use 64 forwards and up to 600 s per run instead, and a wait as long.")
    assert not maybe_slow(m.Models([str(tiny_model_dir)], rt=m.Runtime("cpu", "cpu")))  # fp32: the small ones
    mini = tmp_path / "mini"
    mini.mkdir()
    (mini / "config.json").write_text(json.dumps(replica_config("mini")))
    monkeypatch.setattr(memory, "available_bytes", lambda device: 24 * GIB)
    assert maybe_slow(m.Models([str(mini)], rt=m.Runtime("cpu", "cpu")))


def test_a_model_measured_fast_runs_its_forwards_without_the_worker_thread(tiny_model_dir):
    """Until its pace is known a model's runs go through `Ahead`; once measured fast, straight to the engine."""
    pipe = m.Models([str(tiny_model_dir)]).get(None)
    pace.pace_of(pipe).times = [pace.THREADED_FROM_S]  # as if measured at the threshold
    threaded = start(pipe, _request(pipe))
    assert threaded.ahead is not None
    threaded.close()
    pace.pace_of(pipe).times = [pace.THREADED_FROM_S / 2]
    run = start(pipe, _request(pipe))
    assert run.ahead is None and drain(run).status == "done"
