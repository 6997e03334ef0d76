"""The replay player every tab shares: where *play* starts, one *tick* of its timer, the *next edit*.

A tab replays one run (the Playground) or a lesson's runs side by side (Learn) with a step scrubber, a
`gr.Timer` and three buttons. What differs between tabs is only what they draw, so a tab hands in a
`Replay`: the runs on screen and `draw(k)`, the new frames of its components at step `k`. Every answer
here is the tab's outputs in one order: its drawn components, the scrubber's step, the timer:

    (*replay.draw(k), k, timer)        # draw step k; the timer starts, stops or stays (gr.skip())
    (gr.skip(), ..., gr.skip(), stopped())   # nothing to draw: everything stays, a replay stops

The longest run sets the steps (a shorter run of a pair shows its last step). Nothing here touches a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gradio as gr

from llada.trace import Trace

from .render import canvas


# A tab's stops (scrub, pause, next edit) and starts (play, a lesson picked) are separate events, and a loaded
# server may answer them in either order: a stop answered after a later play would stop that play. The page keeps
# them in order (assets/scrub.js `lladaOrder`): a stop counts as in flight from its sending until its answer has
# been applied, and a start is sent once no stop is in flight (a stop unanswered for 20 s no longer holds it).
STOP_JS = "(...args) => { window.lladaOrder?.stop(); return args; }"
PAUSE_JS = "(...args) => { window.lladaOrder?.stop(true); return args; }"  # also sends a scrubber press's pause
STOP_LANDED_JS = "() => { window.lladaOrder?.landed(); }"
START_JS = "async (...args) => { await window.lladaOrder?.clear(); return args; }"
TICK_JS = "(...args) => { window.lladaOrder?.tick(); return args; }"  # a tick draws a step: a start waits for it
TICKED_JS = "() => { window.lladaOrder?.ticked(); }"


def stops(listener: Callable, fn: Callable, inputs, outputs, pause: bool = False, **kwargs):
    """`listener(fn, ...)` (say `next_edit.click`) wired as a stop: a later start waits for its answer. `pause`:
    the button a press on the scrubber clicks (assets/scrub.js); every click of it is sent, none dropped as a
    repeat, since each press is held until its click's event is sent."""
    if pause:
        kwargs["trigger_mode"] = "multiple"
    return _counted(listener, fn, inputs, outputs, PAUSE_JS if pause else STOP_JS, STOP_LANDED_JS, **kwargs)


def starts(listener: Callable, fn: Callable, inputs, outputs, **kwargs):
    """`listener(fn, ...)` (say `play.click`) wired as a start: sent once the stops before it are answered."""
    return listener(fn, inputs, outputs, js=START_JS, **kwargs)


def ticks(timer: gr.Timer, fn: Callable, inputs, outputs, **kwargs):
    """`timer.tick(fn, ...)` counted in flight in the page until its answer is applied: a start waits for it,
    since a tick answered after the start would draw its step over the start's."""
    return _counted(timer.tick, fn, inputs, outputs, TICK_JS, TICKED_JS, **kwargs)


def _counted(listener: Callable, fn: Callable, inputs, outputs, sent_js: str, landed_js: str, **kwargs):
    """`listener(fn, ...)` running `sent_js` in the page as it is sent and `landed_js` once its answer's values
    are applied (a js-only `.then`: no server round trip)."""
    event = listener(fn, inputs, outputs, js=sent_js, **kwargs)
    event.then(None, js=landed_js)
    return event


def stopped() -> gr.Timer:
    """The timer's value that stops a replay."""
    return gr.Timer(active=False)


def pause() -> gr.Timer:
    """*pause* pressed (or a run started): the replay stops where it is."""
    return stopped()


@dataclass(frozen=True)
class Replay:
    """What a tab replays: `traces` (none: nothing on screen) and `draw`, step -> its `width` components' frames."""

    traces: tuple[Trace, ...]
    draw: Callable[[int], tuple]
    width: int

    @property
    def steps(self) -> int:
        return max(t.steps for t in self.traces)

    def at(self, k: int, timer) -> tuple:
        """The tab's outputs showing step `k`, with the timer's new value."""
        return (*self.draw(k), k, timer)

    def idle(self) -> tuple:
        """The tab's outputs when there is nothing to show: every component stays, a replay stops."""
        return (*(gr.skip(),) * (self.width + 1), stopped())


def play(replay: Replay, step: int, timer: gr.Timer) -> tuple:
    """*play* pressed at `step`: draw it and start `timer` (from step 0 when the scrubber sits at the end)."""
    if not replay.traces:
        return replay.idle()
    return replay.at(0 if step >= replay.steps else step, timer)


def tick(replay: Replay, step: int) -> tuple:
    """One step forward; the timer stops at the last step (and when there is nothing left to play)."""
    if not replay.traces or step >= replay.steps:
        return replay.idle()
    k = step + 1
    return replay.at(k, gr.skip() if k < replay.steps else stopped())


def next_edit(replay: Replay, step: int) -> tuple:
    """Jump to the first step after `step` where any run edited something (T2T or MBE), stopping a replay;
    stay where it is when there is none."""
    found = [k for t in replay.traces if (k := canvas.next_edit_step(t, step)) is not None]
    if not found:
        return replay.idle()
    return replay.at(min(found), stopped())
