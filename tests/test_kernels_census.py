"""The kernels of one graphed decode forward, counted on CPU (`llada.kernels.census`): a regression fails.

A tiny model with the mini's layer structure (first layer dense, the rest MoE with a shared expert,
QK-norm, partial RoPE) in bf16 on the fast engine, its Triton kernels under the interpreter. Real
sizes (hidden 2048, 20 layers, 256 experts top-8) change no count: every op here runs at any size.
"""

import pytest
import torch

from llada import kernels
from llada.config import ModelConfig
from llada.engine import use_engine
from llada.kernels.census import decode_census
from llada.model import LLaDA2MoE

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
MINI_LAYERS = 20
MAX_MOE_LAYER = 26  # kernels of one MoE layer (attention + router + experts + shared expert); 76 before the fused norms
MAX_FORWARD = 542  # a 20-layer forward, counted on the tiny model and scaled; 1,546 before the fused norms


def mini_like() -> LLaDA2MoE:
    # odd tiny sizes; real: hidden 2048, 16 heads / 4 KV of 128, 256 experts top-8 in 4 of 8 groups, width 512
    cfg = ModelConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, intermediate_size=48, moe_intermediate_size=16,
                      num_experts=16, num_experts_per_tok=4, n_group=8, topk_group=4, first_k_dense_replace=1,
                      num_shared_experts=1, partial_rotary_factor=0.5, use_qk_norm=True,
                      moe_router_enable_expert_bias=True, routed_scaling_factor=2.5)
    model = LLaDA2MoE(cfg).init_weights(seed=0).to(DEVICE, torch.bfloat16)
    use_engine(model, "fast", check=False)
    return model


@pytest.fixture(scope="module")
def census():
    return decode_census(mini_like())


def test_decode_forward_never_waits_for_the_host(census):
    assert census.syncs == []


def test_moe_layers_cost_the_same_and_stay_under_the_bound(census):
    assert census.layers[1] == census.layers[2], census.layers  # a layer's count does not depend on its index
    assert census.layers[1] <= MAX_MOE_LAYER, census.ops.most_common(12)


def test_mini_forward_stays_under_the_bound(census):
    assert census.scaled(MINI_LAYERS) <= MAX_FORWARD, (census.prologue, census.layers, census.epilogue)
    assert census.triton >= 2 * 7  # the routed experts and the router run on Triton in both MoE layers
