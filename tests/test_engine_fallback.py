"""A fast engine that fails its self-check: asked for, an error; on auto, the reference, and the reason why.

The faults are planted in the fused MoE (a wrong scale, a launch failure, a bug only at the decode's token
counts). Without CUDA the kernels run under the Triton interpreter: a file of its own so that a parallel worker
runs it beside tests/test_engine_self_check.py.
"""

from dataclasses import replace
from functools import partial

import pytest

from llada.decode import generate
from llada.fast import engine, kernels
from llada.fast.engine import EngineError, use_engine
from llada.model import Experts, Router
from llada.weights.checkpoint import load_model
from test_engine_select import DEVICE, moe_modules, needs_triton

ONE_BLOCK = replace(engine.CHECK_DECODE, gen_length=engine.CHECK_DECODE.block_length)


@pytest.fixture
def model(fixture_dir):
    return load_model(fixture_dir).to(DEVICE)


def _wrong(x, w13, w2, ids, weights, impl="auto", adds=(), shared=None, norm=None):
    out = kernels.reference.fused_moe_bf16(x, w13, w2, ids, weights, adds, shared) * 1.5  # a planted scale bug
    return out if norm is None else (out, kernels.reference.rms_norm(out, *norm))


def _broken(*args, **kwargs):
    raise RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448 (planted)")


@needs_triton
@pytest.mark.parametrize("fault, says", [(_wrong, "rel. RMSE"), (_broken, "RuntimeError: out of resource")])
def test_a_failing_fast_path_falls_back_and_says_why(model, monkeypatch, fault, says):
    monkeypatch.setattr(engine.kernels, "fused_moe_bf16", fault)
    with pytest.raises(EngineError, match=f"failed its self-check.*{says}"):  # asked for: an error
        use_engine(model, "fast", decode=generate)
    assert all(type(g) is Router and type(e) is Experts for g, e in moe_modules(model))  # put back
    monkeypatch.setattr(engine, "_on_cuda", lambda m: True)  # auto tries the fast engine only on CUDA
    report = use_engine(model, "auto", decode=generate)
    assert report.engine == "reference" and report.fell_back
    assert "failed its self-check" in report.reason and says in report.reason and "reference" in report.reason
    assert all(type(g) is Router and type(e) is Experts for g, e in moe_modules(model))


def _wrong_at_decode_shapes(x, w13, w2, ids, weights, impl="auto", adds=(), shared=None, norm=None):
    """Right at the self-check's M = 1 and 32, wrong elsewhere (a tile mask bug at other token counts)."""
    out = kernels.reference.fused_moe_bf16(x, w13, w2, ids, weights, adds, shared)
    out = out if x.shape[0] in engine.CHECK_TOKENS else -4 * out
    return out if norm is None else (out, kernels.reference.rms_norm(out, *norm))


@needs_triton
def test_a_decode_that_differs_from_the_reference_falls_back_and_says_where(model, monkeypatch):
    monkeypatch.setattr(engine.kernels, "fused_moe_bf16", _wrong_at_decode_shapes)
    # one block of the decode check instead of three: the planted bug parts the traces at the first forward
    monkeypatch.setattr(engine, "decode_check", partial(engine.decode_check, cfg=ONE_BLOCK))
    with pytest.raises(EngineError, match="failed its self-check \\(decode check: .* on the reference"):
        use_engine(model, "fast", decode=generate)
    assert all(type(g) is Router and type(e) is Experts for g, e in moe_modules(model))
    monkeypatch.setattr(engine, "_on_cuda", lambda m: True)
    report = use_engine(model, "auto", decode=generate)
    assert report.engine == "reference" and report.fell_back and all(c["ok"] for c in report.checks)
    assert not report.decode["ok"] and "decode forward" in report.decode["differs"]
    assert report.line().startswith("engine: reference (the fast engine failed its self-check (decode check:")
    assert report.to_dict() | {"reason": ""} == {"engine": "reference", "requested": "auto", "reason": "",
                                                 "fell_back": True, "self_check": "failed"}
    assert all(type(g) is Router and type(e) is Experts for g, e in moe_modules(model))
    unchecked = use_engine(model, "auto", decode=None)  # the layer check alone misses a bug at other shapes
    assert unchecked.engine == "fast" and unchecked.line().endswith("no decode check)") and unchecked.decode["skipped"]
