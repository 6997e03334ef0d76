"""Batched decoding: many runs share each forward, every run's trace exactly as if it ran alone.

`BatchDecoder` (in `llada.decode`, beside the loop it drives) runs the decode loop (`loop`: one
generator per run that asks for a `Forward` and yields `StepRecord`s) for several runs (rows) at once. A round advances every active
row to its next forward request, runs all of them in one row-batched model call
(`LLaDA2MoE.forward_rows`, row-exact), then hands each row its logits, and the row applies the
public rule (`llada.rule.step`) on its own. Each row keeps its prompt length, settings (mode,
thresholds, MBE, block length, budget), EOS stop, sampling generator and KV cache. A row that finishes
leaves the batch and a waiting one joins at the next round (continuous batching); `add` may be called
between rounds and `drop` stops a row.

    batch = BatchDecoder(model, mask_id, eos_id, max_batch=8)
    rows = [batch.add(ids, cfg) for ids, cfg in jobs]
    for row, record in batch:        # records in round order, each row's in its own order
        ...

`decode()` is a batch of one. Timing: a record's `seconds` is the engine time of its round up to the
record (the shared forward, then the rule of the rows before it), the consumer's time excluded.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Iterator

from .config import DecodeConfig
from .decode import BatchDecoder
from .model import LLaDA2MoE
from .trace import StepRecord, Trace

__all__ = ["BatchDecoder", "RowStream", "RowStreams", "check_configs", "decode_batch", "generate_batch"]


def decode_batch(model: LLaDA2MoE, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                 mask_id: int, eos_id: int, max_batch: int | None = None) -> Iterator[tuple[int, StepRecord]]:
    """Check every row now, then return the generator of (row, record) of the whole batch."""
    configs = check_configs(prompts, configs)
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=max_batch)
    for i, (ids, cfg) in enumerate(zip(prompts, configs)):
        try:
            batch.add(ids, cfg)
        except ValueError as err:
            raise ValueError(f"prompt {i}: {err}") from None
    return iter(batch)


def generate_batch(model: LLaDA2MoE, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                   mask_id: int, eos_id: int, traces: list[Trace] | None = None,
                   max_batch: int | None = None) -> list[Trace]:
    """Decode every prompt to the end; the finished Traces in prompt order (`traces`: empty ones to fill)."""
    configs = check_configs(prompts, configs)
    stream = decode_batch(model, prompts, configs, mask_id, eos_id, max_batch)
    traces = traces or [Trace(prompt_ids=list(ids), settings=cfg, mask_id=mask_id, eos_id=eos_id)
                        for ids, cfg in zip(prompts, configs)]
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


class RowStreams:
    """One BatchDecoder read as one record stream per row: pulling a row with nothing queued runs a step.

    A row's stream can be bounded (`llada.budget`) or closed on its own: closing it drops the row and the
    other rows go on. Rows not being pulled queue their records meanwhile. Rows may be added at any time
    and pulled from several threads (one lock around each step): a row added now joins the next step.
    `feed(batch)`, when given, is called under the lock before each step (and by `top_up`) and may add
    rows with `batch.add`: a source of rows that keeps the batch full however the rows are read.
    Each record also carries its row's share of its step's time (the step's seconds over the rows it
    served): `RowStream.seconds` adds up the shares of the records read, what the row cost the batch."""

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

    def add(self, prompt_ids: list[int], cfg: DecodeConfig, may_continue=None) -> int:
        """A new row (ValueError now when it does not fit); its index for `row` (`may_continue`: see
        `BatchDecoder.add`)."""
        with self.lock:
            index = self.batch.add(prompt_ids, cfg, may_continue)
            self.queues[index] = deque()
            return index

    def row(self, index: int) -> "RowStream":
        """Row `index`'s records; a budget bounds it through `RowStream.limit`."""
        return RowStream(self, index)

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


class RowStream:
    """The records of one row of a `RowStreams`; `limit(may_continue)` lets a budget refuse its next forward."""

    def __init__(self, streams: RowStreams, index: int):
        self.streams, self.batch, self.index = streams, streams.batch, index
        self._records = streams.records(index)
        self.seconds = 0.0  # this row's share of the time of the steps whose records were read so far

    def __iter__(self) -> "RowStream":
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
