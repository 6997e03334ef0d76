"""Fused FP8 MoE: routing, Triton (under the CPU interpreter) against the PyTorch reference and fp32."""

import pytest
import torch

from llada import kernels
from llada.kernels.reference import rel_rmse
from llada.kernels.reference import padded_rows, sort_by_expert
from llada.model import Experts

needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")

# Triton vs reference: identical fp8 products, fp32 sums in another order; that can flip one rounding
# of the re-quantized intermediate (a 6-12% step on a rare element), hence not 1e-6.
TRITON_VS_REF = 1e-2
# fp8 vs fp32 experts: four e4m3 roundings on the path (x, w13, h, w2), ~3.6% rms each.
FP8_VS_FP32 = 0.12



def make_case(T, H, I, E, K, seed=0, ids=None):
    g = torch.Generator().manual_seed(seed)
    experts = Experts(E, H, I)
    experts.w13.data = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    experts.w2.data = torch.randn(E, H, I, generator=g) / I ** 0.5
    if ids is None:
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])  # (T, K) distinct per token
    weights = torch.rand(T, K, generator=g)
    x = torch.randn(T, H, generator=g)
    return x, experts, ids, weights


def run(impl, x, experts, ids, weights):
    w13, s13 = kernels.quantize_weight_fp8(experts.w13.data, impl=impl)
    w2, s2 = kernels.quantize_weight_fp8(experts.w2.data, impl=impl)
    return kernels.fused_moe_fp8(x, w13, s13, w2, s2, ids, weights, impl=impl)


def test_sort_by_expert_pads_each_run_to_the_tile():
    pairs, block_expert = sort_by_expert(torch.tensor([[2, 0], [2, 1]]), num_experts=3, block_m=2)
    assert pairs.tolist() == [1, 4, 3, 4, 0, 2, 4, 4]  # 4 = T*K marks padding
    assert block_expert.tolist() == [0, 1, 2, -1]


def test_sort_by_expert_skips_empty_experts():
    ids = torch.tensor([[5], [5], [0], [5]])  # experts 1..4 get nothing
    pairs, block_expert = sort_by_expert(ids, num_experts=6, block_m=16)
    assert pairs.numel() == padded_rows(4, 6, 16) == 64  # worst case: 4 non-empty experts, sizes fixed by shape
    assert block_expert.tolist() == [0, 5, -1, -1]
    assert pairs[:16].tolist() == [2] + [4] * 15 and pairs[16:20].tolist() == [0, 1, 3, 4]


CASES = {  # name: (T, H, I, E, K, ids); real sizes are H 2048, I 512, E 256, K 8
    "odd_sizes": (7, 96, 40, 6, 2, None),
    "one_token": (1, 64, 40, 6, 3, None),
    "all_on_one_expert": (5, 64, 40, 6, 1, torch.full((5, 1), 4)),
    "empty_experts": (6, 64, 40, 8, 2, torch.tensor([[0, 3], [3, 0], [0, 3], [3, 0], [0, 3], [3, 0]])),
    "top_k_equals_experts": (3, 64, 40, 4, 4, None),
    "two_k_steps_two_tiles": (4, 200, 136, 3, 2, None),  # H and 2I cross 128; tile row 128 mixes gate/up
    "taller_tiles": (40, 64, 24, 4, 2, None),  # 20 pairs per expert -> BLOCK_M 32
}


@needs_triton
@pytest.mark.parametrize("name", list(CASES))
def test_fused_moe_triton_matches_reference(name):
    T, H, I, E, K, ids = CASES[name]
    x, experts, ids, weights = make_case(T, H, I, E, K, ids=ids)
    out_tri = run("triton", x, experts, ids, weights)
    out_ref = run("torch", x, experts, ids, weights)
    assert out_tri.shape == (T, H) and out_tri.dtype == x.dtype
    assert rel_rmse(out_tri, out_ref) < TRITON_VS_REF


@pytest.mark.parametrize("name", list(CASES))
def test_fused_moe_reference_close_to_fp32_experts(name):
    T, H, I, E, K, ids = CASES[name]
    x, experts, ids, weights = make_case(T, H, I, E, K, seed=1, ids=ids)
    assert rel_rmse(run("torch", x, experts, ids, weights), experts(x, ids, weights)) < FP8_VS_FP32


def test_fused_moe_keeps_activation_dtype_and_handles_no_tokens():
    x, experts, ids, weights = make_case(3, 64, 40, 4, 2)
    assert run("torch", x.bfloat16(), experts, ids, weights).dtype == torch.bfloat16
    empty = run("torch", x[:0], experts, ids[:0], weights[:0])
    assert empty.shape == (0, 64)


@needs_triton
def test_fused_moe_triton_no_tokens():
    x, experts, ids, weights = make_case(3, 64, 40, 4, 2)
    assert run("triton", x[:0], experts, ids[:0], weights[:0]).shape == (0, 64)


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_fp8_linear(impl):
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(72, 200, generator=g), torch.randn(2, 5, 200, generator=g)  # N, K not multiples of 128
    q, s = kernels.quantize_weight_fp8(w, impl=impl)
    y = kernels.fp8_linear(x, q, s, impl=impl)
    assert y.shape == (2, 5, 72)
    assert rel_rmse(y, x @ w.T) < 0.07  # two e4m3 roundings (x, w), ~3.6% rms each
    assert rel_rmse(y, kernels.fp8_linear(x, q, s, impl="torch")) < 1e-5  # no re-quantized intermediate
