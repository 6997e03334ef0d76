"""RowInput forwards already computed, kept by their inputs: a row asked again is answered without the model.

A sweep decodes every item under each of its settings, and most of those decodes ask for forwards
that another decode already ran: every setting's first forward of an item is the same (the prompt and
a block of masks), and settings that draft alike share the next ones too. In the explorer's default
grid 3,300 row forwards hold 155 distinct ones. The forward is row-exact (`LLaDA2MoE.forward_rows`):
a row's logits and the keys/values it writes depend on that row's inputs alone, so a row whose inputs
equal a kept row's gets that row's logits and keys/values bit for bit.

Kept: rows that read nothing from a cache and carry no mask (`start == 0`, one group), whose output is a
function of their tokens. Each entry holds the logits (T, V) and, for a row with a KV cache, the
keys/values it wrote at [0, T) of every layer, copied into the cache of each row that asks again.
Entries are dropped least recently used first to stay under `max_bytes`. The model's weights must not
change while a memo is in use (a sweep's memo lives as long as the sweep).

    memo = ForwardMemo()
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=32, memo=memo)    # memo.hits, memo.misses
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import torch

from .model import LLaDA2MoE, RowInput

MAX_BYTES = 96 << 20  # ~500 rows of 32 tokens of the embedded model (logits 128 KB, keys/values 64 KB each)


class _Kept(NamedTuple):
    logits: torch.Tensor | None  # (T, V) fp32; None for a row that wanted none
    k: torch.Tensor | None  # (layers, 1, KVheads, T, D) the keys it wrote; None without a cache
    v: torch.Tensor | None

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self if t is not None)


class ForwardMemo:
    """`forward_rows(model, rows)`: `model.forward_rows(rows)` with the rows already computed answered here."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes, self.bytes = max_bytes, 0
        self.kept: OrderedDict[tuple, _Kept] = OrderedDict()
        self.hits = self.misses = 0

    @staticmethod
    def key(row: RowInput) -> tuple | None:
        """What a kept row's output depends on; None for a row that is never kept (reads a cache, has a mask)."""
        if row.start != 0 or row.mask is not None:
            return None
        return tuple(row.ids.tolist()), row.cache is None, row.logits

    def forward_rows(self, model: LLaDA2MoE, rows: list[RowInput]) -> list[torch.Tensor | None]:
        """Per row logits as `model.forward_rows(rows)` gives them; the model runs only rows not kept, once each."""
        keys = [self.key(row) for row in rows]
        out = {i: self._answer(k, rows[i]) for i, k in enumerate(keys) if k in self.kept}  # row -> logits
        first: dict[tuple, int] = {}  # key -> the row of this call that computes it
        todo = [i for i, k in enumerate(keys) if i not in out and (k is None or first.setdefault(k, i) == i)]
        if todo:
            out.update(zip(todo, model.forward_rows([rows[i] for i in todo])))
        for i, k in enumerate(keys):
            if i not in out:  # the same inputs as an earlier row of this call
                out[i] = out[first[k]]
                _copy_cache(rows[first[k]], rows[i])
        for i in todo:
            if keys[i] is not None:
                self._keep(keys[i], rows[i], out[i])
        self.misses += len(todo)
        self.hits += len(rows) - len(todo)
        return [out[i] for i in range(len(rows))]

    def _keep(self, key: tuple, row: RowInput, logits: torch.Tensor | None) -> None:
        T = row.ids.shape[0]
        kv = (None, None) if row.cache is None else (row.cache.k[:, :, :, :T].clone(), row.cache.v[:, :, :, :T].clone())
        kept = _Kept(None if logits is None else logits.clone(), *kv)  # clones: not views of the call's tensors
        if kept.bytes > self.max_bytes:
            return
        self.kept[key] = kept
        self.bytes += kept.bytes
        while self.bytes > self.max_bytes:
            self.bytes -= self.kept.popitem(last=False)[1].bytes

    def _answer(self, key: tuple, row: RowInput) -> torch.Tensor | None:
        """A kept row's output for `row`: its keys/values written into row's cache, its logits returned."""
        kept = self.kept[key]
        self.kept.move_to_end(key)
        if row.cache is not None:
            T = row.ids.shape[0]
            row.cache.k[:, :, :, :T] = kept.k
            row.cache.v[:, :, :, :T] = kept.v
        return kept.logits


def _copy_cache(source: RowInput, row: RowInput) -> None:
    """The keys/values `source` wrote at [0, T), written into `row`'s cache."""
    if row.cache is not None:
        T = row.ids.shape[0]
        row.cache.k[:, :, :, :T] = source.cache.k[:, :, :, :T]
        row.cache.v[:, :, :, :T] = source.cache.v[:, :, :, :T]
