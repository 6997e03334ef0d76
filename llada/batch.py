"""Batched decoding: many runs share each forward, every run's trace exactly as if it ran alone.

`BatchDecoder` drives the decode loop of `llada.decode` (`loop`: one generator per run that asks for
a `Forward` and yields `StepRecord`s) for several runs (rows) at once. A round advances every active
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

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .config import DecodeConfig
from .decode import Forward, Loop, _Run, check_prompt, loop, resolve_forward, run_forwards
from .model import LLaDA2MoE
from .trace import StepRecord, Trace


@dataclass
class _Row:
    index: int
    run: _Run
    loop: Loop
    ask: Forward | None = None  # the forward this row waits for
    started: bool = False


@dataclass
class BatchDecoder:
    """Rows decoded together; `step()` runs one round, iterating runs rounds until every row is done."""

    model: LLaDA2MoE
    mask_id: int
    eos_id: int
    max_batch: int | None = None  # rows decoded at once (None: all); more rows wait for a free slot
    forward: str = "auto"  # the forward path (see `llada.decode`); static and graph need max_batch=1
    waiting: deque = field(default_factory=deque)
    active: list[_Row] = field(default_factory=list)
    done: list[int] = field(default_factory=list)  # rows finished so far, in order
    rows: int = 0  # rows added so far (the next row's index)

    def __post_init__(self) -> None:
        if self.max_batch is not None and (isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int)
                                           or self.max_batch < 1):
            raise ValueError(f"max_batch must be a positive integer or None, got {self.max_batch!r}")
        if self.forward in ("static", "graph") and self.max_batch != 1:
            raise ValueError(f"forward={self.forward!r} decodes one run at a time: use max_batch=1 or 'dynamic'")

    def add(self, prompt_ids: list[int], cfg: DecodeConfig) -> int:
        """Queue a run; returns its row index. ValueError now when the prompt or settings do not fit."""
        check_prompt(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)
        forward = self.forward if self.max_batch == 1 or self.forward != "auto" else "dynamic"
        resolve_forward(forward, self.model, cfg)
        run = _Run(self.model, [int(t) for t in prompt_ids], cfg, self.mask_id, self.eos_id, forward)
        index, self.rows = self.rows, self.rows + 1
        self.waiting.append(_Row(index, run, loop(run)))
        return index

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
        if self.active:
            logits = run_forwards([row.run for row in self.active], [row.ask for row in self.active])
            for row, rows_logits in zip(self.active, logits):
                row.ask = None
                out.append((row.index, row.loop.send(rows_logits)))  # the record of that forward
        return out

    def _advance(self, rows: list[_Row], out: list[tuple[int, StepRecord]]) -> None:
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
                if isinstance(item, Forward):
                    row.ask = item
                else:
                    out.append((row.index, item))

    def __iter__(self) -> Iterator[tuple[int, StepRecord]]:
        while not self.finished:
            yield from self.step()


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
