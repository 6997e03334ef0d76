"""Every kernel the engine picks compiles for sm80, sm89 and sm90 on this CPU, fits the GPU, and uses its tensor cores.

`python -m llada.fast.kernels.aot` runs in its own process (its stand-in driver replaces Triton's for the
whole process, and Triton must not be in interpreter mode there). It compiles, for an A100 (sm80),
an L4 (sm89) and an H100 (sm90), the launches the engine makes at M = 1, 8, 32, 512 and 2048 tokens
of the LLaDA2.1-mini shape (one token count for each launch the engine plans at any of the tool's own
counts, M = 128 included: `test_the_token_counts_compiled_here_plan_every_launch_of_the_full_set` checks
that, without compiling) with the tile configuration `choose_config` picks for that GPU:
the router (one program per 16 tokens from 512 tokens, expert tiles then the top-k below), sort,
k-sum, the fused norms (RMSNorm + residual, QK-norm + RoPE) and small ops (q/k/v
into the KV cache, silu * up, the window's mask), the bf16 fused MoE everywhere, and where the GPU has FP8
(sm89, sm90) the FP8 fused MoE, quantizers and FP8 linear, through ptxas to a cubin. Triton's on-disk cache makes
later runs take seconds; a cold run compiles ~120 specializations (two to three minutes of one core; the
documented command, all six token counts, two more).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llada.fast import kernels

ROOT = Path(__file__).resolve().parents[1]
GEMMS = ("_up_kernel", "_down_kernel")
TOKENS = (1, 8, 32, 512, 2048)  # every distinct launch of the tool's TOKENS (checked below); M = 128 adds none


@pytest.fixture(scope="module")
def report() -> list[dict]:
    if not kernels.triton_available():
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-m", "llada.fast.kernels.aot", "--json", "-",
                          "--tokens", *map(str, TOKENS)], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def rows(report, arch, weights=None, kernel=None):
    return [r for r in report if r["arch"] == arch and (weights is None or r["weights"] == weights)
            and (kernel is None or r["kernel"] in kernel)]


def test_every_kernel_compiles_for_each_gpu(report):
    moe = {"_route_kernel", "_route_logits_kernel", "_route_select_kernel", "_align_kernel", "_up_kernel",
           "_silu_kernel", "_down_kernel",
           "_ksum_kernel", "_rmsnorm_kernel", "_qk_rope_kernel",  # the MoE layer and the fused norms
           "_qkv_cache_kernel", "_silu_mul_kernel", "_step_mask_kernel"}  # the fused small ops
    fp8_only = {"_act_kernel", "_linear_kernel", "_weight_kernel"}
    assert {r["kernel"] for r in rows(report, 80)} == moe  # no FP8 on an A100: bf16 experts only
    for arch in (89, 90):
        assert {r["kernel"] for r in rows(report, arch)} == moe | fp8_only
    for arch, kinds in ((80, {"bf16"}), (89, {"bf16", "fp8"}), (90, {"bf16", "fp8"})):
        for kind in kinds:
            assert {r["tokens"] for r in rows(report, arch, kind, GEMMS)} == set(TOKENS), (arch, kind)


def test_every_kernel_fits_the_shared_memory_of_its_gpu(report):
    for r in report:
        assert r["shared"] <= r["shared_limit"], r
        if r["kernel"] in GEMMS:  # the estimate that chose the tiles was never below what compiled
            assert r["shared"] <= r["shared_estimate"] <= r["shared"] + 4096, r


@pytest.mark.parametrize("tokens", [1, 8, 32])
def test_hopper_fp8_gemms_are_wgmma_e4m3_at_decode_sizes(report, tokens):
    for r in rows(report, 90, "fp8", GEMMS):
        if r["tokens"] == tokens:
            assert r["meta"]["BLOCK_M"] == 16 and r["meta"]["SWAP_AB"]  # 16-pair tiles, swapped
            assert r["mma"] == ["wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3"], r
            if r["gmma"]:  # the SASS, when the bundled cuobjdump runs here
                assert r["gmma"] == ["QGMMA.64x16x32.F32.E4M3.E4M3"], r


def test_fp8_gemms_use_fp8_tensor_cores_on_hopper_and_ada(report):
    for r in rows(report, 90, "fp8", GEMMS + ("_linear_kernel",)):
        assert r["fp8_wgmma"] and not any(m.startswith("mma.sync") for m in r["mma"]), r
        assert r["e4m3_converts"] == 0, r  # the tensor core reads e4m3: no operand converted to f16
    for r in rows(report, 89, "fp8", GEMMS + ("_linear_kernel",)):
        assert r["mma"] and all(m.startswith("mma.sync") and "e4m3.e4m3" in m for m in r["mma"]), r


def test_bf16_gemms_use_bf16_tensor_cores_everywhere(report):
    for arch, prefix in ((80, "mma.sync"), (89, "mma.sync"), (90, "wgmma")):
        for r in rows(report, arch, "bf16", GEMMS):
            assert r["mma"] and all(m.startswith(prefix) and "bf16" in m for m in r["mma"]), r
            if arch == 90 and r["registers"] != -1:  # the SASS read back: Hopper's warpgroup MMA in bf16
                assert r["gmma"] and all(g.startswith("HGMMA") and "BF16" in g for g in r["gmma"]), r


def test_gemms_do_not_spill(report):
    for r in report:
        if r["kernel"] in GEMMS + ("_linear_kernel",):
            assert r["spills"] in (0, -1), r  # -1: cuobjdump could not run here


def test_router_and_ksum_keep_their_rows_in_registers(report):
    # the router holds (16 tokens, 256 experts) of logits, scores and picks; the k-sum with a norm a whole
    # 2,048-wide row: neither may spill to local memory
    # (the split path's top-k launch the same logits, read back)
    kept = {"_route_kernel", "_route_logits_kernel", "_route_select_kernel", "_ksum_kernel"}
    checked = [r for r in report if r["kernel"] in kept]
    assert {r["kernel"] for r in checked} == kept
    for r in checked:
        assert r["spills"] in (0, -1), r


def test_stand_in_driver_answers_as_each_gpu():
    if not kernels.triton_available():
        pytest.skip("triton is not installed")
    from llada.fast.kernels.aot import StandInDriver
    from llada.fast.kernels.devices import KNOWN

    for arch in (80, 89, 90):
        target = StandInDriver(KNOWN[arch]).get_current_target()
        assert (target.backend, target.arch, target.warp_size) == ("cuda", arch, 32)


def launch_kinds(arch: int, tokens: int) -> set[tuple]:
    """What decides a compiled specialization, for each launch the engine plans at `tokens` tokens on `arch`:
    the kernel, its weights, its meta-parameters (tiles, warps, stages) and how Triton specializes the token
    count (1, a multiple of 16, or neither)."""
    from llada.fast.kernels.aot import engine_launches
    from llada.fast.kernels.devices import KNOWN

    aligned = "one" if tokens == 1 else "x16" if tokens % 16 == 0 else "other"
    return {(weights, launch.name, tuple(sorted(launch.meta.items())), aligned)
            for weights, launch, _ in engine_launches(tokens, KNOWN[arch])}


def test_the_token_counts_compiled_here_plan_every_launch_of_the_full_set():
    """The counts the report fixture compiles plan every launch that the documented command's full set plans,
    so that a configuration `choose_config` gives only at another count fails here instead of going
    uncompiled (planning only: shapes on empty CPU tensors, nothing compiled)."""
    from llada.fast.kernels import aot

    assert set(TOKENS) <= set(aot.TOKENS)
    for arch in aot.ARCHS:
        here = set().union(*(launch_kinds(arch, t) for t in TOKENS))
        for tokens in aot.TOKENS:
            assert launch_kinds(arch, tokens) <= here, (arch, tokens, launch_kinds(arch, tokens) - here)
