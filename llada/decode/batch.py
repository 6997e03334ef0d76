"""Rows decoded together: `BatchDecoder` drives the loops of many runs so that one model call serves them all.

A round advances every active row to its next forward request, runs all of them in one row-batched model call
(`LLaDA2MoE.forward_rows`, row-exact), then hands each row its logits, and the row applies the public rule on
its own (`llada.rule.step`, or LLaDA2.2's `levenshtein_rows` for rows that follow it). Each row keeps its
prompt length, settings (mode, thresholds, MBE, block length, budget), EOS stop, sampling generator and KV
cache. A row that finishes leaves the batch and a waiting one joins at the next round (continuous batching);
`add` may be called between rounds and `drop` stops a row. `Stream` reads one run, a batch of one.

A row may carry a budget's question (`may_continue(forwards)`, asked with the forwards the row has had
before each forward it asks for, `llada.budget`): a row refused is stopped before that forward runs, so
no forward past a budget is ever computed; a row that needs no more forwards is never asked about.
On a model split across ranks (`llada.dist`) every rank drives the same rows in lock-step and rank 0's answers
are the ones every rank sends to its loops (`Ranks.decided`).

Inference mode is a flag of the thread that sets it, and a generator's code runs on whichever thread resumes
it (Gradio steps its generators from a pool of threads). So the mode is entered inside each round
(`BatchDecoder.step`), around all of the loops' work in that round (their code up to the next ask, the
forward, the decisions, their writes), and never held across a `yield`: a run can be stepped from any thread,
and every step of it runs in inference mode. Timing: a record's `seconds` is the engine time of its round up
to the record (the shared forward, then the rule of the rows before it), the consumer's time excluded.

On the CPU a round whose forward is small (`llada.fast.team.alone_for`: the model's size times the round's
tokens) runs its forward and decisions on the calling thread alone, whatever the process's thread count.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from ..config import DecodeConfig
from ..decide import Window, WindowUpdate, decide
from ..fast.team import alone, alone_for
from ..loop import ForwardAsk, Loop, Run, loop, resolve_forward
from ..model import LLaDA2MoE
from ..trace import Poke, StepRecord
from .checks import check_inputs, check_pokes

if TYPE_CHECKING:
    from ..forward_memo import ForwardMemo

MayContinue = Callable[[int], bool]  # forwards the row has had -> may it have one more?


def run_forwards(runs: list[Run], asks: list[ForwardAsk], memo: ForwardMemo | None = None) -> list[torch.Tensor | None]:
    """One model call for every row's forward -> per row logits (hi-lo, V) (None for a cache forward).

    `memo` (`llada.forward_memo.ForwardMemo`): rows already computed are answered by it, not the model.
    Called inside inference mode (`BatchDecoder.step`)."""
    if len(runs) == 1 and runs[0].static is not None:
        run, f = runs[0], asks[0]
        return [run.static(run.x[:, f.lo:f.hi], f.lo, f.hi, f.groups_hi)]
    rows, model = [run.model_input(f) for run, f in zip(runs, asks)], runs[0].model
    logits = model.forward_rows(rows) if memo is None else memo.forward_rows(model, rows)
    return [out if out is None or out.shape[0] == f.hi - f.lo else out[-(f.hi - f.lo):] for out, f in zip(logits, asks)]


def answer_forwards(runs: list[Run], asks: list[ForwardAsk],
                    logits: list[torch.Tensor | None]) -> list[WindowUpdate | None]:
    """Each row's answer to its forward: the rule's `WindowUpdate` for a decode forward, all rows decided at once
    (`llada.decide`), None for a cache forward. Called inside inference mode (`BatchDecoder.step`)."""
    if len(runs) == 1:  # a lone row
        return decide(runs, [Window(asks[0].lo, asks[0].hi)], logits) if asks[0].logits else [None]
    deciding = [i for i, ask in enumerate(asks) if ask.logits]
    answers: list[WindowUpdate | None] = [None] * len(asks)
    if deciding:
        decided = decide([runs[i] for i in deciding], [Window(asks[i].lo, asks[i].hi) for i in deciding],
                         [logits[i] for i in deciding])
        for i, decision in zip(deciding, decided):
            answers[i] = decision
    return answers


@dataclass
class _Slot:
    index: int
    run: Run
    loop: Loop
    ask: ForwardAsk | None = None  # the forward this row waits for
    started: bool = False
    forwards: int = 0  # forwards run for this row (decode and cache)
    may_continue: MayContinue | None = None  # a budget's question before each forward (None: no bound)


@dataclass
class BatchDecoder:
    """Rows decoded together; `step()` runs one round, iterating runs rounds until every row is done."""

    model: LLaDA2MoE
    mask_id: int
    eos_id: int
    max_batch: int | None = None  # rows decoded at once (None: all); more rows wait for a free slot
    forward: str = "auto"  # the forward path (see `llada.decode`); static and graph need max_batch=1
    memo: ForwardMemo | None = None  # rows already computed are answered by it, not computed again
    waiting: deque = field(default_factory=deque)
    active: list[_Slot] = field(default_factory=list)
    done: list[int] = field(default_factory=list)  # rows finished so far, in order
    refused: set[int] = field(default_factory=set)  # rows stopped because their budget refused a forward
    rows: int = 0  # rows added so far (the next row's index)

    def __post_init__(self) -> None:
        if self.max_batch is not None and (isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int)
                                           or self.max_batch < 1):
            raise ValueError(f"max_batch must be a positive integer or None, got {self.max_batch!r}")
        if self.forward in ("static", "graph") and self.max_batch != 1:
            raise ValueError(f"forward={self.forward!r} decodes one run at a time: use max_batch=1 or 'dynamic'")

    def add(self, prompt_ids: list[int], cfg: DecodeConfig, may_continue: MayContinue | None = None,
            pokes: list[Poke] | tuple[Poke, ...] = ()) -> int:
        """Queue a run; returns its row index. ValueError now when the prompt, settings or pokes do not fit.

        `may_continue(forwards)` is asked before each forward of the row (see `limit`)."""
        check_inputs(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)
        check_pokes(self.model, cfg, self.mask_id, pokes)
        forward = self.forward if self.max_batch == 1 or self.forward != "auto" else "dynamic"
        resolve_forward(forward, self.model, cfg)
        run = Run(self.model, [int(t) for t in prompt_ids], cfg, self.mask_id, self.eos_id, forward, tuple(pokes))
        index, self.rows = self.rows, self.rows + 1
        self.waiting.append(_Slot(index, run, loop(run), may_continue=may_continue))
        return index

    def limit(self, index: int, may_continue: MayContinue | None) -> None:
        """Ask `may_continue(forwards)` before each further forward of row `index`; False stops the row there."""
        for row in (*self.active, *self.waiting):
            if row.index == index:
                row.may_continue = may_continue

    def drop(self, index: int) -> None:
        """Stop a row now (a waiting one never starts); its records so far stay valid."""
        for row in list(self.active):
            if row.index == index:
                row.loop.close()
                self.active.remove(row)
                self.done.append(index)
        for row in list(self.waiting):
            if row.index == index:
                self.waiting.remove(row)
                self.done.append(index)

    @property
    def finished(self) -> bool:
        return not self.active and not self.waiting

    def step(self) -> list[tuple[int, StepRecord]]:
        """One round: every active row up to its next forward, one shared forward, every row's decision.

        All of it runs in inference mode on the calling thread (entered here, left before returning), whatever
        thread ran the round before."""
        with torch.inference_mode():
            return self._round()

    def _round(self) -> list[tuple[int, StepRecord]]:
        now = time.perf_counter()
        out: list[tuple[int, StepRecord]] = []
        for row in self.active:
            row.run.resumed = now
        self._advance(list(self.active), out)
        while self.waiting and (self.max_batch is None or len(self.active) < self.max_batch):
            row = self.waiting.popleft()
            row.run.resumed = now
            self.active.append(row)
            self._advance([row], out)
        for row in [r for r in self.active if r.may_continue is not None and not r.may_continue(r.forwards)]:
            self.refused.add(row.index)
            self.drop(row.index)  # its budget allows no other forward: stopped before computing one
        if self.active:
            runs, asks = [row.run for row in self.active], [row.ask for row in self.active]
            # a small forward runs on this thread alone: a second one costs more wake-ups than it saves
            with alone() if alone_for(self.model, sum(ask.hi - ask.lo for ask in asks)) else nullcontext():
                logits = run_forwards(runs, asks, self.memo)
                ranks = getattr(self.model, "ranks", None)  # experts split across ranks: rank 0 decides for all
                answers = answer_forwards(runs, asks, logits) if ranks is None else \
                    ranks.decided(lambda: answer_forwards(runs, asks, logits))
            for row, answer in zip(list(self.active), answers):
                row.ask = None
                row.forwards += 1
                out.append((row.index, row.loop.send(answer)))  # the record of that forward
        return out

    def _advance(self, rows: list[_Slot], out: list[tuple[int, StepRecord]]) -> None:
        """Run each row's loop until it asks for a forward (records on the way go to `out`) or ends."""
        for row in rows:
            while row.ask is None:
                try:
                    item = row.loop.send(None) if row.started else next(row.loop)
                except StopIteration:
                    self.active.remove(row)
                    self.done.append(row.index)
                    break
                row.started = True
                if isinstance(item, ForwardAsk):
                    row.ask = item
                else:
                    out.append((row.index, item))

    def __iter__(self) -> Iterator[tuple[int, StepRecord]]:
        while not self.finished:
            yield from self.step()


class Stream:
    """The records of one run (decode and cache forwards), a batch of one (`BatchDecoder`).

    `limit(may_continue)` bounds it (a budget's question before each forward); `close()` stops the run."""

    def __init__(self, batch: BatchDecoder, index: int):
        self.batch, self.index = batch, index
        self.pending: deque[StepRecord] = deque()

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> StepRecord:
        while not self.pending:
            if self.batch.finished:
                raise StopIteration
            self.pending.extend(record for _, record in self.batch.step())
        return self.pending.popleft()

    def limit(self, may_continue: MayContinue | None) -> None:
        self.batch.limit(self.index, may_continue)

    def close(self) -> None:
        self.batch.drop(self.index)
        self.pending.clear()

    @property
    def refused(self) -> bool:
        """The run was stopped because its budget refused it a forward."""
        return self.index in self.batch.refused

    @property
    def closed(self) -> bool:
        """The run is over (ended, stopped or refused a forward) and every record was taken."""
        return self.batch.finished and not self.pending
