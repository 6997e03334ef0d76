"""Live runs of the engine: a checked request (ui/settings.py) decoding within its budget.

`start` turns a request into a `LiveRun`: the engine's Trace and the iterator of its records (the
engine runs as the iterator is pulled), bounded by a `Budget` of forwards and wall time (`llada.budget`:
a run that ends on its last allowed forward is done; one that needs more stops there, its partial trace
kept and its note saying why). On the CPU, `start` adds the run to its model's step scheduler: the runs
of all sessions on one model share every forward (one row-batched model call per step; each trace is
the one its run gets alone; each run keeps its own budget and Stop). `start_batch` does the same for
the runs of one request (Compare). `interleave` steps several runs forward by forward, so S and Q share one timeline.
`active_runs()` counts the runs whose engine is still open.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Iterator

from llada.budget import Budget
from llada.decode import SharedBatch
from llada.decode import BatchDecoder
from llada.trace import StepRecord, Trace

from .pace import Ahead, Pace, pace_of, slow_budget
from .settings import InputError, Request

BUDGET = Budget()  # what one request may cost (tests and deployments replace it; read at each request)
_LIVE: "weakref.WeakSet[LiveRun]" = weakref.WeakSet()  # runs whose engine is still open
_LIVE_LOCK = threading.Lock()
_SCHEDULERS: dict[int, tuple] = {}  # id(pipe) -> (pipe, its SharedBatch): one step scheduler per loaded model


def active_runs() -> int:
    """How many runs still hold an open engine (all sessions)."""
    with _LIVE_LOCK:
        return sum(1 for run in _LIVE if run.open)


@dataclass(eq=False)
class LiveRun:
    """A run in progress: its Trace (growing) and the iterator that drives the engine."""

    pipe: object
    trace: Trace
    records: Iterator[StepRecord]
    open: bool = True
    ahead: Ahead | None = None  # the engine's stream, its forwards on a worker thread (ui.pace)

    def close(self, status: str = "stopped", note: str = "") -> Trace:
        """Stop the engine (if still running) and finish the trace with its text and token names."""
        self.records.close()
        self.open = False
        if self.trace.status == "running":
            self.trace.finish(status, note)
        if self.trace.text is None:
            self.trace.text = self.pipe.decode_text(self.trace.output_ids)
        self.trace.name_tokens(self.pipe.token_texts, self.pipe.token_bytes)
        return self.trace


def _budgeted(stream: Iterator[StepRecord], trace: Trace, budget: Budget,
              pace: Pace | None = None) -> Iterator[StepRecord]:
    """The run's records into `trace` until the run ends (done) or its budget cuts it (the trace says why).

    With `pace`: each forward teaches the model's pace, and the budget follows it (`ui.pace.slow_budget`:
    a slow model's first run gets its budget in forwards once its first forward is measured)."""
    bounded = (slow_budget(budget, pace.per_forward) if pace is not None else budget).bound(stream)
    for record in trace.follow(bounded):  # closing this closes the engine's generator
        if pace is not None:
            pace.observe(record)
            bounded.revise(slow_budget(budget, pace.per_forward))
        yield record
    if bounded.cut:
        trace.finish("stopped", bounded.cut)


def start(pipe, req: Request, budget: Budget | None = None) -> LiveRun:
    """A new run of `req` (InputError when the prompt and lengths do not fit the model); starts on first pull.

    On the CPU the runs of one model share forwards through its step scheduler (`scheduler`): a run joins
    the next step of the runs in flight, its trace the one it gets alone. `budget` defaults to the
    module's `BUDGET`, read at each call, sized for a slow model (`ui.pace.slow_budget`). The engine's
    forwards run on a worker thread (`ui.pace.Ahead`), so a handler can show progress while one runs
    (not once the model is measured fast: `Pace.threaded`)."""
    budget = budget or BUDGET
    pace = pace_of(pipe)
    cfg = req.settings.config
    ids = pipe.encode(req.prompt)
    try:
        if pipe.model.device.type == "cpu":
            streams = scheduler(pipe)
            stream = streams.row(streams.add(ids, cfg, budget.allows, req.pokes))  # checks inputs and pokes now
        else:  # a lone run keeps the GPU's own forward path (CUDA graphs)
            stream = pipe.stream(ids, cfg, req.pokes)
    except ValueError as err:
        raise InputError(str(err)) from None
    trace = pipe.new_trace(ids, cfg, prompt=req.prompt, mode=req.settings.mode)
    ahead = Ahead(stream) if pace.threaded() else None
    run = LiveRun(pipe, trace, _budgeted(ahead or stream, trace, budget, pace), ahead=ahead)
    with _LIVE_LOCK:
        _LIVE.add(run)
    return run


def scheduler(pipe) -> SharedBatch:
    """The step scheduler of a loaded model: one BatchDecoder whose rows are the runs of every session."""
    with _LIVE_LOCK:
        kept = _SCHEDULERS.get(id(pipe))
        if kept is None or kept[0] is not pipe:
            kept = _SCHEDULERS[id(pipe)] = (pipe, SharedBatch(BatchDecoder(pipe.model, pipe.mask_id, pipe.eos_id)))
        return kept[1]


def start_batch(pipe, reqs: dict[str, Request], budget: Budget | None = None) -> dict[str, LiveRun]:
    """Runs of `reqs` on one model sharing every forward (InputError when one does not fit); start on first pull.

    Each run's records come from one `BatchDecoder`; each keeps its own budget (sized for a slow model as
    `start` sizes it; no worker thread: a Compare's frames come per forward), and closing one (Stop, its
    budget) drops its row while the others go on. On a GPU the runs stay apart (`start`)."""
    budget = budget or BUDGET
    if pipe.model.device.type != "cpu":  # lone runs keep the GPU's own forward path (CUDA graphs)
        return {label: start(pipe, req, budget) for label, req in reqs.items()}
    shared = SharedBatch(BatchDecoder(pipe.model, pipe.mask_id, pipe.eos_id))
    runs = {}
    for label, req in reqs.items():
        ids = pipe.encode(req.prompt)
        try:
            row = shared.add(ids, req.settings.config, budget.allows)  # checks the settings and the prompt now
        except ValueError as err:
            raise InputError(str(err)) from None
        trace = pipe.new_trace(ids, req.settings.config, prompt=req.prompt, mode=req.settings.mode)
        runs[label] = LiveRun(pipe, trace, _budgeted(shared.row(row), trace, budget, pace_of(pipe)))
    with _LIVE_LOCK:
        _LIVE.update(runs.values())
    return runs


def drain(run: LiveRun) -> Trace:
    """Run to the end (or the budget); the finished Trace."""
    for _ in run.records:
        pass
    return run.close("done")


def interleave(runs: dict[str, LiveRun]) -> Iterator[tuple[str, StepRecord]]:
    """Step every run in turn, one forward each, until all are done; yields (label, record)."""
    live = dict(runs)
    try:
        while live:
            for label in list(live):
                record = next(live[label].records, None)
                if record is None:
                    live.pop(label).close("done")
                else:
                    yield label, record
    finally:
        for run in runs.values():
            run.close()
