"""Choosing the MoE engine: auto / fast / reference, and the CLI's refusal and report.

The fast engine's self-check is in tests/test_engine_self_check.py, the way back when it fails in
tests/test_engine_fallback.py (each minutes under the interpreter: files of their own for parallel workers).

Without CUDA the fast engine runs the Triton kernels under the CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 when no GPU is present); a process without that setting is refused.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.fast import kernels
from llada.weights.checkpoint import load_model
from llada.decode import generate
from llada.fast.engine import EngineError, use_engine
from llada.model import Experts, Router

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
