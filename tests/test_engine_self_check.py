"""The fast engine's self-check passes on the tiny model: its layers at 1 and 32 tokens, then a decode equal to the
reference's (the golden trace on the fast kernels: tests/test_graphs_fast.py).

Without CUDA the kernels run under the Triton interpreter: minutes on 2 shared cores, so this test has a
file of its own (parallel workers take whole files) beside tests/test_engine_select.py and
tests/test_engine_fallback.py.
"""

import pytest

from llada.decode import generate
from llada.fast.engine import FusedExperts, use_engine
from llada.fast.quantize import FusedRouter
from llada.weights.checkpoint import load_model
from test_engine_select import DEVICE, moe_modules, needs_triton


@pytest.fixture
def model(fixture_dir):
    return load_model(fixture_dir).to(DEVICE)


@needs_triton
def test_fast_engine_passes_its_self_check_and_decodes_as_the_reference(model):
    keys = list(model.state_dict())
    report = use_engine(model, "fast", decode=generate)
    assert report.engine == "fast" and "self-check passed" in report.reason
    assert [c["tokens"] for c in report.checks] == [1, 32] and all(c["ok"] for c in report.checks)
    assert report.decode["ok"] and report.decode["blocks"] == 3 and report.decode["forwards"] >= 3
    assert "decode equal to the reference's" in report.line() and report.to_dict()["self_check"] == "passed"
    assert all(isinstance(g, FusedRouter) and isinstance(e, FusedExperts) for g, e in moe_modules(model))
    assert list(model.state_dict()) == keys  # the same parameters under the same names
    # the decode check above is a 3-block run with edits, its trace equal to the reference's; the golden case
    # with EOS early stop (p24) runs through the same fused MoE kernels in tests/test_graphs_fast.py
