"""The static-shape cached forward (`llada.fast.graphs`) against the loop's dynamic one, and its CUDA graphs.

On CPU the static forward runs eagerly (`forward="static"`): same logits up to fp32 rounding, same
golden traces. On a CUDA device the graph path is recorded, replayed, and checked against the static
forward run eagerly.
"""

import pytest
import torch

from llada.fast import kernels
from llada.weights.checkpoint import load_model
from llada.decode import decode, generate
from llada.fast.graphs import StepGraphs, graph_ready
from llada.fast.kernels.launch import count_launches
from llada.model import block_causal_mask
from golden_cases import case_config

needs_cuda = pytest.mark.gpu(reason="CUDA graphs need a GPU")


WINDOWS = {  # (lo, hi, groups_hi) with block length 4 over a cache of 24: the loop's three kinds of forward
    "prefill_two_blocks": (0, 8, 2),  # strict block-causal inside the window
    "decode_step": (8, 12, 2),  # one block against the cache
    "mbe_window": (4, 12, 1),  # blocks 1 and 2 merged into one bidirectional group
}


@pytest.mark.parametrize("name", list(WINDOWS))
def test_static_forward_matches_dynamic_forward(ref_model, name):
    lo, hi, groups_hi = WINDOWS[name]
    B = 4
    ids = torch.randint(0, ref_model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(0))
    dynamic_cache, static_cache = ref_model.new_cache(24), ref_model.new_cache(24)
    with torch.inference_mode():
        for cache in (dynamic_cache, static_cache):  # the same committed prefix [0, lo) in both caches
            ref_model(ids[:, :8], mask=block_causal_mask(torch.arange(8) // B), cache=cache)
            cache.commit(lo)
        groups = (torch.arange(lo, hi) // B).clamp(max=groups_hi)
        mask = block_causal_mask(groups, torch.cat([torch.full((lo,), -1), groups]))
        dynamic = ref_model(ids[:, lo:hi], start=lo, mask=mask, cache=dynamic_cache)[0]
        static = StepGraphs(ref_model, static_cache, B, capture=False)(ids[:, lo:hi], lo, hi, groups_hi)
    # attention over all 24 slots (masked) instead of [0, hi): another CPU SDPA kernel and key count, so
    # fp32 sums differ in the last bits (measured max |diff| ~2e-5 on logits of size ~10)
    assert torch.allclose(static, dynamic, rtol=1e-4, atol=1e-4)
    assert torch.equal(static.argmax(-1), dynamic.argmax(-1))
    # the window's keys/values are written at [lo, hi) (later layers' inherit the last-bit differences)
    assert torch.allclose(static_cache.k[:, :, :, :hi], dynamic_cache.k[:, :, :, :hi], atol=1e-5)
    assert torch.allclose(static_cache.v[:, :, :, :hi], dynamic_cache.v[:, :, :, :hi], atol=1e-5)


def test_static_mask_is_the_dynamic_rule_over_all_slots(ref_model):
    graphs = StepGraphs(ref_model, ref_model.new_cache(24), 4, capture=False)
    for lo, hi, groups_hi in WINDOWS.values():
        groups = (torch.arange(lo, hi) // 4).clamp(max=groups_hi)
        expected = torch.zeros(hi - lo, 24, dtype=torch.bool)
        expected[:, :hi] = block_causal_mask(groups, torch.cat([torch.full((lo,), -1), groups]))
        assert torch.equal(graphs.mask(torch.tensor([lo, hi, groups_hi]), hi - lo), expected)


@pytest.mark.parametrize("index", [0, 6])  # two prompt-only blocks to prefill; EOS early stop
def test_static_path_reproduces_golden_traces(ref_model, golden, index):
    case = golden["generate"][index]
    ids = golden["mask_id"], golden["eos_id"]
    r = generate(ref_model, case["prompt_ids"], case_config(case), *ids, forward="static")
    assert r.output_ids == case["output_ids"] and r.num_decode_forwards == case["num_forwards"]
    assert r.block_states_before_each_forward() == case["block_states_before_each_forward"]


def test_static_path_with_mbe_matches_dynamic(ref_model, golden):
    case = golden["generate"][6]  # the shortest case (10 forwards): MBE windows, refreshes, EOS stop
    cfg = case_config(case, mbe=True, mbe_window=2)
    runs = [generate(ref_model, case["prompt_ids"], cfg, golden["mask_id"], golden["eos_id"], forward=f)
            for f in ("dynamic", "static")]
    assert runs[0].output_ids == runs[1].output_ids
    assert runs[0].block_states_before_each_forward() == runs[1].block_states_before_each_forward()


def test_forward_path_is_checked_before_the_run(ref_model, golden):
    case = golden["generate"][0]
    args = (ref_model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    with pytest.raises(ValueError, match="forward must be one of"):
        decode(*args, forward="fast")
    with pytest.raises(ValueError, match="needs the KV cache"):
        decode(ref_model, case["prompt_ids"], case_config(case, use_cache=False), golden["mask_id"], golden["eos_id"],
               forward="static")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA model"):
            decode(*args, forward="graph")


def test_graph_ready_needs_the_triton_experts(fixture_dir):
    from llada.fast.quantize import quantize_model_fp8

    assert not graph_ready(load_model(fixture_dir))  # bf16/fp32 reference experts: bincount().tolist()
    assert not graph_ready(quantize_model_fp8(load_model(fixture_dir), impl="torch"))  # unique().tolist()
    if kernels.triton_available():  # on CPU the interpreter stands in for the GPU kernels
        model = load_model(fixture_dir).to("cuda" if torch.cuda.is_available() else "cpu")
        assert graph_ready(quantize_model_fp8(model, impl="triton"))


def test_reference_forward_is_seen_to_sync(ref_model):
    """The probe that keeps a syncing forward out of CUDA graphs sees the bf16 reference experts' sync."""
    cache = ref_model.new_cache(8)
    with torch.inference_mode(), count_launches() as count:
        StepGraphs(ref_model, cache, 4, capture=False)(torch.zeros(1, 4, dtype=torch.long), 0, 4, 0)
    assert "bincount" in count.syncs


@pytest.mark.skipif(not kernels.triton_available(), reason="the fast engine needs the Triton kernels")
@pytest.mark.parametrize("weights", ["bf16", "fp8"])
def test_fast_engine_forward_has_no_host_sync(fixture_dir, weights):
    """The whole static forward on the fast engine, watched on CPU: nothing a CUDA graph could not hold."""
    from llada.fast.engine import use_engine
    from llada.fast.quantize import quantize_model_fp8

    model = load_model(fixture_dir).to("cuda" if torch.cuda.is_available() else "cpu")
    if weights == "fp8":
        quantize_model_fp8(model, impl="triton")
    use_engine(model, "fast", check=False)
    assert graph_ready(model)
    cache = model.new_cache(8)
    ids = torch.zeros(1, 4, dtype=torch.long, device=model.device)
    with torch.inference_mode(), count_launches() as count:
        StepGraphs(model, cache, 4, capture=False)(ids, 0, 4, 0)
    assert count.syncs == [] and count.triton


@pytest.mark.parametrize("op, name", [(lambda t: t.tolist(), "tolist"), (lambda t: t.cpu(), "cpu"),
                                      (lambda t: t.to("cpu"), "to(cpu)"), (lambda t: t.flatten()[0].item(), "item"),
                                      (lambda t: t.nonzero(), "nonzero"), (lambda t: t[t > 0], "index[bool mask]")])
def test_a_host_sync_inside_the_forward_is_seen(ref_model, op, name):
    """Any of these in a layer's forward keeps the loop off CUDA graphs; each is seen on a CPU run too."""
    def sync(module, inputs, out):
        op(out)  # the hook returns None: the forward's output is unchanged

    hook = ref_model.layers[0].attention.register_forward_hook(sync)
    try:
        with torch.inference_mode(), count_launches() as count:
            graphs = StepGraphs(ref_model, ref_model.new_cache(8), 4, capture=False)
            graphs(torch.zeros(1, 4, dtype=torch.long), 0, 4, 0)
    finally:
        hook.remove()
    assert name in count.syncs


@needs_cuda
@pytest.mark.skipif(not kernels.triton_available(), reason="the graph path needs the Triton kernels")
def test_graph_path_matches_static_path_on_cuda(fixture_dir, golden):
    from llada.fast.quantize import quantize_model_fp8

    model = quantize_model_fp8(load_model(fixture_dir).cuda(), impl="triton")
    case = golden["generate"][2]
    ids = golden["mask_id"], golden["eos_id"]
    static = generate(model, case["prompt_ids"], case_config(case), *ids, forward="static")
    graph = generate(model, case["prompt_ids"], case_config(case), *ids, forward="graph")
    assert graph.output_ids == static.output_ids  # the same kernels, replayed instead of launched
    assert graph.block_states_before_each_forward() == static.block_states_before_each_forward()


@needs_cuda
@pytest.mark.skipif(not kernels.triton_available(), reason="the graph path needs the Triton kernels")
def test_graphs_are_recorded_and_replayed(fixture_dir):
    from llada.fast.quantize import quantize_model_fp8

    model = quantize_model_fp8(load_model(fixture_dir).cuda(), impl="triton")
    cache = model.new_cache(16)
    graphs = StepGraphs(model, cache, 4, capture=True)
    ids = torch.randint(0, model.config.vocab_size, (1, 4), device="cuda")
    with torch.inference_mode():
        eager = StepGraphs(model, model.new_cache(16), 4, capture=False)(ids, 8, 12, 2).clone()
        outs = [graphs(ids, 8, 12, 2).clone() for _ in range(3)]  # warm-up, record + replay, replay
    assert graphs.replays == 2 and not graphs.entries[4].syncs
    for out in outs:
        assert torch.allclose(out, eager, rtol=1e-4, atol=1e-4)  # same kernels; the cache holds zeros below 8
