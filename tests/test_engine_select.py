"""Choosing the MoE engine: auto / fast / reference, the self-check, the way back, and the CLI's refusal.

Without CUDA the fast engine runs the Triton kernels under the CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 when no GPU is present); a process without that setting is refused.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.fast import engine, kernels
from llada.weights.checkpoint import load_model
from llada.decode import generate
from llada.fast.engine import EngineError, FusedExperts, use_engine
from llada.model import Experts, Router
from llada.fast.quantize import FusedRouter
from golden_cases import case_config

ROOT = Path(__file__).resolve().parents[1]
needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def model(fixture_dir):
    return load_model(fixture_dir).to(DEVICE)


def moe_modules(model):
    return [(layer.mlp.gate, layer.mlp.experts) for layer in model.layers if hasattr(layer.mlp, "experts")]


def test_reference_is_kept_and_restored(model):
    keys = list(model.state_dict())
    report = use_engine(model, "reference")
    assert (report.engine, report.reason) == ("reference", "asked for")
    assert all(type(g) is Router and type(e) is Experts for g, e in moe_modules(model))
    assert list(model.state_dict()) == keys


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto takes the fast engine on CUDA")
def test_auto_on_cpu_keeps_the_reference(model):
    report = use_engine(model, "auto", decode=generate)
    assert report.engine == "reference" and "cpu" in report.reason and not report.fell_back


def test_unknown_engine_is_refused(model):
    with pytest.raises(EngineError, match="engine must be one of auto, fast, reference"):
        use_engine(model, "turbo")


@pytest.mark.skipif(torch.cuda.is_available(), reason="without CUDA only")
def test_fast_without_cuda_or_interpreter_is_refused(model, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(EngineError, match="runs on a CUDA GPU.*TRITON_INTERPRET=1"):
        use_engine(model, "fast", decode=generate)


@needs_triton
def test_fast_engine_passes_its_self_check_and_decodes_the_golden_trace(model, golden):
    keys = list(model.state_dict())
    report = use_engine(model, "fast", decode=generate)
    assert report.engine == "fast" and "self-check passed" in report.reason
    assert [c["tokens"] for c in report.checks] == [1, 32] and all(c["ok"] for c in report.checks)
    assert report.decode["ok"] and report.decode["blocks"] == 3 and report.decode["forwards"] >= 3
    assert "decode equal to the reference's" in report.line() and report.to_dict()["self_check"] == "passed"
    assert all(isinstance(g, FusedRouter) and isinstance(e, FusedExperts) for g, e in moe_modules(model))
    assert list(model.state_dict()) == keys  # the same parameters under the same names
    case = golden["generate"][6]  # 10 forwards with EOS early stop: the cheapest golden case
    run = generate(model, case["prompt_ids"], case_config(case), golden["mask_id"], golden["eos_id"])
    assert run.output_ids == case["output_ids"]
    assert run.block_states_before_each_forward() == case["block_states_before_each_forward"]


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


def _cli(*extra, env=None):
    args = [sys.executable, "-m", "llada", "generate", "--model", str(ROOT / "tests/fixtures/llada2_tiny_ref"),
            "--prompt-ids", "33,243,171", "--gen-length", "4", "--block-length", "4", "--mask-id", "258",
            "--eos-id", "257", "--json", *extra]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
                          stdin=subprocess.DEVNULL)


@pytest.mark.skipif(torch.cuda.is_available(), reason="without CUDA only")
def test_cli_refuses_fast_without_cuda_in_one_error_line():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = _cli("--engine", "fast", env=env)
    assert run.returncode == 2 and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith("error: the fast engine runs on a CUDA GPU") and "Traceback" not in run.stderr
    assert sum(line.startswith("error:") for line in lines) == 1


def test_cli_says_on_stderr_which_engine_runs():
    """The fast engine's line (its self-check) is checked in-process above; here the CLI prints the report."""
    run = _cli("--engine", "reference")
    assert run.returncode == 0, run.stderr
    assert "engine: reference (asked for)" in run.stderr.splitlines()
