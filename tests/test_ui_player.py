"""The replay player every tab shares (ui/player.py): where play starts, a tick, the next edit, over one run or a
lesson's pair of runs of unequal length, and what it answers when there is nothing to play."""

from __future__ import annotations

import gradio as gr

from test_learn import shortened
from ui import player
from ui_helpers import hand_trace

SKIP = type(gr.skip())


def drawn_by(*traces) -> player.Replay:
    """A replay of `traces` whose two components show which step was drawn."""
    return player.Replay(tuple(traces), lambda k: (f"a{k}", f"b{k}"), width=2)


def _stops(timer) -> bool:
    return isinstance(timer, gr.Timer) and timer.active is False


def test_play_starts_where_the_scrubber_is_and_from_zero_at_the_end():
    replay, timer = drawn_by(hand_trace()), gr.Timer(1.0, active=True)
    assert replay.steps == 6
    assert player.play(replay, 2, timer) == ("a2", "b2", 2, timer)
    assert player.play(replay, 6, timer) == ("a0", "b0", 0, timer)


def test_a_tick_moves_one_step_and_stops_the_timer_at_the_last():
    replay = drawn_by(hand_trace())
    a, b, k, timer = player.tick(replay, 3)
    assert (a, b, k) == ("a4", "b4", 4) and isinstance(timer, SKIP)  # the timer goes on
    *_, k, timer = player.tick(replay, 5)
    assert k == 6 and _stops(timer)
    *drawn, timer = player.tick(replay, 6)  # at the end: nothing drawn, the timer stops
    assert all(isinstance(x, SKIP) for x in drawn) and len(drawn) == 3 and _stops(timer)


def test_the_longest_run_of_a_pair_sets_the_steps_and_the_first_edit_of_either_is_next():
    full, short = hand_trace(), shortened(hand_trace(), 3)  # edits: T2T at step 2, MBE at 4; the short one's at 2
    replay = drawn_by(short, full)
    assert replay.steps == 6
    assert player.next_edit(replay, 0)[:3] == ("a2", "b2", 2)
    *_, k, timer = player.next_edit(replay, 2)  # the short run has no edit after 2, the long one at 4
    assert k == 4 and _stops(timer)
    *drawn, timer = player.next_edit(replay, 4)  # no edit after 4: stay, a replay stops
    assert all(isinstance(x, SKIP) for x in drawn) and _stops(timer)


def test_nothing_on_screen_draws_nothing():
    empty = drawn_by()
    for answer in (player.play(empty, 0, gr.Timer(1.0)), player.tick(empty, 0), player.next_edit(empty, 0)):
        *drawn, timer = answer
        assert len(drawn) == 3 and all(isinstance(x, SKIP) for x in drawn) and _stops(timer)
