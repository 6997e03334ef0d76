"""Every kernel specialization compiles for Hopper (sm_90) on this CPU, and the FP8 dots are wgmma e4m3.

`python -m llada.kernels.sm90` runs in its own process (its stand-in driver replaces Triton's for the
whole process, and Triton must not be in interpreter mode there). It compiles the launches the engine
makes at M = 1, 8, 32, 128, 512 and 4096 tokens of the LLaDA2.1-mini shape (each configuration of
the table, the router, sort, quantizers, k-sum, the FP8 linear) through ptxas to a cubin. Triton's
on-disk cache makes later runs fast; a cold run takes about a minute of CPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llada import kernels

ROOT = Path(__file__).resolve().parents[1]
GEMMS = ("_up_kernel", "_down_kernel", "_linear_kernel")
FP8_WGMMA = "e4m3.e4m3"


@pytest.fixture(scope="module")
def report() -> list[dict]:
    if not kernels.triton_available():
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "llada.kernels.sm90", "--json", "-"], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_every_kernel_compiles_to_a_cubin(report):
    names = {r["kernel"] for r in report}
    assert names == {"_logits_kernel", "_topk_kernel", "_align_kernel", "_act_kernel", "_up_kernel", "_down_kernel",
                     "_ksum_kernel", "_linear_kernel", "_weight_kernel"}
    assert {r["tokens"] for r in report if r["kernel"] == "_up_kernel"} >= {1, 8, 32, 512, 4096}  # table buckets


@pytest.mark.parametrize("tokens", [8, 32])
def test_moe_gemms_lower_to_fp8_wgmma_at_decode_sizes(report, tokens):
    rows = {r["kernel"]: r for r in report if r["tokens"] == tokens}
    for name in ("_up_kernel", "_down_kernel"):
        row = rows[name]
        assert row["meta"]["BLOCK_M"] == 16 and row["meta"]["SWAP_AB"]  # decode sizes: 16-pair tiles, swapped
        assert row["mma"] == ["wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3"], row
        assert row["e4m3_converts"] == 0  # no operand converted to f16: the tensor core reads e4m3
        if row["gmma"]:  # the SASS, when the bundled cuobjdump runs here
            assert row["gmma"] == ["QGMMA.64x16x32.F32.E4M3.E4M3"], row
    assert rows["_linear_kernel"]["mma"][0].endswith(FP8_WGMMA)


def test_every_gemm_configuration_uses_fp8_tensor_cores_without_spills(report):
    gemms = [r for r in report if r["kernel"] in GEMMS]
    assert len(gemms) >= 8
    for row in gemms:
        assert row["fp8_wgmma"] and not any(m.startswith("mma.sync") for m in row["mma"]), row
        assert row["e4m3_converts"] == 0, row
        assert row["spills"] in (0, -1), row  # -1: cuobjdump could not run here


def test_stand_in_driver_answers_as_sm90():
    if not kernels.triton_available():
        pytest.skip("triton is not installed")
    from llada.kernels.sm90 import Sm90Driver

    target = Sm90Driver().get_current_target()
    assert (target.backend, target.arch, target.warp_size) == ("cuda", 90, 32)
