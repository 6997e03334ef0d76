"""The cached decode forward with static shapes, and its CUDA graphs.

A CUDA graph replays a recorded sequence of kernels with fixed pointers and fixed shapes, so a whole
forward costs one launch from the host instead of several hundred. The decode loop's cached forward
over a window [lo, hi) of a run changes only in *values* from one step to the next: the tokens,
where the window starts, which keys it may see. `StepGraphs` keeps, per window length T, static
device buffers (ids (1, T), and the scalars lo, hi, groups_hi), builds the attention mask over all
cache slots on the device from them, and calls `LLaDA2MoE.forward` with a tensor `start`: the
model's static path, which writes keys/values with `index_copy_` and attends over the whole
preallocated cache. Nothing in that forward depends on a host-side value.

    mask[i, j] = j < lo  or  (j < hi  and  min(j // B, groups_hi) <= min(p_i // B, groups_hi))

for query i at position p_i: the cached blocks, plus the window's block-causal structure with the
blocks from `groups_hi` on merged into one group (MBE), exactly what the loop's dynamic forward
builds with `block_causal_mask` over [0, hi).

On CUDA, the first call at a length runs eagerly on a side stream (the warm-up: Triton compiles,
cuBLAS picks its kernels) while `count_launches` watches it for host synchronisations; a forward
that has none is recorded into a graph on its second call and replayed afterwards (one graph and
memory pool per length). A run's StepGraphs, with its KV cache and graphs, is kept on the model when
the run ends and lent to the next run of the same shape (`step_graphs`, at most POOL_SIZE kept), whose
forwards then replay from the first call. `graph_ready(model)` tells beforehand whether a model can be
graphed: its routed experts must run on the Triton kernels (the fast engine of `llada.fast.engine`: bf16
`FusedExperts` or FP8 experts on Triton); the reference experts read their counts on the host, so
the decode loop keeps such a model on its dynamic path. What counts as a host sync (`.item()`,
`.tolist()`, `.cpu()`, `.to("cpu")`, `nonzero`, boolean-mask indexing, ...) is listed in
`llada.fast.kernels.launch`; it is seen on a CPU run as well. `capture=False` runs the same static forward eagerly on
any device: the CPU tests check it against the dynamic one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import kernels
from .kernels.fused_norm import fused
from .kernels.launch import count_launches
from ..kv_cache import KVCache
from ..model import Experts, LLaDA2MoE


def graph_ready(model: LLaDA2MoE) -> bool:
    """No module of `model` waits for the host in its forward: every MoE runs on the Triton kernels."""
    from .quantize import FP8Experts, FP8Linear

    for module in model.modules():
        if isinstance(module, Experts):
            return False  # bincount().tolist() to loop over the experts
        if isinstance(module, (FP8Experts, FP8Linear)):
            probe = module.w13 if isinstance(module, FP8Experts) else module.weight
            if kernels.resolve_impl(module.impl, probe, fp8=True) != "triton":
                return False  # the PyTorch reference loops over ids.unique().tolist()
    return True


@dataclass
class _Entry:
    """The static buffers of one window length, and its graph once recorded."""

    ids: torch.Tensor  # (1, T) long
    bounds: torch.Tensor  # (3,) long: lo, hi, groups_hi
    calls: int = 0
    graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None  # (T, V): the graph's output, overwritten by every replay
    syncs: list[str] = field(default_factory=list)


class StepGraphs:
    """Static-shape cached forwards of one decoding run, recorded as CUDA graphs when `capture`."""

    def __init__(self, model: LLaDA2MoE, cache: KVCache, block_length: int, capture: bool):
        if capture and model.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA model; this one is on {model.device}")
        self.model, self.cache, self.block_length, self.capture = model, cache, block_length, capture
        self.entries: dict[int, _Entry] = {}
        self.replays = 0

    def __call__(self, ids: torch.Tensor, lo: int, hi: int, groups_hi: int) -> torch.Tensor:
        """ids (1, hi - lo) of window [lo, hi) -> fp32 logits (hi - lo, V); keys/values written at [lo, hi).

        The result of a replay is the graph's own buffer: use it before the next call."""
        T = hi - lo
        entry = self.entries.get(T)
        if entry is None:
            entry = self.entries[T] = _Entry(ids=torch.empty(1, T, dtype=torch.long, device=ids.device),
                                             bounds=torch.empty(3, dtype=torch.long, device=ids.device))
        entry.ids.copy_(ids)
        entry.bounds.copy_(torch.tensor([lo, hi, groups_hi]), non_blocking=True)
        entry.calls += 1
        if not self.capture:
            return self._forward(entry)
        if entry.graph is None and entry.calls == 1:
            return self._warm_up(entry)
        if entry.graph is None and not entry.syncs:
            self._record(entry)
        if entry.graph is None:
            return self._forward(entry)
        entry.graph.replay()
        self.replays += 1
        return entry.logits

    def mask(self, bounds: torch.Tensor, T: int) -> torch.Tensor:
        """The (T, capacity) boolean mask of the window described by bounds = (lo, hi, groups_hi)."""
        return kernels.reference.window_mask(bounds, T, self.cache.capacity, self.block_length)

    def _forward(self, entry: _Entry) -> torch.Tensor:
        T = entry.ids.shape[1]
        # additive (0 / -inf) in the model's dtype, made once: a bool mask is turned into exactly this by
        # attention itself in every layer (3 kernels a layer); one launch on the fast engine
        impl = "triton" if fused(self.model) else "torch"
        mask = kernels.step_mask(entry.bounds, T, self.cache.capacity, self.block_length, self.model.dtype,
                                 impl=impl)  # (T, capacity)
        return self.model(entry.ids, start=entry.bounds[0], mask=mask, cache=self.cache)[0]  # (T, V)

    def _warm_up(self, entry: _Entry) -> torch.Tensor:
        stream = torch.cuda.Stream(self.model.device)
        stream.wait_stream(torch.cuda.current_stream(self.model.device))
        with torch.cuda.stream(stream), count_launches() as count:
            logits = self._forward(entry)
        main = torch.cuda.current_stream(self.model.device)
        main.wait_stream(stream)
        logits.record_stream(main)  # used on the main stream: not reusable by the side stream before that
        entry.syncs = count.syncs
        return logits

    def _record(self, entry: _Entry) -> None:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # its own memory pool: graphs of a run may replay in any order
            entry.logits = self._forward(entry)
        entry.graph = graph


POOL_SIZE = 4  # recorded StepGraphs kept per model between runs (each holds its KV cache and graph pools)


def step_graphs(model: LLaDA2MoE, capacity: int, block_length: int, capture: bool) -> StepGraphs:
    """A StepGraphs over its own KV cache of `capacity` slots for one run: one kept from an earlier run of
    the same shape (its graphs recorded already, replayed from the first call) when one is free, else new.

    The run hands it back with `keep_step_graphs` (the decode loop does when the run is collected); a
    kept one is lent to one run at a time, and the model keeps at most POOL_SIZE (least recent dropped).
    `forget_step_graphs` drops them all (the engine does when it swaps the model's modules: a graph
    replays the kernels it recorded)."""
    kept = _pool(model).pop(_key(model, capacity, block_length, capture), None)
    with torch.inference_mode():  # the decode loop's tensors live in inference mode
        if kept is None:
            return StepGraphs(model, model.new_cache(capacity), block_length, capture)
        kept.cache.k.zero_(), kept.cache.v.zero_()  # no values of the earlier run (masked, but NaN * 0 is NaN)
    kept.cache.length = 0
    return kept


def keep_step_graphs(model: LLaDA2MoE, graphs: StepGraphs) -> None:
    pool = _pool(model)
    key = _key(model, graphs.cache.capacity, graphs.block_length, graphs.capture)
    pool.pop(key, None)
    pool[key] = graphs  # most recent last
    while len(pool) > POOL_SIZE:
        pool.pop(next(iter(pool)))


def forget_step_graphs(model: LLaDA2MoE) -> None:
    _pool(model).clear()


def _pool(model: LLaDA2MoE) -> dict:
    return model.__dict__.setdefault("_llada_step_graphs", {})  # on the model: no state shared between models


def _key(model: LLaDA2MoE, capacity: int, block_length: int, capture: bool) -> tuple:
    return capacity, block_length, capture, model.dtype, model.device
