"""Evaluations across workers (data parallel): each rank runs the whole model on its share of the items.

An evaluation's items are independent (a HumanEval problem decodes and is checked alone), so W ranks started by
`torchrun` each load the whole model, take every W-th item (`share`: rank r gets items r, r+W, r+2W, ..., so
long and short items spread evenly when they come sorted), and run them as one process would. `gather` brings
every rank's rows to rank 0, which puts them back in the items' order and writes the report that one process
writes; the others write nothing. A rank's rows are what one process gets for those items (each decode is its
own), so only the wall time changes: it is the slowest rank's.

This is the split for models that fit one device; a model that does not fit splits its experts instead
(`llada.dist.experts`), and every rank then runs every item.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import torch.distributed as dist

from .group import Ranks

T = TypeVar("T")


def share(items: Sequence[T], ranks: Ranks | None) -> list[T]:
    """This rank's items: every `world`-th from its rank on (all of them for one process)."""
    return list(items) if ranks is None else list(items[ranks.rank::ranks.world])


def gather(rows: list[T], ranks: Ranks | None) -> list[T] | None:
    """Every rank's `rows` (each its share of the items, in order) on rank 0, in the items' order; None
    on the other ranks. A rank's i-th row is item rank + i*world, as `share` dealt them."""
    if ranks is None:
        return rows
    shares: list[list[T] | None] = [None] * ranks.world
    dist.all_gather_object(shares, rows)
    if not ranks.lead:
        return None
    return [shares[i % ranks.world][i // ranks.world] for i in range(sum(len(s) for s in shares))]


def slowest(seconds: float, ranks: Ranks | None) -> float:
    """The largest of every rank's `seconds` (the wall time of work the ranks did side by side)."""
    if ranks is None:
        return seconds
    every: list[float | None] = [None] * ranks.world
    dist.all_gather_object(every, seconds)
    return max(every)
