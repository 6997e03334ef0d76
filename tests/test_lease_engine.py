"""The lease's forward gate: the fp32 run of the reference that the fast engine's logits are judged against.

`fp32_logits` upcasts one layer at a time (the mini has no room for a whole fp32 copy on an 80 GB GPU);
on a model small enough to copy whole it must give what the whole fp32 copy gives, and on an fp32 model
exactly the model's own forward. The gate compares the fast engine's distance from it with the bf16
reference's own (issue #33: random weights through 20 layers amplify every rounding).
"""

import copy

import torch

from llada.bench.forward import prefill, random_model
from llada.bench.lease_engine import SPREAD_EPS, _config, fp32_logits, spread_ok
from llada.fast.kernels.reference import rel_rmse
from llada.fast.quantize import quantize_model_fp8


def _model_and_block(dtype, fp8=False):
    model = random_model(_config("smoke"), torch.device("cpu"), dtype)
    if fp8:
        quantize_model_fp8(model, impl="torch")
    cache, block = prefill(model, 16, 8, torch.Generator().manual_seed(0))  # 16 cached tokens, an 8-token block
    return model, cache, block


def _upcast_whole(model):
    """The whole model's fp32 copy (FP8 codes kept), which the mini cannot afford."""
    return copy.deepcopy(model)._apply(lambda t: t.float() if t.dtype == torch.bfloat16 else t)


def _cache_in_fp32(cache):
    c = copy.copy(cache)
    c.k, c.v = cache.k.float(), cache.v.float()
    c.layers = list(zip(c.k.unbind(0), c.v.unbind(0)))
    return c


def test_on_an_fp32_model_it_is_the_forward_itself():
    model, cache, block = _model_and_block(torch.float32)
    with torch.inference_mode():
        own = model(block, start=16, cache=cache)
        assert torch.equal(fp32_logits(model, cache, block, 16), own)


def test_layer_by_layer_it_is_the_whole_fp32_copy_bf16_and_fp8():
    for fp8 in (False, True):
        model, cache, block = _model_and_block(torch.bfloat16, fp8)
        with torch.inference_mode():
            want = _upcast_whole(model)(block, start=16, cache=_cache_in_fp32(cache))
            got = fp32_logits(model, cache, block, 16)
            bf16 = model(block, start=16, cache=cache)
        assert got.dtype == torch.float32 and torch.equal(got, want), fp8
        assert rel_rmse(bf16, got) > 1e-4  # the bf16 forward is another computation: the spread measured
        assert model.layers[1].mlp.experts.w13.dtype == (torch.float8_e4m3fn if fp8 else torch.bfloat16)  # untouched


def test_the_gate_takes_the_reference_own_spread_into_account():
    def row(fast, ref):
        return {"logits_rel_rmse_vs_fp32": fast, "reference_rel_rmse_vs_fp32": ref}

    assert spread_ok(row(0.073, 0.07))  # the H200's 0.103 fast vs reference, split evenly: as good as the reference
    assert not spread_ok(row(0.5, 0.07))  # much worse than the reference's own rounding
    assert spread_ok(row(SPREAD_EPS / 2, 0.0)) and not spread_ok(row(2 * SPREAD_EPS, 0.0))  # fp32 runs: the floor


def test_forward_bytes_counts_bf16_experts_as_experts():
    from llada.bench.forward import forward_bytes

    (bf16, cache, block), (fp8, fp8_cache, _) = _model_and_block(torch.bfloat16), _model_and_block(torch.bfloat16, True)
    a, b = forward_bytes(bf16, block, cache, 16), forward_bytes(fp8, block, fp8_cache, 16)
    assert a["non_expert_weights"] == b["non_expert_weights"]  # the same attention, norms, routers, shared experts
    cfg = bf16.config
    moe_layers = sum(hasattr(layer.mlp, "experts") for layer in bf16.layers)
    every_expert = moe_layers * cfg.num_experts * 3 * cfg.hidden_size * cfg.moe_intermediate_size * 2  # bf16 bytes
    share = a["experts_touched_per_layer"] / cfg.num_experts
    assert abs(a["routed_experts_touched"] - every_expert * share) <= every_expert * 0.06  # the share is rounded
    assert a["routed_experts_touched"] > b["routed_experts_touched"] > 0  # FP8: a byte a weight, plus scales
    assert a["total"] == a["non_expert_weights"] + a["routed_experts_touched"] + a["kv_cache"]
