"""Decoding an evaluation's items in batches: the same traces as one by one, in less wall time.

All the items of an evaluation (every mode, every task) go through one `BatchDecoder`: `batch` rows
share each forward, and a finished row's slot goes to the next item at the next step, so batches stay
full until the last items (rows of different modes share forwards: each row keeps its own settings).
A forward memo (`llada.forward_memo`, at most `MEMO_BYTES`) answers a row whose inputs an earlier row
already had: the modes of one item ask mostly for the same forwards (every mode's first forward of the
item is the prompt and a block of masks; modes that draft alike share the next ones), so the callers
queue an item's modes side by side and a small memo catches the repeats.
Each item's output, forwards and edits are exactly those of a run alone (`llada.decode`). Only time is
shared: an item's `seconds` is its share of the batch's wall time (in proportion to the engine time of
the rounds it took part in: a forward computed once and used by several rows, in one round or through
the memo, is paid by those rows together), so that a tally's TPS is output tokens per wall-clock second
of the whole evaluation, not the speed of one mode decoding alone.
"""

from __future__ import annotations

import time
from typing import Callable

from ..decode import check_configs
from ..decode import BatchDecoder
from ..forward_memo import ForwardMemo
from ..trace import Trace

BATCH = 32  # rows decoded at once by default
MEMO_BYTES = 32 << 20  # ~170 rows of 32 tokens of the embedded model: an item's modes run within ~40 rounds


def decode_texts(pipe, prompts: list[str], cfgs, batch: int = BATCH,
                 progress: Callable[[int], None] | None = None,
                 memo_bytes: int = MEMO_BYTES) -> list[tuple[str, Trace, float]]:
    """(completion text without EOS, finished Trace, its share of the wall seconds) of every prompt, in order.

    `cfgs`: one DecodeConfig for all prompts or one per prompt; `progress(k)` is called as k more finish;
    `memo_bytes`: the bound of the forward memo (0: none)."""
    ids = [pipe.encode(p) for p in prompts]
    cfgs = check_configs(ids, cfgs)
    start = time.perf_counter()
    memo = ForwardMemo(memo_bytes) if memo_bytes > 0 else None
    traces = decode_traces(pipe, ids, cfgs, batch, progress, memo)
    wall = time.perf_counter() - start
    engine = sum(t.seconds for t in traces)
    out = []
    for trace in traces:
        share = wall * trace.seconds / engine if engine > 0 else wall / len(traces)
        out.append((pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id]), trace, share))
    return out


def decode_traces(pipe, ids: list[list[int]], cfgs: list, batch: int,
                  progress: Callable[[int], None] | None = None, memo: ForwardMemo | None = None) -> list[Trace]:
    """Every prompt decoded to the end, `batch` rows at a time, in list order; a row is added (its cache
    allocated) only when a slot is about to free up, so a long list holds at most about 2 x `batch` rows'
    state at once. `memo` answers the rows it already holds."""
    traces = [pipe.new_trace(row_ids, cfg) for row_ids, cfg in zip(ids, cfgs)]
    decoder = BatchDecoder(pipe.model, pipe.mask_id, pipe.eos_id, max_batch=batch, memo=memo)
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
