"""How many kernels one graphed decode forward launches, counted without a GPU.

A CUDA graph removes the host's launch overhead but not the device's: every kernel in the graph still
costs a launch gap of a few microseconds, so a forward of 1,400 tiny kernels loses milliseconds to
gaps alone. This census runs the decode loop's static forward (`llada.fast.graphs.StepGraphs`, the very
code a graph records) twice and counts its second call (the one a graph records) under `count_launches` and splits the
count by part of the model:

    prologue    attention mask, RoPE tables read by position, embedding (once per forward)
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

import os
import sys
from collections import Counter
from typing import NamedTuple

import torch

from ..fast.kernels.launch import count_launches


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
        """The count of the same structure with `num_layers` layers (the extra ones like the last layer: the
        first MoE layer, after a dense one, makes its own input norm; later ones take it from the k-sum before)."""
        return self.total + self.layers[-1] * (num_layers - len(self.layers))


@torch.no_grad()
def decode_census(model, window: int = 8, block_length: int = 8) -> Census:
    """Count the kernels of one static decode forward of `model` over a window of `window` tokens."""
    from ..fast.graphs import StepGraphs

    cache = model.new_cache(2 * window)
    step = StepGraphs(model, cache, block_length, capture=False)
    ids = torch.zeros(1, window, dtype=torch.long, device=model.device)
    # a graph records a length's second call (the first warms up: compiles, tables made once): count that one
    step(ids, window, 2 * window, 2 * window // block_length)  # a decode step after one cached block
    marks: list[int] = []
    hooks = [layer.register_forward_pre_hook(lambda *_: marks.append(count.total)) for layer in model.layers]
    hooks.append(model.norm.register_forward_pre_hook(lambda *_: marks.append(count.total)))
    try:
        with count_launches() as count:
            step(ids, window, 2 * window, 2 * window // block_length)
    finally:
        for hook in hooks:
            hook.remove()
    first = count.aten.index("copy_", count.aten.index("copy_") + 1) + 1  # the buffer copies are not the graph
    ops = Counter(count.aten[first:]) + Counter(count.triton)
    layers = [b - a for a, b in zip(marks, marks[1:])]
    dense = sum(1 for layer in model.layers if not hasattr(layer.mlp, "experts"))
    return Census(marks[0] - first, layers, count.total - marks[-1], len(count.triton), ops, count.syncs,
                  dense)


MINI_LAYERS = 20


def mini_like():
    """A tiny bf16 model with the mini's layer structure on the fast engine (`tests/test_kernels_census.py`).

    Odd tiny sizes; real: hidden 2048, 16 heads / 4 KV of 128, 256 experts top-8 in 4 of 8 groups, width 512.
    Real sizes change no count: every op here runs at any size."""
    from ..config import ModelConfig
    from ..fast.engine import use_engine
    from ..model import LLaDA2MoE

    cfg = ModelConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, intermediate_size=48, moe_intermediate_size=16,
                      num_experts=16, num_experts_per_tok=4, n_group=8, topk_group=4, first_k_dense_replace=1,
                      num_shared_experts=1, partial_rotary_factor=0.5, use_qk_norm=True,
                      moe_router_enable_expert_bias=True, routed_scaling_factor=2.5)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LLaDA2MoE(cfg).init_weights(seed=0).to(device, torch.bfloat16)
    use_engine(model, "fast", check=False)
    return model


def main() -> int:
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the kernels run on the CPU
    c = decode_census(mini_like())
    print(f"prologue {c.prologue}  layers {c.layers}  epilogue {c.epilogue}  total {c.total} "
          f"(Triton {c.triton})  scaled to {MINI_LAYERS} layers: {c.scaled(MINI_LAYERS)}  "
          f"host syncs: {c.syncs or 'none'}")
    for name, n in c.ops.most_common():
        print(f"{n:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
