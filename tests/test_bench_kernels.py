"""The kernels benchmark runs its smoke size on CPU (reference and interpreted Triton kernels, tuning)."""

import json

import pytest
import torch

from llada.fast import kernels as kernel_pkg
from llada.bench import kernels
from llada.fast.kernels import configs

needs_triton = pytest.mark.skipif(not kernel_pkg.triton_available(), reason="triton is not installed")


def test_kernels_bench_smoke_with_reference_kernels(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    assert kernels.main(["--smoke", "--tokens", "1", "8", "--iters", "1", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["tokens"] == [1, 8] and report["impl"] == "torch"
    assert {"date", "torch", "triton", "device"} <= set(report)
    row = report["rows"][1]
    assert row["experts_touched"] <= 8 and row["layer_bytes"] > row["weight_bytes"]  # + router weight, x, out
    assert "gemm_ms" not in row  # the reference has no launch list to time GEMMs alone
    assert row["rel_rmse_vs_reference"] < 0.12  # four e4m3 roundings on the path (see test_kernels_moe)
    assert "M=   8" in capsys.readouterr().err  # progress is shown


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke run of the interpreted kernels is for CPU")
def test_kernels_bench_tunes_and_times_the_triton_gemms(tmp_path):
    out, table = tmp_path / "kernels.json", tmp_path / "tuned.json"
    argv = ["--smoke", "--impl", "triton", "--tokens", "1", "--iters", "1", "--threads", "1", "--tune",
            "--tune-limit", "2", "--tune-out", str(table), "--out", str(out)]
    assert kernels.main(argv) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert {"gemm_ms", "gemm_share_of_copy", "layer_share_of_copy", "config"} <= set(row)
    assert row["rel_rmse_vs_reference"] < 0.12  # four e4m3 roundings on the path
    tuned = json.loads(table.read_text())
    entry = tuned["shapes"]["H192-I40-E8-K2"][0]
    assert len(entry["candidates"]) == 2 and entry["gemm_ms"] == min(c["gemm_ms"] for c in entry["candidates"])
    assert configs.tuned_config(tuned, 1, "H192-I40-E8-K2") == configs.MoEConfig(**entry["config"])
    assert "kernels --smoke" in tuned["command"]


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke run of the interpreted kernels is for CPU")
def test_tuner_skips_what_does_not_fit_the_gpu_and_never_crashes(tmp_path, monkeypatch, capsys):
    """On an L4's spec (FP8 weights), a candidate over its 101,376 B of shared memory per block is skipped before
    it compiles, with the reason (12 of the 72 candidates there); when nothing fits, the default stays and the
    tuned table gets no row."""
    import dataclasses

    from llada.fast.kernels.devices import KNOWN

    l4, every = KNOWN[89], configs.candidates()
    fitting = next(c for c in every if configs.fits(c, l4))
    too_big = next(c for c in every if not configs.fits(c, l4))
    monkeypatch.setattr(configs, "candidates", lambda block_ms=(), stages=(): [too_big, fitting])
    shape = kernels.SHAPES["smoke"]
    layer = kernels.build(shape, torch.device("cpu"), torch.float32, "triton", "fp8")
    row = kernels.tune_tokens(1, layer, shape, 1, None, l4)
    assert [c["config"] for c in row["candidates"]] == [fitting.to_dict()] and row["config"] == fitting.to_dict()
    [skip] = row["skipped"]
    assert skip["config"] == too_big.to_dict()
    assert "does not fit" in skip["reason"] and "101,376 B" in skip["reason"] and "not compiled" in skip["reason"]
    assert "skipped" in capsys.readouterr().err

    others = [c for c in every if not configs.fits(c, l4)][1:3]
    monkeypatch.setattr(configs, "candidates", lambda block_ms=(), stages=(): others)  # none of them fits the L4
    row = kernels.tune_tokens(1, layer, shape, 1, None, l4)
    assert row["gemm_ms"] is None and row["candidates"] == [] and len(row["skipped"]) == 2
    assert configs.fits(configs.MoEConfig(**row["config"]), l4)  # the default, which fits, stays in use
    assert "none of the 2 candidates could be timed" in capsys.readouterr().err
    table = tmp_path / "tuned.json"
    kernels.write_tuned(table, shape, [row], {"date": "today"}, "test")
    assert json.loads(table.read_text())["shapes"]["H192-I40-E8-K2"] == []  # the default is not recorded as tuned

    nothing = dataclasses.replace(l4, smem=4096)  # a device where not even the default fits: said, no crash
    row = kernels.tune_tokens(1, layer, shape, 1, None, nothing)
    assert row["config"] is None and "fits 4096 B of shared memory" in row["untimed"]


def test_the_grouped_mm_baseline_is_skipped_only_when_the_op_refuses(monkeypatch):
    """A missing op or one that refuses the device gives a reason; any other error is not taken for one."""
    cpu = torch.device("cpu")
    assert kernels.grouped_mm_refusal(cpu) is None  # this PyTorch runs it on CPU

    def refuses(*args, **kwargs):
        raise NotImplementedError("Could not run 'aten::_grouped_mm' with arguments from the 'CPU' backend.\nmore")

    monkeypatch.setattr(torch, "_grouped_mm", refuses)
    assert kernels.grouped_mm_refusal(cpu) == "Could not run 'aten::_grouped_mm' with arguments from the 'CPU' backend."

    def broken(*args, **kwargs):
        raise TypeError("a bug, not a refusal")

    monkeypatch.setattr(torch, "_grouped_mm", broken)
    with pytest.raises(TypeError):
        kernels.grouped_mm_refusal(cpu)
    monkeypatch.delattr(torch, "_grouped_mm")
    assert "has no torch._grouped_mm" in kernels.grouped_mm_refusal(cpu)
