"""The drivers of the decode loop: one run, many runs sharing each forward, and the streams people read.

`llada.loop` holds one run's loop, a generator that asks for forwards. This package drives it, in three rooms:

* `batch`: `BatchDecoder` drives the loops of many runs (rows) so that one row-batched model call serves
  them all, and decides for all of them at once (`llada.decide`); every row's trace is bit for bit its trace
  alone. A run alone is a batch of one, read as a `Stream`.
* `checks`: what a run's inputs must be (prompt, special ids, settings, pokes), refused with a ValueError
  before anything is decoded.
* `shared`: `SharedBatch` reads one `BatchDecoder` as one stream per row (`SharedStream`), pulled from any
  thread.

Here, the entry points: `decode()` checks its inputs before it returns the run's `Stream` (one `try` around the
call is enough); `generate()` drains it into a `Trace`; `decode_batch()` / `generate_batch()` do the same for
many prompts. A run may carry pokes (`llada.trace.Poke`: a token written from outside after a given forward,
`llada.loop`); each row's pokes stay in its row.

    batch = BatchDecoder(model, mask_id, eos_id, max_batch=8)
    rows = [batch.add(ids, cfg) for ids, cfg in jobs]
    for row, record in batch:        # records in round order, each row's in its own order
        ...
"""

from __future__ import annotations

from typing import Iterator

from ..config import DecodeConfig
from ..model import LLaDA2MoE
from ..trace import Poke, StepRecord, Trace
from .batch import BatchDecoder, MayContinue, Stream
from .checks import check_configs, check_inputs, check_pokes
from .shared import SharedBatch, SharedStream

__all__ = ["BatchDecoder", "MayContinue", "SharedBatch", "SharedStream", "Stream", "check_configs",
           "check_inputs", "check_pokes", "decode", "decode_batch", "generate", "generate_batch"]


def decode(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int,
           eos_id: int, forward: str = "auto", may_continue: MayContinue | None = None,
           pokes: list[Poke] | tuple[Poke, ...] = ()) -> Stream:
    """Check the inputs now, then return the run's records as a `Stream` (started on the first pull).

    `may_continue(forwards)` is asked before each forward (a budget: False stops the run before it);
    `pokes` are applied between forwards (`llada.loop`)."""
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=1, forward=forward)
    batch.add(prompt_ids, cfg, may_continue, pokes)
    return Stream(batch, 0)


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
