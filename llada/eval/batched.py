"""Decoding an evaluation's items in batches: the same traces as one by one, in less wall time.

All the items of an evaluation (every mode, every task) go through one `BatchDecoder`: `batch` rows
share each forward, and a finished row's slot goes to the next item at the next step, so batches stay
full until the last items (rows of different modes share forwards: each row keeps its own settings).
Each item's output, forwards and edits are exactly those of a run alone (`llada.batch`). Only time is
shared: an item's `seconds` is its share of the batch's wall time (in proportion to the engine time of
its rounds), so that a tally's TPS is output tokens per wall-clock second of the whole evaluation, as
when the items ran one after another.
"""

from __future__ import annotations

import time
from typing import Callable

from ..batch import check_configs
from ..decode import BatchDecoder
from ..trace import Trace

BATCH = 32  # rows decoded at once by default


def decode_texts(pipe, prompts: list[str], cfgs, batch: int = BATCH,
                 progress: Callable[[int], None] | None = None) -> list[tuple[str, Trace, float]]:
    """(completion text without EOS, finished Trace, its share of the wall seconds) of every prompt, in order.

    `cfgs`: one DecodeConfig for all prompts or one per prompt; `progress(k)` is called as k more finish."""
    ids = [pipe.encode(p) for p in prompts]
    cfgs = check_configs(ids, cfgs)
    start = time.perf_counter()
    traces = decode_traces(pipe, ids, cfgs, batch, progress)
    wall = time.perf_counter() - start
    engine = sum(t.seconds for t in traces)
    out = []
    for trace in traces:
        share = wall * trace.seconds / engine if engine > 0 else wall / len(traces)
        out.append((pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id]), trace, share))
    return out


def decode_traces(pipe, ids: list[list[int]], cfgs: list, batch: int,
                  progress: Callable[[int], None] | None = None) -> list[Trace]:
    """Every prompt decoded to the end, `batch` rows at a time; a row is added (its cache allocated) only
    when a slot is about to free up, so a long list holds at most about 2 x `batch` rows' state at once."""
    traces = [pipe.new_trace(row_ids, cfg) for row_ids, cfg in zip(ids, cfgs)]
    decoder = BatchDecoder(pipe.model, pipe.mask_id, pipe.eos_id, max_batch=batch)
    queued, finished = 0, 0
    while queued < len(ids) or not decoder.finished:
        while queued < len(ids) and len(decoder.waiting) < batch:
            decoder.add(ids[queued], cfgs[queued])
            queued += 1
        for row, record in decoder.step():
            traces[row].add(record)
        if progress is not None and len(decoder.done) > finished:
            progress(len(decoder.done) - finished)
            finished = len(decoder.done)
    return [trace.finish() for trace in traces]
