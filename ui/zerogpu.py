"""GPU slots on a ZeroGPU Space: how long each `@spaces.GPU` call asks for, and sweeps cut into calls.

A ZeroGPU Space holds no GPU: each decorated call asks for a slot of a given duration, runs in a worker
that has the GPU, and gives it back (huggingface.co/docs/hub/spaces-zerogpu: an H200 slice, 70 GB;
shorter slots queue first; a visitor has a daily quota: 2 min unauthenticated, 3.5 min with a free
account, 25 min PRO). A call that outlives its slot is killed, and its run is lost.

A slot (`SlotClock.seconds`) is the weights' transfer to a new worker, plus the request's decode time:
its forwards at the per-forward time measured on the first GPU call (the median of that call's
forwards, so the first call's one-time compiles do not count; kept for the server's life; an assumed
time before that), and never less than the request budget (`ui.runs.BUDGET.seconds`): the budget, not
ZeroGPU, must be what stops a run. Slots are at most `MAX_SLOT`.

The engine is chosen inside the GPU: models are loaded in the main process, which never touches CUDA,
so their engine (`llada.fast.engine.use_engine`: the fused kernels after a self-check) is chosen at the start
of each GPU worker's first call, by the hooks in `ON_CALL` (`ui.models.Models.engines_on_gpu`), and
kept for that worker's life; a new worker's slot has `WORKER_SETUP_S` for it.

A Score | TPF sweep is longer than any slot: on ZeroGPU it runs as a series of calls of `SWEEP_CALL_S`
of sweeping each (`split_sweep`), finished points cached between calls, so that every call fits a
visitor's quota and a sweep stops cleanly where the quota ends.
"""

from __future__ import annotations

import functools
import math
import os
import statistics

ASSUMED_SECONDS_PER_FORWARD = 0.12  # before any measurement: LLaDA2.1-mini bf16 on the PyTorch experts (estimate)
TRANSFER_BYTES_PER_S = 8 * 2**30  # host -> GPU copy of the resident weights in a new worker (estimate, taken low)
MARGIN = 1.25  # a slot's decode time over its estimate: forwards vary with the prompt
MAX_SLOT = 120  # seconds: the longest slot asked for (a free visitor's quota is 210 s a day)
WORKER_SETUP_S = 20.0  # a new worker: Triton compiles and the engine's self-check (estimate; measured by gpu-check)
SWEEP_CALL_S = 30.0  # seconds of sweeping per GPU call; a decode in flight at the limit finishes (DECODE_BUDGET)


def zero_gpu() -> bool:
    """A ZeroGPU Space: the platform sets SPACES_ZERO_GPU (the `spaces` package is on every Space)."""
    return os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes", "on")


class SlotClock:
    """The slot a request needs (module docstring); `observe` takes the first GPU call's trace."""

    def __init__(self, weights: int = 0, per_forward: float | None = None):
        self.weights = weights  # bytes a new worker copies to its GPU
        self.per_forward = per_forward  # seconds, measured on the first GPU call; None before it

    def observe(self, trace) -> None:
        """Keep the median forward time of the first trace that has forwards (later ones change nothing)."""
        times = [r.seconds for r in getattr(trace, "records", []) if r.kind == "decode"]
        if self.per_forward is None and times:
            self.per_forward = statistics.median(times)

    def transfer(self) -> float:
        """What a new worker spends before the request: the weights' copy and the engine's setup."""
        return self.weights / TRANSFER_BYTES_PER_S + (WORKER_SETUP_S if self.weights else 0.0)

    def seconds(self, forwards: int, budget_s: float) -> int:
        """transfer + max(budget, forwards x per-forward x MARGIN), whole seconds, at most MAX_SLOT."""
        per_forward = self.per_forward if self.per_forward is not None else ASSUMED_SECONDS_PER_FORWARD
        decode = max(budget_s, forwards * per_forward * MARGIN)
        return int(min(math.ceil(self.transfer() + decode), MAX_SLOT))

    def sweep_seconds(self, decode_budget_s: float) -> int:
        """One sweep call: transfer + SWEEP_CALL_S + the decode that may be in flight at its end."""
        return int(min(math.ceil(self.transfer() + SWEEP_CALL_S + decode_budget_s), MAX_SLOT))


CLOCK = SlotClock()  # the server's one clock: set by ui.models (weights) and the first GPU call (per-forward)
ON_CALL: list = []  # callables run at the start of every GPU call, inside the worker (ui.models registers one)


def traces_in(value) -> list:
    """The Traces inside a handler's output (a frame's fields, a tuple, a dict's values), one level deep."""
    from llada.trace import Trace

    if isinstance(value, Trace):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Trace)] + [t for v in value if isinstance(v, dict)
                                                              for t in v.values() if isinstance(t, Trace)]
    return []


def measured(fn, clock: SlotClock = CLOCK):
    """`fn` (a function or generator function) whose outputs' traces teach `clock` the forward time."""
    import inspect

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            last = None
            for out in fn(*args, **kwargs):
                last = out
                yield out
            for trace in traces_in(last):
                clock.observe(trace)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        for trace in traces_in(out):
            clock.observe(trace)
        return out
    return call


def on_gpu(fn=None, *, seconds=None):
    """`spaces.GPU(fn, duration=seconds)` on a ZeroGPU Space, its outputs measured; `fn` unchanged elsewhere.

    seconds(*args, **kwargs) takes the handler's own arguments and returns the slot's length."""
    if fn is None:
        return functools.partial(on_gpu, seconds=seconds)
    if not zero_gpu():
        return fn
    import spaces

    inside = _with_hooks(fn)
    return measured(spaces.GPU(inside, duration=seconds) if seconds is not None else spaces.GPU(inside))


def _with_hooks(fn):
    """`fn` that first runs the ON_CALL hooks (inside the GPU worker, where CUDA is real)."""
    import inspect

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            for hook in ON_CALL:
                hook()
            yield from fn(*args, **kwargs)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        for hook in ON_CALL:
            hook()
        return fn(*args, **kwargs)
    return call


def split_sweep(chunk, data, calls: int, more) -> object:
    """Run `chunk(data)` (one GPU call's generator of frames) up to `calls` times while `more(last frame)`
    says the sweep stopped at a call's time limit; yields every frame. A refused call (a visitor's quota
    spent) ends the series: its error propagates, the finished points are cached."""
    for _ in range(calls):
        last = None
        for last in chunk(data):
            yield last
        if last is None or not more(last):
            return
