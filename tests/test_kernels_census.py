"""The kernels of one graphed decode forward, counted on CPU (`llada.bench.census`): a regression fails.

A tiny model with the mini's layer structure (first layer dense, the rest MoE with a shared expert,
QK-norm, partial RoPE) in bf16 on the fast engine, its Triton kernels under the interpreter. Real
sizes (hidden 2048, 20 layers, 256 experts top-8) change no count: every op here runs at any size.
"""

import pytest

from llada.fast import kernels
from llada.fast.engine import use_engine
from llada.bench.census import MINI_LAYERS, decode_census, mini_like

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
# kernels of one MoE layer (attention + router + experts + shared expert): 76 before the fused norms, 26 with
# them, 16 with q/k/v into the cache in one launch, the shared expert's silu * up fused and its gate and up
# one product, and the k-sum adding the shared expert and the residual; 10 with the shared expert run as one
# more expert of the grouped GEMMs, the router (logits, top-k) after the post-attention add + norm in one
# launch, and silu * up in the gate/up GEMM's epilogue; 9 with the next layer's input norm in the k-sum; 10 with
# the router's logits spread over expert tiles at decode sizes, its top-k a launch of its own (`kernels/router.py`)
MAX_MOE_LAYER = 10
MAX_FORWARD = 208  # a 20-layer forward, counted on the tiny model and scaled; 1,546 -> 542 -> 322 -> 208 -> 189
# -> 208 (the router's second launch in 19 MoE layers)


@pytest.fixture(scope="module")
def census():
    return decode_census(mini_like())


def test_decode_forward_never_waits_for_the_host(census):
    assert census.syncs == []


def test_moe_layers_cost_the_same_and_stay_under_the_bound(census):
    # the first MoE layer makes its own input norm (a dense layer is before it); a later one takes it from the
    # k-sum of the layer before, so its count does not depend on its index
    assert census.layers[1] == census.layers[2] + 1, census.layers
    assert census.layers[2] <= MAX_MOE_LAYER, census.ops.most_common(12)


def test_mini_forward_stays_under_the_bound(census):
    assert census.scaled(MINI_LAYERS) <= MAX_FORWARD, (census.prologue, census.layers, census.epilogue)
    assert census.triton >= 2 * 7  # the routed experts and the router run on Triton in both MoE layers


def test_the_small_ops_are_fused(census):
    # per layer one launch for q, k, v into the cache; silu * up of the dense FFN in one launch, of the MoE
    # layers in the gate/up GEMM; the mask in one launch; what the fused kernels replace (the cache's
    # index_copy_, the mask's comparisons, the residual adds and the shared expert's products of MoE layers,
    # the post-attention norm of MoE layers) is gone
    layers, moe = len(census.layers), len(census.layers) - census.dense_layers
    assert census.ops["_qkv_cache_kernel"] == layers and census.ops["_silu_mul_kernel"] == census.dense_layers
    assert census.ops["_route_logits_kernel"] == census.ops["_route_select_kernel"] == census.ops["_up_kernel"] == moe
    assert census.ops["_route_kernel"] == census.ops["_silu_kernel"] == 0
    # the dense layer's two, the first MoE layer's input norm; the rest (and the final norm) made by k-sums
    assert census.ops["_rmsnorm_kernel"] == 2 * census.dense_layers + 1, census.ops
    # qkv and dense per layer; the dense FFN's gate|up and down; lm_head
    assert census.ops["mm"] == 2 * layers + 2 * census.dense_layers + 1, census.ops
    assert census.ops["_step_mask_kernel"] == 1 and census.ops["index_copy_"] == 0, census.ops
    assert census.ops["add"] <= 1 + census.dense_layers and census.ops["clone"] == 0, census.ops


def test_census_counts_what_the_forward_launches():
    # the count is of a real forward: a model on the reference engine launches many more kernels
    model = mini_like()
    use_engine(model, "reference")
    reference = decode_census(model)
    assert reference.total > decode_census(mini_like()).total + 30, reference.ops.most_common(8)
