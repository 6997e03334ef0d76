"""The KV cache of finished blocks: keys and values a decode step reads instead of recomputing them."""

from __future__ import annotations

import torch

from .config import ModelConfig


class KVCache:
    """Preallocated keys/values of finished blocks for every layer: (layers, B, KVheads, max_len, D).

    A forward at `start` writes its keys/values into slots [start, start+T) and attends to [0, start+T);
    only `commit` makes them part of the cache (`length`), so a window can be recomputed freely."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, dtype: torch.dtype, device):
        shape = (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.layers = list(zip(self.k.unbind(0), self.v.unbind(0)))  # per layer (B, KVheads, max_len, D) views
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def write(self, layer: int, start: int | torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, KVheads, T, D) at [start, start+T) of `layer`; return keys/values of [0, start+T).

        With `start` a 0-d device tensor (the static path) every slot is returned (S = capacity),
        and the caller's mask hides those past start+T: the shapes no longer depend on `start`."""
        if isinstance(start, torch.Tensor):
            slots = start + torch.arange(k.shape[2], device=k.device)  # (T,)
            self.k[layer].index_copy_(2, slots, k)
            self.v[layer].index_copy_(2, slots, v)
            return self.k[layer], self.v[layer]  # (B, KVheads, capacity, D)
        T = k.shape[2]
        keys, values = self.layers[layer]
        keys.narrow(2, start, T).copy_(k)
        values.narrow(2, start, T).copy_(v)
        return keys.narrow(2, 0, start + T), values.narrow(2, 0, start + T)  # (B, KVheads, S, D)

    @staticmethod
    def write_rows(caches: list["KVCache"], layer: int, start: int, k: torch.Tensor,
                   v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store row i's k[i], v[i] (R, KVheads, T, D) at [start, start+T) of caches[i] (batch 1 each), all in
        one copy call; return the rows' keys/values of [0, start+T) (R, KVheads, S, D): k, v at start 0."""
        T = k.shape[2]
        if len(caches) == 1:  # one row: two plain copies
            keys_values = caches[0].write(layer, start, k, v)
            return keys_values if start else (k, v)
        views = [cache.layers[layer] for cache in caches]
        slots = [t.narrow(2, start, T) for pair in views for t in pair]  # k, v of row 0, k, v of row 1, ...
        torch._foreach_copy_(slots, [t for pair in zip(k.split(1), v.split(1)) for t in pair])
        if not start:
            return k, v
        return tuple(torch.cat([pair[j].narrow(2, 0, start + T) for pair in views]) for j in (0, 1))

    def commit(self, end: int) -> None:
        """Keys/values of positions [0, end) are final."""
        if end > self.capacity:
            raise ValueError(f"cannot commit {end} positions: cache holds {self.capacity}")
        self.length = end
