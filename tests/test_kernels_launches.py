"""How many kernels one MoE layer launches, and that none of them waits for the host.

Counted with `llada.fast.kernels.launch.count_launches` (Triton launches, ATen ops that run a kernel,
host synchronisations apart) on CPU under Triton's interpreter or compiled on CUDA; on CUDA the
profiler's own count of device kernels is checked too. A new fill, cast or sort in the routed path
raises the count and fails here.
"""

import pytest
import torch

from llada.fast import kernels
from llada.config import ModelConfig
from llada.fast.kernels.launch import count_launches
from llada.model import MoE
from llada.fast.quantize import FP8Experts, FusedRouter

needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ROUTED_LAUNCHES = ["_route_logits_kernel", "_route_select_kernel", "_align_kernel", "_act_kernel", "_up_kernel",
                   "_silu_kernel", "_down_kernel", "_ksum_kernel"]
# at decode sizes: router logits over expert tiles, top-k, sort, quantize x, gate/up, SiLU·mul + FP8, down, k-sum
# bf16 experts without split-K: nothing to quantize, SiLU·mul in the gate/up GEMM's epilogue
BF16_LAUNCHES = [n for n in ROUTED_LAUNCHES if n not in ("_act_kernel", "_silu_kernel")]


def moe_layer(fused: bool) -> MoE:
    # odd sizes; real: hidden 2048, 256 experts top-8 in 4 of 8 groups, width 512, one shared expert
    cfg = ModelConfig(vocab_size=11, hidden_size=96, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=8, moe_intermediate_size=40, num_experts=6, num_experts_per_tok=2, n_group=2,
                      topk_group=1, num_shared_experts=1, routed_scaling_factor=2.5)
    moe = MoE(cfg)
    g = torch.Generator().manual_seed(0)
    for p in moe.parameters():
        p.data = torch.randn(p.shape, generator=g) * 0.1
    moe = moe.to(DEVICE)
    if fused:
        moe.experts, moe.gate = FP8Experts.from_experts(moe.experts, "triton"), FusedRouter(moe.gate)
    return moe


def routed(moe: MoE, h: torch.Tensor) -> torch.Tensor:
    ids, weights = moe.gate(h)
    return moe.experts(h, ids, weights)


@needs_triton
def test_routed_moe_is_eight_kernels_and_no_sync():
    moe, h = moe_layer(fused=True), torch.randn(7, 96, device=DEVICE)
    with torch.no_grad(), count_launches() as count:
        routed(moe, h)
    assert count.triton == ROUTED_LAUNCHES
    assert count.aten == [] and count.syncs == []  # no fills, casts or copies between the kernels


@needs_triton
def test_many_tokens_route_in_one_launch():
    from llada.fast.kernels.router import SPLIT_MAX_T

    moe, h = moe_layer(fused=True), torch.randn(SPLIT_MAX_T + 1, 96, device=DEVICE)
    with torch.no_grad(), count_launches() as count:
        moe.gate(h)
    assert count.triton == ["_route_kernel"] and count.aten == [] and count.syncs == []


@needs_triton
def test_whole_moe_layer_adds_only_the_shared_expert():
    moe, h = moe_layer(fused=True), torch.randn(1, 7, 96, device=DEVICE)
    with torch.no_grad(), count_launches() as count:
        moe(h)
    assert count.triton == ROUTED_LAUNCHES
    assert sorted(count.aten) == ["add", "mm", "mm", "mm", "mul", "silu"]  # shared SwiGLU, then routed + shared
    assert count.total == 14 and count.syncs == []


def test_reference_layer_syncs_and_launches_many():
    moe, h = moe_layer(fused=False), torch.randn(1, 7, 96, device=DEVICE)
    with torch.no_grad(), count_launches() as count:
        moe(h)
    assert count.triton == [] and "bincount" in count.syncs  # the loop over experts needs their counts on the host
    assert len(count.aten) > 3 * 13  # 3 GEMM-ish ops per touched expert (6 here) on top of ~20 for routing


@needs_triton
def test_bf16_routed_moe_is_six_kernels_and_no_sync():
    from llada.fast.engine import FusedExperts

    moe, h = moe_layer(fused=False), torch.randn(7, 96, device=DEVICE)
    moe.experts, moe.gate = FusedExperts(moe.experts), FusedRouter(moe.gate)
    with torch.no_grad(), count_launches() as count:
        routed(moe, h)
    assert count.triton == BF16_LAUNCHES
    assert count.aten == [] and count.syncs == []


@needs_triton
def test_bf16_moe_layer_runs_its_shared_expert_in_the_same_six_kernels():
    from llada.fast.layers import FusedExperts, FusedMoE
    from llada.fast.kernels.fused_norm import FusedSwiGLU

    moe, h = moe_layer(fused=False), torch.randn(1, 7, 96, device=DEVICE)
    moe.experts, moe.gate, moe.shared_experts = FusedExperts(moe.experts), FusedRouter(moe.gate), \
        FusedSwiGLU(moe.shared_experts)
    assert FusedMoE.supports(moe)
    fused = FusedMoE(moe)
    with torch.no_grad(), count_launches() as count:
        out = fused(h, residual=h)
    assert count.triton == BF16_LAUNCHES and count.aten == [] and count.syncs == []  # no cuBLAS product, no add
    with torch.no_grad():
        ref = fused.plain()(h, residual=h)  # the shared expert's own products, then the k-sum's adds
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)  # fp32: h is not rounded between the products


SYNCS = {  # what a forward must not do inside a CUDA graph, and the name the counter gives it
    "item": (lambda x: x[0].item(), "item"),
    "tolist": (lambda x: x.tolist(), "tolist"),
    "cpu": (lambda x: x.cpu(), "cpu"),
    "to_cpu": (lambda x: x.to("cpu"), "to(cpu)"),
    "to_cpu_keyword": (lambda x: x.to(device=torch.device("cpu"), dtype=torch.float64), "to(cpu)"),
    "numpy": (lambda x: x.numpy(), "numpy"),
    "python_branch": (lambda x: 1 if x[0] > 0 else 0, "bool"),
    "int": (lambda x: int(x[1]), "int"),
    "nonzero": (lambda x: x.nonzero(), "nonzero"),
    "unique": (lambda x: x.unique(), "_unique2"),
    "bool_mask_read": (lambda x: x[x > 0], "index[bool mask]"),
    "bool_mask_write": (lambda x: x.__setitem__(x > 0, 0.0), "index_put_[bool mask]"),
    "bincount": (lambda x: torch.bincount(x.abs().long()), "bincount"),
}


@pytest.mark.parametrize("name", list(SYNCS))
def test_every_host_sync_is_seen_even_on_cpu(name):
    op, expected = SYNCS[name]
    x = torch.randn(6)
    with count_launches() as count:
        op(x)
    assert expected in count.syncs, (count.aten, count.syncs)
    assert expected not in count.aten


def test_device_side_ops_are_not_syncs():
    x = torch.randn(6)
    with count_launches() as count:
        x.to(torch.float64), x[torch.tensor([1, 2])], torch.where(x > 0, x, -x), x.sum()
    assert count.syncs == [] and count.aten == ["_to_copy", "index", "gt", "neg", "where", "sum"]


def test_counter_ignores_views_and_counts_launch_records():
    x = torch.randn(4, 6)
    with count_launches() as count:
        x.view(6, 4).t()[0]  # views: no kernel
        torch.empty(3)  # allocation: no kernel
        (x + 1).sum()
    assert count.aten == ["add", "sum"] and count.triton == []


@pytest.mark.gpu(reason="the CUDA profiler counts device kernels on a GPU")
@needs_triton
def test_profiler_sees_the_same_routed_kernels():
    moe, h = moe_layer(fused=True), torch.randn(7, 96, device=DEVICE)
    with torch.no_grad():
        routed(moe, h)  # compile first
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            routed(moe, h)
            torch.cuda.synchronize()
    kernels_run = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    assert len(kernels_run) == len(ROUTED_LAUNCHES), [e.name for e in kernels_run]
