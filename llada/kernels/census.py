"""How many kernels one graphed decode forward launches, counted without a GPU.

A CUDA graph removes the host's launch overhead but not the device's: every kernel in the graph still
costs a launch gap of a few microseconds, so a forward of 1,400 tiny kernels loses milliseconds to
gaps alone. This census runs the decode loop's static forward (`llada.graphs.StepGraphs`, the very
code a graph records) once under `count_launches` and splits the count by part of the model:

    prologue    attention mask, RoPE tables, embedding (once per forward)
    layers      one count per decoder layer (attention + FFN: dense SwiGLU or MoE)
    epilogue    final norm, lm_head

On CPU it is a proxy: the same ATen ops and Triton launches (under Triton's interpreter) that the
CUDA forward issues, each counted as one kernel. It differs from a CUDA profiler's count where an
ATen op runs several kernels or none on the GPU (SDPA may run one or two; a CPU matmul is one op
that cuBLAS may split), so the real number is for a GPU owner to read from the profiler
(`python -m llada.bench gpu-check`). `scaled(layers)` extrapolates a small model with the real
model's layer structure (first layers dense, the rest MoE) to the real layer count.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import torch

from .launch import count_launches


class Census(NamedTuple):
    prologue: int
    layers: list[int]  # kernels per decoder layer, in order
    epilogue: int
    triton: int  # Triton launches among all of them
    ops: Counter  # every kernel by name (ATen op or Triton kernel)
    syncs: list[str]  # host synchronisations (a graph cannot hold them): must be empty
    dense_layers: int  # how many of `layers` are dense (the first ones)

    @property
    def total(self) -> int:
        return self.prologue + sum(self.layers) + self.epilogue

    def scaled(self, num_layers: int) -> int:
        """The count of the same structure with `num_layers` layers (the extra ones like the last MoE layer)."""
        moe = self.layers[self.dense_layers:] or self.layers
        return self.prologue + sum(self.layers[:self.dense_layers]) + moe[-1] * (num_layers - self.dense_layers) \
            + self.epilogue


@torch.no_grad()
def decode_census(model, window: int = 8, block_length: int = 8) -> Census:
    """Count the kernels of one static decode forward of `model` over a window of `window` tokens."""
    from ..graphs import StepGraphs

    cache = model.new_cache(2 * window)
    step = StepGraphs(model, cache, block_length, capture=False)
    ids = torch.zeros(1, window, dtype=torch.long, device=model.device)
    marks: list[int] = []
    hooks = [layer.register_forward_pre_hook(lambda *_: marks.append(count.total)) for layer in model.layers]
    hooks.append(model.norm.register_forward_pre_hook(lambda *_: marks.append(count.total)))
    try:
        with count_launches() as count:
            step(ids, window, 2 * window, 2 * window // block_length)  # a decode step after one cached block
    finally:
        for hook in hooks:
            hook.remove()
    first = count.aten.index("copy_", count.aten.index("copy_") + 1) + 1  # the buffer copies are not the graph
    ops = Counter(count.aten[first:]) + Counter(count.triton)
    layers = [b - a for a, b in zip(marks, marks[1:])]
    dense = sum(1 for layer in model.layers if not hasattr(layer.mlp, "experts"))
    return Census(marks[0] - first, layers, count.total - marks[-1], len(count.triton), ops, count.syncs,
                  dense)
