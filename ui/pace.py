"""A slow model in the playground: how long its forward takes, where the forward in flight is, and a run's
budget sized in forwards.

The real LLaDA2.1-mini in int8 on a CPU takes seconds to tens of seconds per forward; the embedded model
takes milliseconds. Three pieces let a visitor watch the slow one work instead of a frozen page:

* `Pace` (one per loaded model, `pace_of(pipe)`): the seconds per forward, the median of the first
  `MEASURED` forwards the model runs (so measured on its first run, then kept), and the layer the
  forward in flight has reached (a pre-hook on every layer's input norm: the one submodule that both the
  whole-batch and the row-batched forward call through `nn.Module.__call__`). The runs of one model share
  its forwards (`ui.runs.scheduler`), so one model has at most one forward in flight.
* `Ahead`: a run's engine stream whose forwards run on a worker thread, one at a time and only when asked
  (lockstep: the run is exactly the one it is without it); a model measured fast runs without it. The
  handler asks for the next record, waits for it in short ticks (`ready(timeout)`) and draws a progress
  line on each tick. Closing it while a forward runs lets that forward finish on its thread, which then
  closes the engine; its record is dropped.
* `slow_budget`: a model whose forward is slow gets a budget in forwards (`SLOW.forwards`), with wall time
  enough for them, up to `SLOW.most_seconds`, so a real run can finish and no run holds a decode slot
  longer than that.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

from llada.budget import Budget

MEASURED = 4  # forwards whose median is the model's pace (the first one pays one-time setup)
MARGIN = 1.25  # a slow run's wall time over its forwards at the measured pace: forwards vary with the prompt
THREADED_FROM_S = 0.1  # a model measured faster than this per forward runs without the worker thread (no line
#                        to draw within a forward; the thread's hand-over costs ~1 ms a forward)


@dataclass(frozen=True)
class SlowBudget:
    """What a run on a slow model (`from_seconds` per forward or more) may cost: `forwards` forwards, in at
    most `most_seconds` of wall time."""

    from_seconds: float = 0.5  # slower than this per forward, a model's runs are bounded in forwards
    forwards: int = 64  # a 32-token block in S mode drafts in well under 32 forwards; its edits fit too
    most_seconds: float = 600.0  # no run holds a decode slot longer (others wait in the queue, told so)

    def __post_init__(self) -> None:
        if self.forwards < 1 or not self.most_seconds > 0:
            raise ValueError(f"a slow budget needs at least 1 forward and some seconds, got {self}")


SLOW = SlowBudget()  # deployments and tests replace it (read at each request)


def slow_budget(base: Budget, per_forward: float | None, slow: SlowBudget | None = None) -> Budget:
    """`base` for a model faster than `slow.from_seconds` per forward (or whose pace is not known yet); else at
    most `slow.forwards` forwards (never more than `base.forwards`) with their wall time at
    `per_forward` seconds each (x MARGIN), at least `base.seconds` and at most `slow.most_seconds`."""
    slow = slow or SLOW
    if per_forward is None or per_forward < slow.from_seconds:
        return base
    seconds = min(slow.most_seconds, slow.forwards * per_forward * MARGIN)
    return Budget(forwards=min(base.forwards, slow.forwards), seconds=max(base.seconds, seconds))


class Pace:
    """One model's seconds per forward (measured) and the layer its forward in flight has reached."""

    def __init__(self, layers: int = 0):
        self.times: list[float] = []  # seconds of the first MEASURED forwards
        self.layers = layers
        self.layer = 0  # the layer the forward in flight is in (0-based; `layers`: the output head)

    @property
    def per_forward(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    def threaded(self) -> bool:
        """Should a run's forwards go to a worker thread (`Ahead`)? Yes until the pace says they are fast."""
        return self.per_forward is None or self.per_forward >= THREADED_FROM_S

    def observe(self, record) -> None:
        """Count a forward's engine seconds (a decode or a cache forward), until MEASURED of them are known."""
        if len(self.times) < MEASURED:
            self.times.append(float(record.seconds))

    def watch(self, model) -> None:
        """Follow `model`'s forwards layer by layer (a pre-hook on each layer's input norm)."""
        layers = list(getattr(model, "layers", []))
        self.layers = len(layers)
        for index, layer in enumerate(layers):
            layer.input_layernorm.register_forward_pre_hook(lambda *_, at=index: setattr(self, "layer", at))
        if layers:  # the final norm: the output head (vocab x hidden, often the largest matrix) and the decision
            model.norm.register_forward_pre_hook(lambda *_: setattr(self, "layer", len(layers)))


_PACES_LOCK = threading.Lock()


def pace_of(pipe) -> Pace:
    """The Pace of a loaded model (made, and its layers watched, on first use)."""
    with _PACES_LOCK:
        pace = getattr(pipe, "pace", None)
        if pace is None:
            pace = Pace()
            pace.watch(pipe.model)
            pipe.pace = pace
        return pace


class Ahead:
    """An engine stream whose forwards run on a worker thread when asked (module docstring).

    `ask()` starts the next forward (if none is running or waiting to be read); `ready(timeout)` waits for
    it; `next()` takes it (asking and waiting if need be). `limit`, `refused` and `seconds` are the stream's."""

    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.result: tuple | None = None  # ("record", r) | ("end", None) | ("error", err), waiting to be read
        self.running = False
        self.closing = False
        self.asked_at = 0.0  # time.monotonic() when the forward in flight was asked for

    def __getattr__(self, name):  # limit, refused, seconds: the stream's own
        return getattr(self.__dict__["stream"], name)

    def __iter__(self) -> "Ahead":
        return self

    def ask(self) -> None:
        with self.lock:
            if self.running or self.result is not None or self.closing:
                return
            self.running, self.asked_at = True, time.monotonic()
            self.done.clear()
        threading.Thread(target=self._pull, name="llada-forward", daemon=True).start()

    def ready(self, timeout: float) -> bool:
        """Is the asked-for record (or the end) there, waiting at most `timeout` seconds?"""
        self.ask()
        return self.done.wait(timeout)

    def __next__(self):
        if self.closing:
            raise StopIteration
        self.ask()
        self.done.wait()
        with self.lock:
            kind, value = self.result or ("end", None)
            self.result = None
        if kind == "error":
            raise value
        if kind == "end":
            raise StopIteration
        return value

    def close(self) -> None:
        """Close the stream now, or after the forward in flight (on its thread; its record is dropped)."""
        with self.lock:
            self.closing, self.result = True, None
            if self.running:
                return
        self.stream.close()

    def _pull(self) -> None:
        try:
            out = ("record", next(self.stream))
        except StopIteration:
            out = ("end", None)
        except BaseException as err:  # noqa: BLE001 - handed to the reader, raised there
            out = ("error", err)
        with self.lock:
            self.running = False
            closing = self.closing
            if not closing:
                self.result = out
        if closing:
            self.stream.close()
        self.done.set()


def pace_sentence(per_forward: float | None) -> str:
    """What to expect of a slow model, one sentence ("" for a fast one or before its first forward)."""
    if per_forward is None or per_forward < SLOW.from_seconds:
        return ""
    return (f"This model takes about {per_forward:.1f} s per forward on this machine (measured on its first "
            f"run); a run is bounded by forwards ({SLOW.forwards} at most) and {SLOW.most_seconds:g} s.")


def working_line(forwards: int, elapsed: float, layer: int, layers: int, per_forward: float | None) -> str:
    """The progress line while forward `forwards + 1` runs: its layer, its seconds so far, what to expect."""
    where = "" if not layers else f"layer {layer + 1} of {layers}, " if layer < layers else "output head, "
    expect = (f" of about {per_forward:.1f} s" if per_forward is not None
              else " (the first forward measures this model's pace)")
    return f"⏳ working: forward {forwards + 1}, {where}{elapsed:.{1 if elapsed < 10 else 0}f} s{expect}"
