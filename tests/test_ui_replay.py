"""The replay's handlers around a run: a stopped run is not replayed from step 0, a replay tick never draws a run
still in progress, the comparison honours the MBE box and says what each side ran with."""

from __future__ import annotations

import gradio as gr

from tests.ui_helpers import hand_trace
from ui.models import Models
from ui.playground import compare, replay


def _timer_off(value) -> bool:
    return isinstance(value, gr.Timer) and value.active is False


def test_a_stopped_run_is_not_replayed_from_the_start():
    done, stopped = hand_trace().finish(), hand_trace().finish("stopped", "stopped by the user")
    assert replay.teach(done, True, False)[1] == 0  # a finished run replays slowly from step 0
    assert all(isinstance(x, type(gr.skip())) for x in replay.teach(stopped, True, False))
    running = hand_trace()  # status "running": the Stop handler has not finished it yet
    assert all(isinstance(x, type(gr.skip())) for x in replay.teach(running, True, False))


def test_a_tick_never_draws_a_run_in_progress():
    running = hand_trace()
    canvas, step, timer = replay.tick(running, 4, False)  # a tick of the old replay after a new run began
    assert isinstance(canvas, type(gr.skip())) and isinstance(step, type(gr.skip())) and _timer_off(timer)
    canvas, step, _ = replay.tick(hand_trace().finish(), 2, False)
    assert step == 3 and 'data-step="3"' in canvas


def test_compare_honours_the_mbe_box_and_says_so(tiny_model_dir):
    models = Models([str(tiny_model_dir)])
    last = list(compare.compare_ui(models, None, "def add(a, b):", 16, mbe=True))[-1]
    pair = last.pair
    assert pair["S"].settings.mbe and pair["Q"].settings.mbe
    assert "Multi-Block Editing on for both" in last.verdict and "blocks of" in last.verdict
    last = list(compare.compare_ui(models, None, "def add(a, b):", 16))[-1]
    assert not last.pair["S"].settings.mbe and "Multi-Block Editing off" in last.verdict
