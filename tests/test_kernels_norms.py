"""RMSNorm (+ residual) and QK-norm + RoPE on Triton against their references, on poisoned inputs.

Inputs are views into buffers poisoned past their ends (NaN or huge values; `test_kernels_poison`),
and under the interpreter every load must hit an element of an argument (its `bounds` net). Odd
sizes: N = 40 and D = 24 are not powers of two (masked lanes), R = 12 is a partial rotary width
(mini: hidden 2048, head dim 128, R 64, 16 query heads and 4 KV heads).
"""

import pytest
import torch

from llada.fast import kernels
from llada.fast.kernels import reference
from llada.norm_rope import RMSNorm, apply_rope, rope_cos_sin
from test_kernels_poison import POISONS, bounds, poisoned  # noqa: F401  (bounds: the autouse address net)

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _randn(*shape, seed, dtype):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    # fp32: sums of the mean in another order. bf16: up to three roundings to bf16 (normed, times the weight,
    # rotated), each one step apart on a GPU (round to nearest) and up to three steps under the interpreter,
    # whose fp32 -> bf16 cast truncates (2^-5 relative); a missing mask reads poison: NaN or ~1e30
    step = (2 ** -5 if not torch.cuda.is_available() else 2 ** -7) if dtype == torch.bfloat16 else 1e-5
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a.cpu(), b, rtol=step, atol=step)


def test_references_are_the_models_own():
    x, w = _randn(5, 3, 24, seed=0, dtype=torch.bfloat16), _randn(24, seed=1, dtype=torch.bfloat16)
    norm = RMSNorm(24, EPS).to(torch.bfloat16)
    norm.weight.data.copy_(w)
    cos, sin = rope_cos_sin(torch.arange(5), 12, 1e4)
    assert torch.equal(reference.rms_norm(x, w, EPS), norm(x))
    rope = apply_rope(norm(x[None]).transpose(1, 2), cos, sin)
    assert torch.equal(reference.qk_norm_rope(x[None], w, EPS, cos, sin), rope)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_rms_norm(poison, dtype):
    dt = DTYPES[dtype]
    x, w = _randn(7, 40, seed=2, dtype=dt), _randn(40, seed=3, dtype=dt)
    out = kernels.rms_norm(poisoned(x, poison), poisoned(w, poison), EPS, impl="triton")
    _close(out, reference.rms_norm(x, w, EPS), dt)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_add_rms_norm(poison, dtype):
    dt = DTYPES[dtype]
    x, res, w = _randn(7, 40, seed=4, dtype=dt), _randn(7, 40, seed=5, dtype=dt), _randn(40, seed=6, dtype=dt)
    total, out = kernels.add_rms_norm(poisoned(x, poison), poisoned(res, poison), poisoned(w, poison), EPS,
                                      impl="triton")
    ref_total, ref_out = reference.add_rms_norm(x, res, w, EPS)
    if torch.cuda.is_available() or dt == torch.float32:
        assert torch.equal(total.cpu(), ref_total)  # one rounding of the same sum
    else:  # the interpreter's fp32 -> bf16 cast truncates: one step at most
        torch.testing.assert_close(total, ref_total, rtol=2 ** -7, atol=0)
    _close(out, ref_out, dt)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("poison", list(POISONS))
def test_qk_norm_rope(poison, dtype):
    dt = DTYPES[dtype]
    qkv = _randn(2, 3, 5, 24, seed=7, dtype=dt)  # (B, T, q + k + v heads, D): q is heads 0..2, as split
    w = _randn(24, seed=8, dtype=dt)
    cos, sin = rope_cos_sin(torch.arange(4, 7), 12, 6e5)  # positions of a window past the cache
    view = poisoned(qkv, poison)[:, :, :3]
    out = kernels.qk_norm_rope(view, poisoned(w, poison), EPS, poisoned(cos, poison), poisoned(sin, poison),
                               impl="triton")
    assert out.shape == (2, 3, 3, 24) and out.is_contiguous()
    _close(out, reference.qk_norm_rope(qkv[:, :, :3], w, EPS, cos, sin), dt)
