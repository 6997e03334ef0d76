"""What the browser's scrubbers draw from, without a browser: one shape for the Playground's run, an S vs Q pair
and a Learn lesson (each canvas's replay, a lesson's narration per step), and the server's answers to a scrub
of a finished replay (nothing to draw: the page drew it)."""

from __future__ import annotations

import gradio as gr

from test_learn import shortened
from ui.learn import view as learn
from ui.learn.lessons import Recording
from ui.models import Models
from ui.playground import compare
from ui.render import live
from ui_helpers import hand_trace

SKIP = type(gr.skip())


def pair_lesson() -> Recording:
    """Two finished runs of unequal steps (6 and 3), as the S vs Q lesson has."""
    t, plain = hand_trace(), {"mbe": False}
    runs = (shortened(t, n, mode=mode, settings=plain).finish() for n, mode in ((6, "Q"), (3, "S")))
    return Recording("pair", tuple(runs))


def test_a_scrub_value_holds_each_canvas_replay_and_a_lessons_narration():
    trace = hand_trace().finish()
    value = live.scrub_value(live.replay_value(trace))
    assert value == {"replays": [value["replays"][0]]} and value["replays"][0]["target"] == "canvas"
    assert live.scrub_value(None, None) is None  # no finished canvas: the server draws
    lines = {"target": "#x", "now": ["a", "b"]}
    assert live.scrub_value(live.replay_value(trace), None, narration=lines)["narration"] == lines


def test_a_lessons_replay_is_each_runs_canvas_and_the_narration_of_every_step():
    rec = pair_lesson()
    value = learn.replay_of(rec)
    first, second = value["replays"]
    assert (first["target"], first["steps"]) == ("canvas-learn", 6) and (second["target"], second["steps"]) == (
        "canvas-learn-b", 3)
    assert value["narration"]["target"] == learn.NARRATION and len(value["narration"]["now"]) == rec.steps + 1
    for k, now in enumerate(value["narration"]["now"]):
        assert now.startswith('<p class="now" data-run="0">') and now in learn.narration_html(rec, k)
    assert learn.replay_of(None) is None


def test_the_server_draws_a_lesson_frame_anew_each_time():
    rec = pair_lesson()
    one, two = learn.frame(rec, 2), learn.frame(rec, 2)
    assert all(a != b for a, b in zip(one, two))  # the page may have drawn another step since: a new value
    assert 'data-step="2"' in one[0] and 'data-step="2"' in one[2]


def test_a_finished_pair_carries_its_replay_and_is_not_redrawn_by_a_scrub(tiny_model_dir):
    frames = list(compare.compare_ui(Models([str(tiny_model_dir)]), None, "def add(a, b):", 16))
    assert frames[0].replay is None  # a live pair: the last pair's replay goes
    last = frames[-1]
    targets = [(r["target"], r["steps"]) for r in last.replay["replays"]]
    assert targets == [("canvas-s", last.pair["S"].steps), ("canvas-q", last.pair["Q"].steps)]
    assert all(isinstance(x, SKIP) for x in compare.compare_step(last.pair, 1))
    running = {side: hand_trace() for side in ("S", "Q")}  # still running: the server draws the step
    s, q = compare.compare_step(running, 2)
    assert 'id="canvas-s"' in s and 'data-step="2"' in q
