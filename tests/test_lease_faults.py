"""Faults only a GPU shows: memory that recorded CUDA graphs still read, and a model built in fp32 first.

A CUDA graph replays kernels with the pointers they were recorded with. A tensor it reads that Python
then drops is freed, its memory soon another tensor's, and the replay computes with whatever is there,
silently. The rope tables (`llada.norm_rope.rope_table`) and the fused SwiGLU's stacked weights
(`FusedSwiGLU._gate_up`) are both remade at times; the CPU tests check that the old memory stays alive
(or is rewritten in place), the CUDA tests replay a graph after the change. `random_model` must lay out
the mini in bf16 directly: the fp32 pass takes 64 GB. These tests run in the lease's test part.
"""

import gc
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from llada.bench.forward import SHAPES, random_model
from llada.config import ModelConfig
from llada.fast.kernels.fused_norm import FusedSwiGLU
from llada.model import SwiGLU
from llada.norm_rope import rope_cos_sin, rope_table

cuda = pytest.mark.gpu(reason="a CUDA graph replay needs a CUDA GPU")  # skipped without one (conftest)


def test_a_rope_table_that_grows_keeps_the_old_one_alive():
    owner = torch.nn.Module()
    positions = torch.arange(5)
    rope_table(owner, positions, 8, 12, 6e5)
    first = weakref.ref(owner._rope_table)
    before = owner._rope_table.clone()
    cos, sin = rope_table(owner, torch.tensor([17, 3]), 20, 12, 6e5)  # a run with more positions
    gc.collect()
    assert first() is not None and first() is not owner._rope_table  # graphs recorded on it may still read it
    assert torch.equal(first(), before)  # and it holds what it held
    assert owner._rope_table.shape[0] >= 20
    assert torch.equal(cos, rope_cos_sin(torch.tensor([17, 3]), 12, 6e5)[0])


def test_a_rope_table_grows_at_least_twofold():
    owner = torch.nn.Module()
    for size in range(9, 40):  # one position more each time: few tables, not 31
        rope_table(owner, torch.arange(2), size, 4, 1e4)
    assert len(owner._rope_retired) <= 3


def _swiglu(dtype=torch.float32, device="cpu") -> FusedSwiGLU:
    torch.manual_seed(0)
    return FusedSwiGLU(SwiGLU(24, 10).to(device=device, dtype=dtype))  # H 24, I 10


def test_fused_swiglu_rewrites_its_stacked_weights_in_place():
    mlp = _swiglu()
    both = mlp._gate_up()  # (2I, H)
    pointer = both.data_ptr()
    with torch.no_grad():
        mlp.gate_proj.weight.add_(1.0)  # e.g. a checkpoint copied into the same Parameter
    again = mlp._gate_up()
    assert again.data_ptr() == pointer  # the memory a recorded graph reads
    assert torch.equal(again, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))


def test_fused_swiglu_keeps_a_replaced_stack_alive():
    mlp = _swiglu()
    old = weakref.ref(mlp._gate_up())
    mlp.gate_proj, mlp.up_proj = torch.nn.Linear(24, 12, bias=False), torch.nn.Linear(24, 12, bias=False)
    new = mlp._gate_up()  # another shape: a new tensor
    gc.collect()
    assert new.shape == (24, 24) and old() is not None


class _Allocations(TorchDispatchMode):
    """The dtypes of every tensor allocated on a real device while it is on."""

    def __init__(self):
        super().__init__()
        self.dtypes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith(("empty", "empty_like", "empty_strided")) and isinstance(out, torch.Tensor) \
                and out.device.type != "meta":
            self.dtypes.add(out.dtype)
        return out


def test_random_model_allocates_straight_in_its_dtype():
    cfg = ModelConfig(**SHAPES["smoke"])
    with _Allocations() as seen:
        model = random_model(cfg, torch.device("cpu"), torch.bfloat16)
    assert seen.dtypes == {torch.bfloat16}  # no fp32 tensor the size of the model, ever
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@cuda
def test_mini_built_on_the_gpu_peaks_at_its_bf16_weights():
    cfg = ModelConfig(**{**SHAPES["llada2.1-mini"], "num_hidden_layers": 3})  # ~3.5 GB in bf16
    torch.cuda.empty_cache(), torch.cuda.reset_peak_memory_stats()
    model = random_model(cfg, torch.device("cuda"), torch.bfloat16)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert torch.cuda.max_memory_allocated() < 1.1 * weights  # an fp32 pass would peak at 3x


@cuda
def test_a_graph_recorded_before_the_rope_table_grew_replays_right():
    from llada.fast.engine import use_engine
    from llada.fast.graphs import StepGraphs

    cfg = ModelConfig(**SHAPES["smoke"], max_position_embeddings=4096)
    model = random_model(cfg, torch.device("cuda"), torch.bfloat16)
    use_engine(model, "fast", decode=None)
    ids = torch.randint(0, cfg.vocab_size, (1, 8), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    with torch.inference_mode():
        small = StepGraphs(model, model.new_cache(64), 8, capture=True)
        for _ in range(3):  # warm-up, record, replay
            recorded = small(ids, 16, 24, 2).clone()
        StepGraphs(model, model.new_cache(2048), 8, capture=False)(ids, 16, 24, 2)  # the table grows
        junk = [torch.full((1 << 20,), float("nan"), device="cuda") for _ in range(8)]  # reuse freed memory
        replayed = small(ids, 16, 24, 2)
        assert small.replays >= 2 and torch.equal(replayed, recorded)
    del junk


@cuda
def test_a_graph_of_the_fused_swiglu_reads_weights_changed_in_place():
    mlp = _swiglu(torch.bfloat16, "cuda")
    x = torch.randn(4, 24, device="cuda", dtype=torch.bfloat16)
    mlp(x)  # compile
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mlp(x)
    with torch.no_grad():
        mlp.up_proj.weight.mul_(2.0)
    expected = mlp(x)  # the eager call restacks, in place
    graph.replay()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
