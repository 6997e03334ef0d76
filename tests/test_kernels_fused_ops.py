"""The fused small ops of the static decode forward on Triton against their references, on poisoned inputs.

q/k/v into the KV cache (`qkv_rope_cache`), SwiGLU's silu * up, the window's attention mask, and the
MoE k-sum with the shared expert and the residual added. Inputs are views into buffers poisoned past
their ends and, under the interpreter, every load and store must hit an element of an argument
(`test_kernels_poison.bounds`). Odd sizes: D = 24 and I = 40 are not powers of two, R = 12 a partial
rotary width, 3 query heads on 1 KV head (mini: D 128, R 64, 16 query heads, 4 KV heads, I 512).
"""

import pytest
import torch

from llada.fast import kernels
from llada.fast.kernels import reference
from llada.norm_rope import rope_cos_sin, rope_table
from test_kernels_poison import (DEVICE, POISONS, bounds, case, poisoned,  # noqa: F401  (the autouse nets)
                                 unwritten_reads_as_poison)

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


def _shared_case(T, dtype):
    """The routed case plus a shared expert (2I, H), (H, I) and its column in ids / weights (id E, weight 1)."""
    x, w13, w2, ids, weights = case(T=T)
    g = torch.Generator().manual_seed(21)
    s13, s2 = torch.randn(w13.shape[1:], generator=g) / 200 ** 0.5, torch.randn(w2.shape[1:], generator=g) / 40 ** 0.5
    ids1 = torch.cat([ids, torch.full((T, 1), w13.shape[0])], dim=1)  # (T, K + 1)
    weights1 = torch.cat([weights, torch.ones(T, 1)], dim=1)
    return [t.to(dtype) for t in (x, w13, w2, s13, s2)] + [ids1, weights1]


def _own_rows(t, poison):
    """t (N, K) as a view whose row stride (3K) is neither the stacked experts' nor any other argument's,
    poison between its rows: the shared expert's weights read with another tensor's strides fail."""
    buf = torch.full((t.shape[0], 3 * t.shape[1]), POISONS[poison], dtype=t.dtype)
    buf[:, :t.shape[1]] = t
    return buf.to(DEVICE)[:, :t.shape[1]]


@pytest.mark.parametrize("split", [1, 2])  # 1: silu * up in the gate/up epilogue; 2: the SiLU pass sums slices
@pytest.mark.parametrize("T", [1, 5])
@pytest.mark.parametrize("poison", list(POISONS))
def test_moe_runs_the_shared_expert_as_one_more_expert(poison, T, split):
    from llada.fast.kernels.configs import MoEConfig
    from llada.fast.kernels.fused_moe import fused_moe_bf16

    x, w13, w2, s13, s2, ids, weights = _shared_case(T, torch.float32)
    residual = _randn(T, 200, seed=22, dtype=torch.float32)
    out = fused_moe_bf16(*(poisoned(t, poison) for t in (x, w13, w2, ids, weights)), config=MoEConfig(up_split_k=split),
                         adds=(poisoned(residual, poison),), shared=(_own_rows(s13, poison), _own_rows(s2, poison)))
    ref = reference.fused_moe_bf16(x, w13, w2, ids, weights, adds=(residual,), shared=(s13, s2))
    routed = reference.fused_moe_bf16(x, w13, w2, ids[:, :-1], weights[:, :-1])
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)  # fp32 sums in another order
    own = reference.silu_mul(*(x @ s13.T).chunk(2, dim=-1)) @ s2.T  # the shared expert as `SwiGLU` runs it
    torch.testing.assert_close(ref, routed + own + residual, rtol=1e-5, atol=1e-5)


def test_bf16_shared_expert_is_rounded_before_it_is_added():
    x, w13, w2, s13, s2, ids, weights = _shared_case(5, torch.bfloat16)
    out = kernels.fused_moe_bf16(*(t.to(DEVICE) for t in (x, w13, w2, ids, weights)), impl="triton",
                                 shared=(s13.to(DEVICE), s2.to(DEVICE)))
    ref = reference.fused_moe_bf16(x, w13, w2, ids, weights, shared=(s13, s2))
    # routed sum, shared output and their sum each rounded to bf16 once: an ulp of each on the interpreter
    torch.testing.assert_close(out.cpu(), ref, rtol=3 * _step(torch.bfloat16), atol=3 * _step(torch.bfloat16))


def _router_case(dtype, T=7, H=200):
    # odd sizes: 12 experts in 4 groups of 3 (padded to 4), top-3 in 2 groups; real: 256 in 8 of 32, top-8 in 4
    g = torch.Generator().manual_seed(23)
    weight, bias = torch.randn(12, H, generator=g) * 0.1, torch.randn(12, generator=g) * 0.01
    h, residual = torch.randn(T, H, generator=g), torch.randn(T, H, generator=g)
    norm_w = 1 + 0.1 * torch.randn(H, generator=g)
    return [t.to(dtype) for t in (h, residual, norm_w, weight)] + [bias]


@pytest.mark.parametrize("poison", list(POISONS))
def test_router_writes_the_shared_experts_column(poison):
    h, _, _, weight, bias = _router_case(torch.float32)
    ids, w = kernels.route(poisoned(h, poison), poisoned(weight, poison), poisoned(bias[None], poison)[0], 3, 4, 2,
                           2.5, shared=True)
    ref_ids, ref_w = reference.route(h, weight, bias, 3, 4, 2, 2.5, shared=True)
    assert ids.shape == (7, 4) and (ids[:, -1] == 12).all() and (w[:, -1] == 1).all()
    assert torch.equal(ids.cpu(), ref_ids)  # fp32 logits, no near-ties here: the same experts in the same order
    torch.testing.assert_close(w.cpu(), ref_w, rtol=1e-5, atol=1e-6)  # logits summed in another order


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_route_add_norm_is_the_add_the_norm_and_the_router(poison, dtype):
    dt = DTYPES[dtype]
    h, residual, norm_w, weight, bias = _router_case(dt)
    vector = lambda v: poisoned(v[None], poison)[0]  # (N,) with poison after its end  # noqa: E731
    s, x, ids, w = kernels.route_add_norm(poisoned(h, poison), poisoned(residual, poison), vector(norm_w), EPS,
                                          poisoned(weight, poison), vector(bias), 3, 4, 2, 2.5, shared=True)
    ref_s, ref_x, ref_ids, ref_w = reference.route_add_norm(h, residual, norm_w, EPS, weight, bias, 3, 4, 2, 2.5,
                                                            shared=True)
    assert s.dtype == x.dtype == dt and torch.isfinite(x).all()
    step = _step(dt)
    torch.testing.assert_close(s.cpu(), ref_s, rtol=step, atol=step)
    torch.testing.assert_close(x.cpu(), ref_x, rtol=step, atol=step)
    if dt == torch.float32:  # bf16: a rounding of x may flip a near-tie between two experts
        assert torch.equal(ids.cpu(), ref_ids)
        torch.testing.assert_close(w.cpu(), ref_w, rtol=1e-5, atol=1e-6)
    assert ((ids >= 0) & (ids <= 12)).all() and (ids[:, -1] == 12).all()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_moe_ksum_makes_the_next_sublayers_norm(poison, dtype):
    dt = DTYPES[dtype]
    x, w13, w2, s13, s2, ids, weights = _shared_case(5, dt)
    residual, norm_w = _randn(5, 200, seed=24, dtype=dt), 1 + 0.1 * _randn(200, seed=25, dtype=torch.float32)
    out, normed = kernels.fused_moe_bf16(*(poisoned(t, poison) for t in (x, w13, w2, ids, weights)), impl="triton",
                                         adds=(poisoned(residual, poison),),
                                         shared=(poisoned(s13, poison), poisoned(s2, poison)),
                                         norm=(poisoned(norm_w.to(dt)[None], poison)[0], EPS))
    ref, ref_normed = reference.fused_moe_bf16(x, w13, w2, ids, weights, adds=(residual,), shared=(s13, s2),
                                               norm=(norm_w.to(dt), EPS))
    assert torch.isfinite(normed).all() and normed.dtype == dt
    # the norm of the kernel's own output, rounded as `reference.rms_norm` rounds: the same ops on the same row
    own = reference.rms_norm(out.cpu(), norm_w.to(dt), EPS)
    step = _step(dt)
    torch.testing.assert_close(normed.cpu(), own, rtol=step, atol=step)
    if dt == torch.float32:  # bf16: the output itself may differ by the ulps of the test above
        torch.testing.assert_close(normed.cpu(), ref_normed, rtol=1e-5, atol=1e-5)
