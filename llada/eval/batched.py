"""Decoding an evaluation's items in batches: the same traces as one by one, in less wall time.

Every item of a mode runs through `Pipeline.generate_batch` (`batch` rows share each forward, a
finished row's slot goes to the next item), so each item's output, forwards and edits are exactly
those of a run alone (`llada.batch`). Only time is shared: an item's `seconds` is its share of the
batch's wall time (in proportion to the engine time of its rounds), so that a tally's TPS is output
tokens per wall-clock second of the whole evaluation, as when the items ran one after another.
"""

from __future__ import annotations

import time

from ..trace import Trace

BATCH = 16  # rows decoded at once by default


def decode_texts(pipe, prompts: list[str], cfg, batch: int = BATCH) -> list[tuple[str, Trace, float]]:
    """(completion text without EOS, finished Trace, its share of the wall seconds) of every prompt, in order."""
    ids = [pipe.encode(p) for p in prompts]
    start = time.perf_counter()
    traces = pipe.generate_batch(ids, cfg, max_batch=batch)
    wall = time.perf_counter() - start
    engine = sum(t.seconds for t in traces)
    out = []
    for trace in traces:
        share = wall * trace.seconds / engine if engine > 0 else wall / len(traces)
        out.append((pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id]), trace, share))
    return out
