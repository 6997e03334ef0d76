"""Out-of-bounds reads fail loudly: every kernel input is a view into a buffer poisoned past its ends.

Three nets. Under Triton's CPU interpreter every unmasked load and store is also checked address by
address against the elements of the launch's tensor arguments (views, not their buffers): a read of
a poisoned pad fails even where the value read would be multiplied by a masked zero (`bounds`). And
memory no kernel wrote reads as NaN (`unwritten_reads_as_poison`): a read past the columns an earlier
launch wrote, but inside its buffer (the down GEMM's h past I), passes the address check.

A tile that reads one element past a row, a column or an expert without its mask usually goes
unnoticed: the element read is a neighbour's value (or zero-padded garbage) and it meets a masked
zero on the other side of the dot product. Here each input tensor lives inside a larger buffer
whose extra rows, columns and experts hold poison: NaN (0 x NaN = NaN, so a masked partner does not
hide it) or a huge finite value (which NaN-dropping max reductions would otherwise let through),
and for index tensors an id far out of range. The kernels run under Triton's interpreter on CPU
(compiled on a GPU) at tiny odd shapes with partial 128-tiles, and their outputs must match the
PyTorch reference computed on clean, contiguous tensors. A missing mask or a wrong stride turns the
output non-finite or wrong here (docs/gpu.md, "Tests that catch GPU-only faults on a CPU": a planted missing mask is
caught).
"""

import numpy as np
import pytest
import torch
from fp8_sums import same_codes_tolerance

from llada.fast import kernels
from llada.fast.kernels import reference
from llada.fast.kernels.reference import FP8, rel_rmse

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
POISONS = {"nan": float("nan"), "huge": 1e30}
FP8_POISON = {"nan": 0x7F, "huge": 0x7E}  # e4m3fn NaN, and 448 (its largest finite value)
PAD = 128  # one whole K step past the end of every row: an unmasked partial step reads only poison


@pytest.fixture(autouse=True)
def bounds(monkeypatch):
    """Fail any interpreted load or store of an address that is not an element of one of the launch's
    tensor arguments (each view's own elements: the poisoned pads around them do not count)."""
    if torch.cuda.is_available():
        yield  # compiled kernels: the poison values are the only net
        return
    from triton.runtime import interpreter as interp

    valid = {"addresses": np.empty(0, dtype=np.uint64)}
    init_args = interp.GridExecutor._init_args_hst

    def init_args_checked(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        tensors = [a for a in [*args_hst, *kwargs_hst.values()] if isinstance(a, torch.Tensor)]
        addresses = np.concatenate([element_addresses(t) for t in tensors] or [[]])
        valid["addresses"] = np.unique(addresses).astype(np.uint64)
        return args_hst, kwargs_hst

    def checked(access):
        def run(self, ptrs, *rest):
            mask = rest[1] if access.__name__ == "create_masked_store" else rest[0]
            wanted = ptrs.data[mask.data.astype(bool)].astype(np.uint64).ravel()
            known = valid["addresses"]
            at = np.clip(np.searchsorted(known, wanted), 0, max(len(known) - 1, 0))
            outside = wanted[known[at] != wanted] if len(known) else wanted
            assert not len(outside), f"{access.__name__}: {len(outside)} address(es) outside every argument"
            return access(self, ptrs, *rest)
        return run

    monkeypatch.setattr(interp.GridExecutor, "_init_args_hst", init_args_checked)
    monkeypatch.setattr(interp.InterpreterBuilder, "create_masked_load",
                        checked(interp.InterpreterBuilder.create_masked_load))
    monkeypatch.setattr(interp.InterpreterBuilder, "create_masked_store",
                        checked(interp.InterpreterBuilder.create_masked_store))
    yield


@pytest.fixture(autouse=True)
def unwritten_reads_as_poison():
    """Memory no kernel wrote (`torch.empty`: the intermediate buffers between launches) reads as NaN, or as
    the largest integer: a kernel that reads past what the launch before it wrote (inside the same buffer,
    where the address check sees nothing wrong) poisons its output."""
    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # with it, torch.empty fills (fill_uninitialized_memory)
    yield
    torch.use_deterministic_algorithms(was[0], warn_only=was[1])


def element_addresses(t: torch.Tensor) -> np.ndarray:
    """The byte address of every element of the view `t`."""
    offsets = np.zeros((), dtype=np.int64)
    for size, stride in zip(t.shape, t.stride()):
        offsets = offsets[..., None] + np.arange(size, dtype=np.int64) * stride
    return (t.data_ptr() + offsets.ravel() * t.element_size()).astype(np.uint64)


def poisoned(t: torch.Tensor, poison: str, pad_rows: int = 16) -> torch.Tensor:
    """`t` as a view into a buffer `pad_rows` larger in every leading dim and PAD larger in the last."""
    shape = [n + pad_rows for n in t.shape[:-1]] + [t.shape[-1] + PAD]
    if t.dtype == FP8:
        buf = torch.full(shape, FP8_POISON[poison], dtype=torch.uint8, device=DEVICE).view(FP8)
    elif t.dtype.is_floating_point:
        buf = torch.full(shape, POISONS[poison], dtype=t.dtype, device=DEVICE)
    else:
        buf = torch.full(shape, 1 << 20, dtype=t.dtype, device=DEVICE)  # an id / index far out of range
    view = buf[tuple(slice(0, n) for n in t.shape)]
    view.copy_(t.to(DEVICE))
    return view


def case(T=5, H=200, I=40, E=6, K=2, seed=0):
    """x (T, H), w13 (E, 2I, H), w2 (E, H, I), ids/weights (T, K); H and 2I cross a 128 boundary."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    w13 = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    w2 = torch.randn(E, H, I, generator=g) / I ** 0.5
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    weights = torch.rand(T, K, generator=g)
    return x, w13, w2, ids, weights


@pytest.mark.parametrize("poison", list(POISONS))
def test_activation_quantizer(poison):
    x = torch.randn(5, 200, generator=torch.Generator().manual_seed(1))
    q, s = kernels.quantize_act_fp8(poisoned(x, poison), impl="triton")
    q_ref, s_ref = reference.quantize_act_fp8(x)
    assert torch.equal(s.cpu(), s_ref) and torch.equal(q.cpu().float(), q_ref.float())


@pytest.mark.parametrize("poison", list(POISONS))
def test_weight_quantizer(poison):
    w = torch.randn(2, 72, 200, generator=torch.Generator().manual_seed(2))
    q, s = kernels.quantize_weight_fp8(poisoned(w, poison), impl="triton")
    q_ref, s_ref = reference.quantize_weight_fp8(w)
    assert torch.equal(s.cpu(), s_ref) and torch.equal(q.cpu().float(), q_ref.float())


@pytest.mark.parametrize("block_m", [16, 32])
def test_sort_by_expert(block_m):
    from llada.fast.kernels import routing

    ids = case(T=7, E=6, K=3)[3]
    pairs, block_expert = routing.sort_by_expert(poisoned(ids, "nan"), 6, block_m)
    ref_pairs, ref_block_expert = reference.sort_by_expert(ids, 6, block_m)
    used = ref_block_expert >= 0  # rows of tiles past the last run are never written (nor read)
    rows = used.repeat_interleave(block_m)
    assert torch.equal(block_expert.cpu(), ref_block_expert)
    assert torch.equal(pairs.cpu()[rows], ref_pairs[rows])


@pytest.mark.parametrize("poison", list(POISONS))
def test_router(poison):
    from llada.config import ModelConfig
    from llada.model import Router

    cfg = ModelConfig(vocab_size=11, hidden_size=200, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, intermediate_size=8, moe_intermediate_size=8, num_experts=12,
                      num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=2.5)
    router = Router(cfg)
    g = torch.Generator().manual_seed(3)
    router.weight.data = torch.randn(12, 200, generator=g) * 0.1
    router.expert_bias.data = torch.randn(12, generator=g) * 0.01
    h = torch.randn(5, 200, generator=g)
    bias = poisoned(router.expert_bias.data[None], poison)[0]  # (E,) with poison after its end
    ids, w = kernels.route(poisoned(h, poison), poisoned(router.weight.data, poison), bias, 3, 4, 2, 2.5)
    ref_ids, ref_w = router(h)
    assert torch.equal(ids.cpu().sort(-1).values, ref_ids.sort(-1).values)
    assert torch.allclose(w.cpu().sort(-1).values, ref_w.sort(-1).values, atol=1e-5)


CONFIGS = {  # the tile paths: swapped 16 with split-K, swapped 32, plain 64
    "m16_split2": dict(block_m=16, up_split_k=2),
    "m32_n128": dict(block_m=32, up_n=128, down_n=128),
    "m64_plain": dict(block_m=64, swap_ab=False, up_n=128, down_n=128, up_stages=3, down_stages=3),
}


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("tiles", list(CONFIGS))
def test_fused_moe_fp8(poison, tiles):
    from llada.fast.kernels import fused_moe
    from llada.fast.kernels.configs import MoEConfig

    x, w13, w2, ids, weights = case(seed=4)
    q13, s13 = reference.quantize_weight_fp8(w13)
    q2, s2 = reference.quantize_weight_fp8(w2)
    args = [poisoned(t, poison) for t in (x, q13, s13, q2, s2, ids, weights)]
    out = fused_moe.fused_moe_fp8(*args, config=MoEConfig(**CONFIGS[tiles])).cpu()
    ref = reference.fused_moe_fp8(x, q13, s13, q2, s2, ids, weights)
    assert torch.isfinite(out).all(), "a poisoned element was read"
    assert rel_rmse(out, ref) < 1e-2  # fp32 sum order only (see test_kernels_moe)


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("tiles", ["m16_split2", "m64_plain"])
def test_fused_moe_bf16_weights(poison, tiles):
    from llada.fast.kernels import fused_moe
    from llada.fast.kernels.configs import MoEConfig

    x, w13, w2, ids, weights = case(seed=5)
    args = [poisoned(t, poison) for t in (x, w13, w2, ids, weights)]
    out = fused_moe.fused_moe_bf16(*args, config=MoEConfig(**CONFIGS[tiles])).cpu()
    ref = reference.fused_moe_bf16(x, w13, w2, ids, weights)
    assert torch.isfinite(out).all(), "a poisoned element was read"
    assert rel_rmse(out, ref) < 1e-4  # fp32 weights here: fp32 sums in another order only


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("M", [3, 24, 70])  # the linear's three tile heights
def test_fp8_linear(poison, M):
    g = torch.Generator().manual_seed(M)
    w, x = torch.randn(72, 200, generator=g), torch.randn(M, 200, generator=g)
    q, s = reference.quantize_weight_fp8(w)
    y = kernels.fp8_linear(poisoned(x, poison), poisoned(q, poison), poisoned(s, poison), impl="triton").cpu()
    assert torch.isfinite(y).all(), "a poisoned element was read"
    assert rel_rmse(y, reference.fp8_linear(x, q, s)) < same_codes_tolerance(DEVICE)  # see fp8_sums.py


@pytest.mark.skipif(torch.cuda.is_available(), reason="the address check is the interpreter's")
def test_the_address_check_catches_a_read_one_past_the_end():
    import triton
    import triton.language as tl

    @triton.jit
    def shifted_copy(x_ptr, y_ptr, N, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        i = tl.arange(0, BLOCK)
        if MASKED:
            v = tl.load(x_ptr + i + 1, mask=i + 1 < N, other=0.0)
        else:
            v = tl.load(x_ptr + i + 1, mask=i < N, other=0.0)  # the last lane reads x[N]: one past the end
        tl.store(y_ptr + i, v, mask=i < N)

    x, y = poisoned(torch.arange(7.0), "huge"), torch.zeros(7)  # x[7] exists in memory: the poisoned pad
    shifted_copy[(1,)](x, y, 7, BLOCK=8, MASKED=True)
    assert y.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0]
    with pytest.raises(Exception, match="outside every argument"):
        shifted_copy[(1,)](x, y, 7, BLOCK=8, MASKED=False)
