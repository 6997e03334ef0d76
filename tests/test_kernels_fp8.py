"""FP8 quantization kernels: Triton against the PyTorch reference, NaN/Inf propagation.

The Triton tests run the compiled kernels on a CUDA device when there is one, and Triton's CPU
interpreter otherwise (tests/conftest.py sets TRITON_INTERPRET=1 only where no CUDA device is present).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.fast import kernels
from llada.fast.kernels.reference import rel_rmse
from llada.fast.kernels import reference as ref

needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def triton_quantize(fn, x):
    q, s = fn(x.to(DEVICE), impl="triton")
    return q.cpu(), s.cpu()


def codes(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.uint8)



@needs_triton
@pytest.mark.parametrize("shape", [(1, 1), (200, 150), (3, 130, 96), (2, 256, 128)])
def test_weight_quant_triton_matches_reference_exactly(shape):
    torch.manual_seed(0)
    w = torch.randn(shape) * torch.logspace(-3, 1, shape[-1])  # wide range: subnormals and saturation
    q_tri, s_tri = triton_quantize(kernels.quantize_weight_fp8, w)
    q_ref, s_ref = kernels.quantize_weight_fp8(w, impl="torch")
    assert s_tri.shape == (*shape[:-2], -(-shape[-2] // 128), -(-shape[-1] // 128))
    assert torch.equal(s_tri, s_ref)  # exact: both use IEEE division of the same fp32 amax
    assert torch.equal(codes(q_tri), codes(q_ref))  # exact: rounding is done in fp32 before the cast


@needs_triton
@pytest.mark.parametrize("shape", [(1, 96), (7, 300), (16, 256), (33, 40)])
def test_act_quant_triton_matches_reference_exactly(shape):
    torch.manual_seed(1)
    x = torch.randn(shape) * 5
    q_tri, s_tri = triton_quantize(kernels.quantize_act_fp8, x)
    q_ref, s_ref = kernels.quantize_act_fp8(x, impl="torch")
    assert s_tri.shape == (shape[0], -(-shape[1] // 128))
    assert torch.equal(s_tri, s_ref)
    assert torch.equal(codes(q_tri), codes(q_ref))


def test_weight_scale_is_tile_amax_over_448():
    w = torch.zeros(130, 200)
    w[5, 7], w[129, 3], w[0, 199] = -3.0, 0.5, 1000.0  # tiles (0,0), (1,0), (0,1); tile (1,1) is all zero
    q, s = ref.quantize_weight_fp8(w)
    expected = torch.tensor([[3.0, 1000.0], [0.5, 0.0]]).clamp(min=ref.AMAX_FLOOR) / 448
    assert torch.equal(s, expected)
    assert q.float()[5, 7] == -448 and q.float()[0, 199] == 448  # each tile's amax lands on 448
    assert not torch.isnan(q.float()).any()  # the all-zero tile quantizes to zeros, not 0/0


def test_act_scale_is_group_amax_over_448():
    x = torch.arange(1, 301, dtype=torch.float32)[None].repeat(2, 1)  # (2, 300): groups end at 128, 256, 300
    _, s = ref.quantize_act_fp8(x)
    assert torch.equal(s, torch.tensor([[128.0, 256.0, 300.0]] * 2) / 448)


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_nan_and_inf_propagate_through_activation_quantization(impl):
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(4))  # groups [0,128) [128,256) [256,300)
    x[0, 5] = float("nan")  # row 0, group 0
    x[1, 130] = float("inf")  # row 1, group 1
    x[2, 299] = -float("inf")  # row 2, the partial last group
    q, s = (kernels.quantize_act_fp8(x, impl="torch") if impl == "torch"
            else triton_quantize(kernels.quantize_act_fp8, x))
    assert torch.isnan(s[0, 0]) and s[1, 1] == float("inf") and s[2, 2] == float("inf")
    bad = torch.zeros(3, 3, dtype=torch.bool)
    bad[0, 0] = bad[1, 1] = bad[2, 2] = True
    assert torch.isfinite(s[~bad]).all()  # the other groups keep their scales
    deq = ref.dequantize_act_fp8(q, s).view(3, -1)
    assert torch.isnan(deq[0, :128]).all() and torch.isnan(deq[1, 128:256]).all() and torch.isnan(deq[2, 256:]).all()
    assert torch.isnan(q.float()[1, 130]) and torch.isnan(q.float()[2, 299])  # never a saturated +-448
    clean = x.clone()
    clean[0, :128], clean[1, 128:256], clean[2, 256:] = 1.0, 1.0, 1.0
    expected = ref.dequantize_act_fp8(*ref.quantize_act_fp8(clean))
    keep = ~torch.isnan(deq)
    assert torch.equal(deq[keep], expected[keep])  # finite groups are untouched by their neighbours


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_nan_propagates_through_weight_quantization(impl):
    w = torch.randn(2, 130, 200, generator=torch.Generator().manual_seed(5))  # tiles (2 x 2) per expert
    w[1, 129, 150] = float("nan")  # expert 1, tile (1, 1)
    q, s = (kernels.quantize_weight_fp8(w, impl="torch") if impl == "torch"
            else triton_quantize(kernels.quantize_weight_fp8, w))
    assert torch.isnan(s).nonzero().tolist() == [[1, 1, 1]]
    deq = ref.dequantize_weight_fp8(q, s)
    assert torch.isnan(deq[1, 128:, 128:]).all() and torch.isnan(deq).sum() == 2 * 72


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=needs_triton)])
def test_roundtrip_error(impl):
    torch.manual_seed(2)
    w = torch.randn(96, 200)
    quantize = kernels.quantize_weight_fp8 if impl == "torch" else lambda t, impl: triton_quantize(
        kernels.quantize_weight_fp8, t)
    q, s = quantize(w, impl=impl)
    # 3 mantissa bits: relative rounding error uniform in +-1/16 -> rms ~3.6%; 0.05 leaves room for the tile scale
    assert rel_rmse(ref.dequantize_weight_fp8(q, s), w) < 0.05
    xq, xs = kernels.quantize_act_fp8(w, impl="torch") if impl == "torch" else triton_quantize(
        kernels.quantize_act_fp8, w)
    assert rel_rmse(ref.dequantize_act_fp8(xq, xs), w) < 0.05  # same reason, per-token groups


def test_impl_is_an_explicit_choice(monkeypatch):
    x = torch.zeros(2, 2)
    assert kernels.resolve_impl("auto", x) == "torch"  # CPU tensors take the reference
    with pytest.raises(ValueError, match="impl must be one of"):
        kernels.resolve_impl("cuda", x)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        kernels.quantize_act_fp8(x, impl="triton")
    monkeypatch.setattr(kernels, "triton_available", lambda: False)
    with pytest.raises(RuntimeError, match="pip install triton"):
        kernels.resolve_impl("triton", x)


def test_imports_without_triton():
    code = ("import sys; sys.modules['triton'] = None; import torch; import llada.fast.kernels as k; "
            "import llada.fast.quantize; q, s = k.quantize_act_fp8(torch.ones(2, 3)); "
            "assert 'llada.fast.kernels.fp8' not in sys.modules; print(s.shape)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr
