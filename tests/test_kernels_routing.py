"""Routing kernels: sort-by-expert against its reference, the router kernels against `llada.model.Router`.

Compiled kernels on a CUDA device when there is one, Triton's CPU interpreter otherwise.
"""

import pytest
import torch

from llada.fast import kernels
from llada.config import ModelConfig
from llada.fast.kernels.reference import padded_rows, sort_by_expert
from llada.model import Router

needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


def random_ids(T, K, E, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])  # (T, K)


SORT_CASES = {  # name: (ids, E, block_m)
    "paper_example": (torch.tensor([[2, 0], [2, 1]]), 3, 16),
    "all_on_one_expert": (torch.full((70, 1), 4), 6, 16),  # one run of 70 spans two 64-pair chunks
    "decode_block_mini": (random_ids(32, 8, 256, 0), 256, 16),  # the real decode case: 256 pairs, 256 experts
    "one_token_tall_tiles": (random_ids(1, 8, 256, 1), 256, 64),
    "odd_experts_32": (random_ids(45, 3, 7, 2), 7, 32),
}


@needs_triton
@pytest.mark.parametrize("name", list(SORT_CASES))
def test_sort_by_expert_kernel_matches_reference(name):
    from llada.fast.kernels import routing

    ids, E, block_m = SORT_CASES[name]
    pairs, block_expert = routing.sort_by_expert(ids.to(DEVICE), E, block_m)
    ref_pairs, ref_block_expert = sort_by_expert(ids, E, block_m)
    assert torch.equal(block_expert.cpu(), ref_block_expert)
    used = int((ref_block_expert >= 0).sum()) * block_m  # rows of tiles labelled -1 are never read
    assert torch.equal(pairs.cpu()[:used], ref_pairs[:used]) and pairs.numel() == ref_pairs.numel()


def make_router(E, K, n_group, topk_group, H, seed):
    cfg = ModelConfig(vocab_size=11, hidden_size=H, num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1,
                      intermediate_size=8, moe_intermediate_size=8, num_experts=E, num_experts_per_tok=K,
                      n_group=n_group, topk_group=topk_group, routed_scaling_factor=2.5)
    g = torch.Generator().manual_seed(seed)
    router = Router(cfg)
    router.weight.data = torch.randn(E, H, generator=g)
    router.expert_bias.data = torch.randn(E, generator=g) * 0.1  # large enough to change some choices
    return router, torch.randn(9, H, generator=g)


ROUTER_CASES = {  # (E, K, n_group, topk_group, H); real: 256 experts, top-8, 4 of 8 groups, H 2048
    "mini_groups": (256, 8, 8, 4, 64),
    "odd_group_size": (6, 2, 2, 1, 96),  # groups of 3: padded to 4 in the kernel
    "one_group_top1": (8, 1, 1, 1, 40),
}


def route_on_device(router, h):
    ids, w = kernels.route(h.to(DEVICE), router.weight.to(DEVICE), router.expert_bias.to(DEVICE), router.top_k,
                           router.n_group, router.topk_group, router.scale)
    return ids.cpu(), w.cpu()


@needs_triton
@pytest.mark.parametrize("name", list(ROUTER_CASES))
def test_router_kernels_match_the_model_router(name):
    router, h = make_router(*ROUTER_CASES[name], seed=3)
    ids, w = route_on_device(router, h)
    ref_ids, ref_w = router(h)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert torch.equal(ids, ref_ids)  # same experts in the same order (fp32 logits: no near-ties here)
    assert torch.allclose(w, ref_w, rtol=1e-5, atol=1e-6)  # logits summed in another order: fp32 ulps


@needs_triton
@pytest.mark.gpu(reason="bf16 tensor-core logits need a GPU")
def test_router_kernels_bf16_inputs():
    router, h = make_router(256, 8, 8, 4, 2048, seed=4)
    router = router.to(torch.bfloat16)
    ids, w = route_on_device(router, h.bfloat16())
    ref_ids, ref_w = router.cuda()(h.bfloat16().cuda())
    assert (ids == ref_ids.cpu()).float().mean() > 0.99  # exact bf16 products, fp32 sums: rare near-tie flips
    assert torch.allclose(w.sum(1), ref_w.sum(1).cpu(), rtol=1e-4)


@needs_triton
def test_router_with_nan_input_keeps_ids_in_range():
    router, h = make_router(256, 8, 8, 4, 64, seed=5)
    h[2] = float("nan")
    ids, w = route_on_device(router, h)
    assert ((ids >= 0) & (ids < 256)).all()  # a NaN token must not send later kernels out of bounds
    assert torch.isnan(w[2]).all() and torch.isfinite(w[[0, 1, 3]]).all()


@needs_triton
def test_sort_by_expert_replayed_over_fewer_runs_relabels_every_tile():
    """The launch run again in the same buffers (as a CUDA graph replays it) with ids that need fewer tiles:
    the tiles the first ids used are labelled -1 again."""
    from llada.fast.kernels import routing
    from llada.fast.kernels.launch import run

    many, few = random_ids(32, 8, 256, 3), torch.full((32, 8), 7)
    few[:, 1:] = torch.arange(1, 8) + 100  # 8 experts of 32 pairs each
    ids = many.to(DEVICE)
    pairs, block_expert, launches = routing.plan_sort_by_expert(ids, 256, 16)
    run(launches)
    assert torch.equal(block_expert.cpu(), sort_by_expert(many, 256, 16)[1])
    ids.copy_(few)
    run(launches)
    ref_pairs, ref_block_expert = sort_by_expert(few, 256, 16)
    assert torch.equal(block_expert.cpu(), ref_block_expert) and (ref_block_expert >= 0).sum() == 16
    assert torch.equal(pairs.cpu()[:16 * 16], ref_pairs[:16 * 16])
