"""The fused small ops of the static decode forward on Triton against their references, on poisoned inputs.

q/k/v into the KV cache (`qkv_rope_cache`), SwiGLU's silu * up, the window's attention mask, and the
MoE k-sum with the shared expert and the residual added. Inputs are views into buffers poisoned past
their ends and, under the interpreter, every load and store must hit an element of an argument
(`test_kernels_poison.bounds`). Odd sizes: D = 24 and I = 40 are not powers of two, R = 12 a partial
rotary width, 3 query heads on 1 KV head (mini: D 128, R 64, 16 query heads, 4 KV heads, I 512).
"""

import pytest
import torch

from llada import kernels
from llada.kernels import reference
from llada.norm_rope import rope_cos_sin, rope_table
from test_kernels_poison import DEVICE, POISONS, bounds, case, poisoned  # noqa: F401  (bounds: the autouse net)

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _randn(*shape, seed, dtype):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _step(dtype: torch.dtype) -> float:
    # fp32: the same ops, sums of the norm's mean in another order. bf16: up to three roundings, one step each
    # on a GPU and up to three under the interpreter (its fp32 -> bf16 cast truncates, 2^-5 relative)
    return (2 ** -5 if not torch.cuda.is_available() else 2 ** -7) if dtype == torch.bfloat16 else 1e-5


def _cache_case(dtype, S=11):
    qkv = _randn(2, 3, 5, 24, seed=1, dtype=dtype)  # (B, T, 3 q + 1 k + 1 v heads, D)
    wq, wk = _randn(24, seed=2, dtype=dtype), _randn(24, seed=3, dtype=dtype)
    k_cache, v_cache = _randn(2, 1, S, 24, seed=4, dtype=dtype), _randn(2, 1, S, 24, seed=5, dtype=dtype)
    return qkv, wq, wk, k_cache, v_cache


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_qkv_rope_cache(poison, dtype):
    dt = DTYPES[dtype]
    qkv, wq, wk, k_cache, v_cache = _cache_case(dt)
    cos, sin = rope_cos_sin(torch.arange(6, 9), 12, 6e5)  # a window at positions 6..8 past the cache
    start = torch.tensor(6, device=DEVICE)
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    ref_q = reference.qkv_rope_cache(qkv, wq, wk, EPS, cos, sin, ref_k, ref_v, start.cpu())
    k_tri, v_tri = poisoned(k_cache, poison), poisoned(v_cache, poison)
    q = kernels.qkv_rope_cache(poisoned(qkv, poison), poisoned(wq, poison), poisoned(wk, poison), EPS,
                               poisoned(cos, poison), poisoned(sin, poison), k_tri, v_tri, start, impl="triton")
    assert q.shape == (2, 3, 3, 24) and q.transpose(1, 2).is_contiguous()  # stored (B, T, nH, D) for attention
    assert torch.isfinite(q).all() and torch.isfinite(k_tri).all()
    step = _step(dt)
    torch.testing.assert_close(q.cpu(), ref_q, rtol=step, atol=step)
    torch.testing.assert_close(k_tri.cpu(), ref_k, rtol=step, atol=step)
    assert torch.equal(v_tri.cpu(), ref_v)  # v is copied: bit for bit
    untouched = [s for s in range(11) if not 6 <= s < 9]  # every other slot keeps its value
    assert torch.equal(k_tri[:, :, untouched].cpu(), k_cache[:, :, untouched])


def test_qkv_rope_cache_never_writes_past_the_cache():
    qkv, wq, wk, k_cache, v_cache = _cache_case(torch.float32, S=8)
    cos, sin = rope_cos_sin(torch.arange(6, 9), 12, 6e5)
    k_tri, v_tri = poisoned(k_cache, "nan"), poisoned(v_cache, "nan")
    kernels.qkv_rope_cache(qkv.to(DEVICE), wq.to(DEVICE), wk.to(DEVICE), EPS, cos.to(DEVICE), sin.to(DEVICE), k_tri,
                           v_tri, torch.tensor(6, device=DEVICE), impl="triton")  # slots 6, 7 and (dropped) 8
    k_buf = k_tri.as_strided((2, 1, 8 + 16, 24), k_tri.stride())  # the poisoned rows past the cache
    assert torch.isnan(k_buf[:, :, 8:]).all()  # still poison: nothing written at slot 8 or later
    assert torch.equal(v_tri[:, :, 6:8].cpu(), qkv[:, 0:2, 4:5].transpose(1, 2))  # tokens 0, 1 at slots 6, 7
    with pytest.raises(IndexError):  # the reference refuses the same write
        reference.qkv_rope_cache(qkv, wq, wk, EPS, cos, sin, k_cache, v_cache, torch.tensor(6))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_silu_mul_on_the_halves_of_one_product(poison, dtype):
    dt = DTYPES[dtype]
    both = _randn(7, 2 * 40, seed=6, dtype=dt) * 4  # (T, 2I): gate then up, as `FusedSwiGLU` makes them
    gate, up = poisoned(both, poison).chunk(2, dim=-1)  # strided rows
    out = kernels.silu_mul(gate, up, impl="triton")
    ref = reference.silu_mul(*both.chunk(2, dim=-1))
    assert out.shape == (7, 40) and torch.isfinite(out).all()
    step = 2 * _step(dt) if dt == torch.bfloat16 else 1e-6  # exp in another library: an ulp
    torch.testing.assert_close(out.cpu(), ref, rtol=step, atol=step)


@pytest.mark.parametrize("lo, hi, groups_hi", [(0, 8, 2), (8, 12, 2), (4, 12, 1), (12, 20, 5)])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_step_mask_is_the_window_rule(lo, hi, groups_hi, dtype):
    dt = DTYPES[dtype]
    bounds_t = torch.tensor([lo, hi, groups_hi], device=DEVICE)
    S = 300  # more than one BLOCK_S of key slots
    out = kernels.step_mask(bounds_t, hi - lo, S, 4, dt, impl="triton")
    ref = reference.step_mask(bounds_t.cpu(), hi - lo, S, 4, dt)
    assert out.dtype == dt and torch.equal(out.cpu(), ref)  # integer logic: exact
    assert (ref[:, :lo] == 0).all() and (ref[:, hi:] == float("-inf")).all()


@pytest.mark.parametrize("adds", [1, 2])
@pytest.mark.parametrize("poison", list(POISONS))
def test_moe_ksum_adds_the_shared_expert_and_the_residual(poison, adds):
    x, w13, w2, ids, weights = case()
    extra = [_randn(*x.shape, seed=10 + i, dtype=x.dtype) for i in range(adds)]  # (T, H) each
    out = kernels.fused_moe_bf16(poisoned(x, poison), poisoned(w13, poison), poisoned(w2, poison),
                                 poisoned(ids, poison), poisoned(weights, poison), impl="triton",
                                 adds=tuple(poisoned(t, poison) for t in extra))
    plain = reference.fused_moe_bf16(x, w13, w2, ids, weights)
    ref = reference.fused_moe_bf16(x, w13, w2, ids, weights, adds=tuple(extra))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)  # fp32 sums in another order
    assert not torch.allclose(ref, plain)  # the adds were added


def test_rope_table_reads_exactly_the_tables_of_the_positions():
    owner = torch.nn.Module()
    positions = torch.tensor([9, 10, 11, 12, 13])
    cos, sin = rope_table(owner, positions, 40, 12, 6e5)
    ref_cos, ref_sin = rope_cos_sin(positions, 12, 6e5)
    assert torch.equal(cos, ref_cos) and torch.equal(sin, ref_sin)  # bit for bit: the static path's tables
    kept = owner._rope_table
    rope_table(owner, positions, 24, 12, 6e5)
    assert owner._rope_table is kept  # made once, read by every later forward
