"""The drivers of the decode loop: one run, many runs sharing each forward, and the streams people read.

`llada.loop` holds one run's loop, a generator that asks for forwards. `BatchDecoder` drives the loops of
many runs (rows) so that one row-batched model call serves them all, and decides for all of them at once
(`llada.decide`); every row's trace is bit for bit its trace alone. A run alone is a batch of one.

A round advances every active row to its next forward request, runs all of them in one row-batched model call
(`LLaDA2MoE.forward_rows`, row-exact), then hands each row its logits, and the row applies the public rule on
its own (`llada.rule.step`, or LLaDA2.2's `levenshtein_rows` for rows that follow it). Each row keeps its
prompt length, settings (mode, thresholds, MBE, block length, budget), EOS stop, sampling generator and KV
cache. A row that finishes leaves the batch and a waiting one joins at the next round (continuous batching);
`add` may be called between rounds and `drop` stops a row.

    batch = BatchDecoder(model, mask_id, eos_id, max_batch=8)
    rows = [batch.add(ids, cfg) for ids, cfg in jobs]
    for row, record in batch:        # records in round order, each row's in its own order
        ...

A row may carry a budget's question (`may_continue(forwards)`, asked with the forwards the row has had
before each forward it asks for, `llada.budget`): a row refused is stopped before that forward runs, so
no forward past a budget is ever computed; a row that needs no more forwards is never asked about.

`decode()` checks its inputs before it returns the run's `Stream` (one `try` around the call is enough);
`generate()` drains it into a `Trace`; `decode_batch()` / `generate_batch()` do the same for many prompts.
A run may carry pokes (`llada.trace.Poke`: a token written from outside after a given forward, `llada.loop`);
each row's pokes stay in its row. `check_pokes` refuses bad ones before anything is decoded.
`SharedBatch` reads one `BatchDecoder` as one stream per row (`SharedStream`), pulled from any thread.
On a model split across ranks (`llada.dist`) every rank drives the same rows in lock-step and rank 0's answers
are the ones every rank sends to its loops (`Ranks.decided`).
Inference mode is entered per forward, never across a `yield`, so a run can be stepped from any thread
and interleaved with another. Timing: a record's `seconds` is the engine time of its round up to the
record (the shared forward, then the rule of the rows before it), the consumer's time excluded.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from .config import DecodeConfig, padded_length
from .decide import Window, WindowUpdate, decide, levenshtein_of
from .loop import ForwardAsk, Loop, Run, loop, resolve_forward
from .model import LLaDA2MoE
from .records import POKE_KINDS
from .trace import Poke, StepRecord, Trace

if TYPE_CHECKING:
    from .forward_memo import ForwardMemo

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
        """One round: every active row up to its next forward, one shared forward, every row's decision."""
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
            with torch.inference_mode():  # the forward, the decisions and each loop's writes, in one stretch
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


def decode(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int,
           eos_id: int, forward: str = "auto", may_continue: MayContinue | None = None,
           pokes: list[Poke] | tuple[Poke, ...] = ()) -> Stream:
    """Check the inputs now, then return the run's records as a `Stream` (started on the first pull).

    `may_continue(forwards)` is asked before each forward (a budget: False stops the run before it);
    `pokes` are applied between forwards (`llada.loop`)."""
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=1, forward=forward)
    batch.add(prompt_ids, cfg, may_continue, pokes)
    return Stream(batch, 0)


def check_inputs(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int) -> None:
    """ValueError when the settings, the special ids or the prompt do not fit the model."""
    if not isinstance(cfg, DecodeConfig):
        raise ValueError(f"settings must be a DecodeConfig, got {type(cfg).__name__}")
    vocab = model.config.vocab_size
    for name, value in (("mask id", mask_id), ("EOS id", eos_id)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name} {value!r} is outside the vocabulary [0, {vocab})")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [t for t in prompt_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token id {bad[0]!r} is outside the vocabulary [0, {vocab})")
    if mask_id in prompt_ids:
        raise ValueError(f"prompt token {prompt_ids.index(mask_id)} is the mask id {mask_id}: a prompt holds no masks "
                         "(text that spells the mask token is tokenized as plain characters)")
    total = padded_length(len(prompt_ids), cfg.gen_length, cfg.block_length)
    limit = model.config.max_position_embeddings
    if total > limit:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) + gen_length ({cfg.gen_length}), padded to whole "
                         f"blocks of {cfg.block_length}, needs {total} positions; the model allows {limit}")
    levenshtein_of(model.config, cfg, mask_id)  # the rule the run follows can run on this model


def check_pokes(model: LLaDA2MoE, cfg: DecodeConfig, mask_id: int, pokes) -> None:
    """ValueError when a poke does not fit the run: a step below 1, a position outside the generated region,
    a token outside the vocabulary, an unknown kind, a delete or insert on a run of the joint (2.1) rule
    (only LLaDA2.2's rule moves tokens), or a written DELETE or SPLIT id on a LLaDA2.2 run (there it would act
    as the move: poke `delete` or `insert` instead)."""
    vocab = model.config.vocab_size
    lev = levenshtein_of(model.config, cfg, mask_id) if pokes else None
    for p in pokes:
        if not isinstance(p, Poke):
            raise ValueError(f"a poke must be a llada.trace.Poke, got {type(p).__name__}")
        if isinstance(p.step, bool) or not isinstance(p.step, int) or p.step < 1:
            raise ValueError(f"poke step {p.step!r} is below 1: a poke applies after decode forward 1 or later")
        if isinstance(p.pos, bool) or not isinstance(p.pos, int) or not 0 <= p.pos < cfg.gen_length:
            raise ValueError(f"poke position {p.pos!r} is outside the generated region [0, {cfg.gen_length})")
        if isinstance(p.token, bool) or not isinstance(p.token, int) or not 0 <= p.token < vocab:
            raise ValueError(f"poke token id {p.token!r} is outside the vocabulary [0, {vocab})")
        _check_poke_kind(p, lev, mask_id)


def _check_poke_kind(p: Poke, lev, mask_id: int) -> None:
    if p.kind not in POKE_KINDS:
        raise ValueError(f"poke kind {p.kind!r} is not one of {', '.join(POKE_KINDS)}")
    if p.kind != "write" and lev is None:
        raise ValueError(f"a poke may {p.kind} only on a run of LLaDA2.2's rule (Levenshtein); this run follows "
                         f"the joint (2.1) rule, which never moves tokens: write a token or mask instead")
    if p.kind != "write" and p.token != mask_id:
        raise ValueError(f"a {p.kind} poke opens a mask: its token must be the mask id {mask_id}, got {p.token}")
    if p.kind == "write" and lev is not None and p.token in (lev.delete_id, lev.split_id):
        move = "delete" if p.token == lev.delete_id else "insert"
        raise ValueError(f"poke token id {p.token} is {move.upper() if move == 'delete' else 'SPLIT'}, which this "
                         f"LLaDA2.2 run would act on as a move: poke {move!r} instead")


def generate(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int,
             trace: Trace | None = None, forward: str = "auto", pokes: list[Poke] | tuple[Poke, ...] = ()) -> Trace:
    """Decode to the end; returns the finished Trace (`trace`: an empty one to fill, e.g. with a name)."""
    stream = decode(model, prompt_ids, cfg, mask_id, eos_id, forward, pokes=pokes)
    trace = trace or Trace(prompt_ids=list(prompt_ids), settings=cfg, mask_id=mask_id, eos_id=eos_id,
                           stop_ids=model.config.stop_token_ids)
    for _ in trace.follow(stream):
        pass
    return trace.finish()


def decode_batch(model: LLaDA2MoE, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                 mask_id: int, eos_id: int, max_batch: int | None = None,
                 pokes: list[list[Poke]] | None = None) -> Iterator[tuple[int, StepRecord]]:
    """Check every row now, then return the generator of (row, record) of the whole batch (`pokes`: each
    row's own, one list per prompt)."""
    configs = check_configs(prompts, configs)
    pokes = [()] * len(prompts) if pokes is None else list(pokes)
    if len(pokes) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(pokes)} lists of pokes: give one per prompt")
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=max_batch)
    for i, (ids, cfg, row_pokes) in enumerate(zip(prompts, configs, pokes)):
        try:
            batch.add(ids, cfg, pokes=row_pokes)
        except ValueError as err:
            raise ValueError(f"prompt {i}: {err}") from None
    return iter(batch)


def generate_batch(model: LLaDA2MoE, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                   mask_id: int, eos_id: int, traces: list[Trace] | None = None,
                   max_batch: int | None = None, pokes: list[list[Poke]] | None = None) -> list[Trace]:
    """Decode every prompt to the end; the finished Traces in prompt order (`traces`: empty ones to fill;
    `pokes`: each row's own, see `decode_batch`)."""
    configs = check_configs(prompts, configs)
    stream = decode_batch(model, prompts, configs, mask_id, eos_id, max_batch, pokes)
    traces = traces or [Trace(prompt_ids=list(ids), settings=cfg, mask_id=mask_id, eos_id=eos_id,
                              stop_ids=model.config.stop_token_ids) for ids, cfg in zip(prompts, configs)]
    for row, record in stream:
        traces[row].add(record)
    return [trace.finish() for trace in traces]


def check_configs(prompts, configs) -> list[DecodeConfig]:
    """One DecodeConfig per prompt (one given for all is repeated); ValueError when the counts differ."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    if isinstance(configs, DecodeConfig):
        return [configs] * len(prompts)
    configs = list(configs)
    if len(configs) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(configs)} settings: give one DecodeConfig or one per prompt")
    return configs


class SharedBatch:
    """One BatchDecoder read as one record stream per row: pulling a row with nothing queued runs a step.

    A row's stream can be bounded (`llada.budget`) or closed on its own: closing it drops the row and the
    other rows go on. Rows not being pulled queue their records meanwhile. Rows may be added at any time
    and pulled from several threads (one lock around each step): a row added now joins the next step.
    `feed(batch)`, when given, is called under the lock before each step (and by `top_up`) and may add
    rows with `batch.add`: a source of rows that keeps the batch full however the rows are read.
    Each record also carries its row's share of its step's time (the step's seconds over the rows it
    served): `SharedStream.seconds` adds up the shares of the records read, what the row cost the batch."""

    def __init__(self, batch: BatchDecoder, feed=None):
        self.batch, self.feed = batch, feed
        self.queues: dict[int, deque] = {}
        self.closed: set[int] = set()  # rows whose stream was closed: their records are not kept
        self.charged: dict[int, float] = {}  # row -> its share of the steps whose records were read
        self.lock = threading.Lock()

    def top_up(self) -> None:
        """Let `feed` add rows now."""
        if self.feed is not None:
            with self.lock:
                self.feed(self.batch)

    def add(self, prompt_ids: list[int], cfg: DecodeConfig, may_continue=None,
            pokes: list[Poke] | tuple[Poke, ...] = ()) -> int:
        """A new row (ValueError now when it or its pokes do not fit); its index for `row` (`may_continue`,
        `pokes`: see `BatchDecoder.add`)."""
        with self.lock:
            index = self.batch.add(prompt_ids, cfg, may_continue, pokes)
            self.queues[index] = deque()
            return index

    def row(self, index: int) -> "SharedStream":
        """Row `index`'s records; a budget bounds it through `SharedStream.limit`."""
        return SharedStream(self, index)

    def records(self, index: int) -> Iterator[StepRecord]:
        try:
            while True:
                record = self._next(index)
                if record is None:
                    return
                yield record
        finally:
            with self.lock:
                self.closed.add(index)
                self.queues.pop(index, None)
                self.charged.pop(index, None)
                if index not in self.batch.done:
                    self.batch.drop(index)  # stopped early: the other rows go on

    def _next(self, index: int) -> StepRecord | None:
        with self.lock:
            queue = self.queues.setdefault(index, deque())
            while not queue and index not in self.batch.done:
                if self.feed is not None:
                    self.feed(self.batch)
                start = time.perf_counter()
                out = self.batch.step()
                share = (time.perf_counter() - start) / max(len(out), 1)  # one record per row served
                for row, record in out:
                    if row not in self.closed:
                        self.queues.setdefault(row, deque()).append((record, share))
            if not queue:
                return None
            record, share = queue.popleft()
            self.charged[index] = self.charged.get(index, 0.0) + share
            return record


class SharedStream:
    """The records of one row of a `SharedBatch`; `limit(may_continue)` lets a budget refuse its next forward."""

    def __init__(self, streams: SharedBatch, index: int):
        self.streams, self.batch, self.index = streams, streams.batch, index
        self._records = streams.records(index)
        self.seconds = 0.0  # this row's share of the time of the steps whose records were read so far

    def __iter__(self) -> "SharedStream":
        return self

    def __next__(self) -> StepRecord:
        record = next(self._records)
        self.seconds = self.streams.charged.get(self.index, 0.0)
        return record

    def close(self) -> None:
        self._records.close()

    def limit(self, may_continue) -> None:
        with self.streams.lock:
            self.batch.limit(self.index, may_continue)

    @property
    def refused(self) -> bool:
        """The row was stopped because its budget refused it a forward."""
        return self.index in self.batch.refused
