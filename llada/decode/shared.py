"""One `BatchDecoder` read as one record stream per row, pulled from any thread (the playground's runs and the
evaluation sweeps share one batch this way)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Iterator

from ..config import DecodeConfig
from ..trace import Poke, StepRecord
from .batch import BatchDecoder


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
