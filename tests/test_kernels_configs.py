"""Tile configurations: what the starting table picks, what it refuses, that a tuned table wins, that every
choice fits the device's shared memory before it compiles, and that the tuner skips what does not fit."""

import json

import pytest
import torch

from llada.fast import kernels
from llada.fast.kernels import configs
from llada.fast.kernels.configs import MoEConfig
from llada.fast.kernels.devices import KNOWN, DeviceSpec

MINI = dict(top_k=8, experts=256, inner=512, hidden=2048)  # LLaDA2.1-mini's routed experts


def test_decode_sizes_take_swapped_16_pair_tiles():
    for tokens in (1, 8, 32, 128):  # <= ~4 pairs per touched expert: 16-pair tiles, weight rows on the MMA M side
        cfg = configs.default_config(tokens, **MINI)
        assert (cfg.block_m, cfg.swap_ab, cfg.up_n) == (16, True, 64)


def test_one_token_splits_k_to_fill_the_gpu():
    # T = 1 touches 8 experts: 8 x 512/64 = 64 gate/up tiles for 132 SMs, so H is cut into 4 slices
    assert configs.default_config(1, **MINI).up_split_k == 4
    assert configs.default_config(32, **MINI).up_split_k == 1  # ~162 experts x 8 tiles: enough already
    assert configs.default_config(1, top_k=8, experts=256, inner=512, hidden=96).up_split_k == 1  # one H step


def test_prefill_takes_plain_64_pair_tiles_on_8_warps():
    cfg = configs.default_config(4096, **MINI)  # 128 pairs per expert
    assert (cfg.block_m, cfg.swap_ab, cfg.up_warps) == (64, False, 8)  # 4 warps spill (see the sm90 compile)


def test_configs_that_would_not_reach_the_fp8_tensor_cores_are_refused():
    with pytest.raises(ValueError, match="needs swap_ab"):
        MoEConfig(block_m=16, swap_ab=False)
    with pytest.raises(ValueError, match="block_m must be"):
        MoEConfig(block_m=8)
    with pytest.raises(ValueError, match="up_n must be 64 or 128"):
        MoEConfig(up_n=32)


def test_expected_touched_experts_matches_the_roofline_estimate():
    assert round(configs.expected_touched(32 * 8, 256)) == 162  # the ~163 of 256 the roofline assumes


def test_a_tuned_table_for_this_gpu_wins(tmp_path, monkeypatch):
    tuned = MoEConfig(block_m=32, up_n=128, up_split_k=2, up_warps=8, down_n=128, up_stages=3, down_stages=3)
    key = configs.shape_key(2048, 512, 256, 8)
    table = {"device": "NVIDIA H200", "shapes": {key: [{"tokens": 32, "config": tuned.to_dict(), "gemm_ms": 0.1}]}}
    (tmp_path / "nvidia-h200.json").write_text(json.dumps(table))
    monkeypatch.setattr(configs, "TUNED_DIR", tmp_path)
    configs.load_tuned.cache_clear()
    h200, h100 = DeviceSpec("NVIDIA H200", 90, 132, 232_448), KNOWN[90]
    assert configs.choose_config(32, 2048, 512, 256, 8, h200) == tuned
    assert configs.choose_config(8, 2048, 512, 256, 8, h200) == tuned  # nearest measured M above
    assert configs.choose_config(32, 2048, 512, 256, 8, h100) == configs.default_config(32, **MINI)
    assert configs.choose_config(32, 96, 40, 6, 2, h200) == configs.default_config(32, 2, 6, 40, 96)
    small = DeviceSpec("NVIDIA H200", 90, 132, 99_000)  # the same table on a smaller block: fitted, not taken as is
    assert configs.choose_config(32, 2048, 512, 256, 8, small) == MoEConfig(**{**tuned.to_dict(), "up_stages": 2,
                                                                                "down_stages": 2})
    configs.load_tuned.cache_clear()


MS = (1, 8, 32, 128, 512, 2048)


@pytest.mark.parametrize("arch", sorted(KNOWN))
@pytest.mark.parametrize("fp8", [True, False])
def test_every_chosen_configuration_fits_the_device(arch, fp8):
    spec = KNOWN[arch]
    if fp8 and not spec.fp8:
        with pytest.raises(ValueError, match="compute capability 8.9"):
            configs.choose_config(1, 2048, 512, 256, 8, spec, fp8=True)
        return
    for M in MS:
        cfg = configs.choose_config(M, 2048, 512, 256, 8, spec, fp8=fp8)
        assert max(configs.smem_bytes(cfg, fp8, arch).values()) <= spec.smem, (arch, M, cfg)


def test_fitting_drops_stages_then_narrows_tiles():
    wide = MoEConfig(block_m=16, up_n=128, down_n=128, up_stages=4, down_stages=4)  # up: 34 KB per FP8 stage
    assert configs.smem_bytes(wide, True, 89)["_up_kernel"] > KNOWN[89].smem  # 3 copies x 34 KB
    fitted = configs.fit_config(wide, KNOWN[89])
    assert (fitted.up_n, fitted.up_stages) == (128, 3) and configs.fits(fitted, KNOWN[89])
    assert configs.fit_config(wide, KNOWN[90]) == wide  # fits Hopper's 227 KB as it is
    bf16 = configs.fit_config(wide, DeviceSpec("tiny", 90, 58, 80_000), fp8=False)  # 2 bytes per element
    assert bf16.up_n == 64 and configs.fits(bf16, DeviceSpec("tiny", 90, 58, 80_000), fp8=False)
    with pytest.raises(ValueError, match="no tile configuration"):
        configs.fit_config(wide, DeviceSpec("tiny", 90, 1, 10_000))


M64_PLAIN = MoEConfig(block_m=64, swap_ab=False, up_n=128, down_n=128, up_stages=3, down_stages=3)
H200 = DeviceSpec("NVIDIA H200", 90, 132, 232_448)


def test_fp32_weights_take_four_bytes_and_no_tensor_core_copy():
    """The H200 lease (issue #33) refused these tiles with fp32 weights: "shared memory required 327680 >
    232448". The IEEE fp32 dot keeps stages - 1 copies of 4-byte tiles: 2 x (64 + 2 x 128) x 128 x 4."""
    need = configs.smem_bytes(M64_PLAIN, fp8=False, arch=90, fp32=True)
    assert need["_up_kernel"] - configs.SMEM_SLACK == 327_680
    assert need["_down_kernel"] - configs.SMEM_SLACK == 2 * (64 + 128) * 128 * 4  # 196,608 (sm90 compile)
    assert not configs.fits(M64_PLAIN, H200, fp8=False, fp32=True)
    assert configs.fit_config(M64_PLAIN, H200, fp8=False, fp32=True) == MoEConfig(
        **{**M64_PLAIN.to_dict(), "up_stages": 2, "down_stages": 2})  # one copy of 160 KB: the tiles stay
    assert configs.smem_bytes(M64_PLAIN, fp8=False, arch=90)["_up_kernel"] < need["_up_kernel"]  # bf16: 2 bytes


def test_a_callers_configuration_is_fitted_before_it_compiles(monkeypatch):
    """An explicit `config` (a test's tiles, a table for a larger GPU) gets the chosen one's fitting: its
    stages are clamped to what the device's blocks hold, a fitting one is launched as given."""
    from llada.fast.kernels import fused_moe

    monkeypatch.setattr(fused_moe, "device_spec", lambda device: H200)  # plans only: nothing launches
    T, H, I, E, K = 5, 200, 40, 6, 2
    x, w13, w2 = torch.zeros(T, H), torch.zeros(E, 2 * I, H), torch.zeros(E, H, I)
    ids, weights = torch.zeros(T, K, dtype=torch.long), torch.zeros(T, K)

    def stages(w13, w2, cfg) -> dict:
        launches = fused_moe.plan_fused_moe(x.to(w13.dtype), w13, None, w2, None, ids, weights, cfg)[1]
        return {launch.name: launch.meta["num_stages"] for launch in launches if "num_stages" in launch.meta}

    assert stages(w13, w2, M64_PLAIN) == {"_up_kernel": 2, "_down_kernel": 2}  # fp32: clamped from 3
    m16 = MoEConfig(block_m=16, up_n=64, down_n=128, up_stages=4, down_stages=3)
    assert stages(w13.bfloat16(), w2.bfloat16(), m16) == {"_up_kernel": 4, "_down_kernel": 3}  # fits as given


def test_half_of_the_candidates_exceed_a_99_kb_block_and_the_estimate_says_so():
    over = [c for c in configs.candidates() if not configs.fits(c, KNOWN[89])]
    assert over and len(over) < len(configs.candidates())
    assert all(configs.fits(c, KNOWN[90]) or c.block_m == 64 for c in configs.candidates())


@pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreted tuner is the CPU stand-in")
def test_tuner_skips_what_does_not_fit_or_fails_and_never_stops(monkeypatch):
    from llada.bench import kernels as bench

    shape = bench.SHAPES["smoke"]
    layer = bench.build(shape, torch.device("cpu"), torch.float32, "triton")
    small = DeviceSpec("small", 90, 132, 70_000)  # 16 x 64 tiles: 3 stages fit (57 KB), 4 do not (76 KB)
    real_plan = bench.fused_plan

    def failing_plan(x, layer, shape, config=None):  # one candidate fails as a compile error would
        if config is not None and config.up_warps == 8:
            raise RuntimeError("PTX compile failed (planted)")
        return real_plan(x, layer, shape, config)

    monkeypatch.setattr(bench, "fused_plan", failing_plan)
    row = bench.tune_tokens(1, layer, shape, iters=1, limit=3, spec=small)  # 4x3 (runs), 4x4, 8x3 warps x stages
    reasons = [s["reason"] for s in row["skipped"]]
    assert any("shared memory" in r for r in reasons) and any("planted" in r for r in reasons)
    assert row["candidates"] and all(configs.fits(MoEConfig(**c["config"]), small) for c in row["candidates"])
    assert len(row["candidates"]) == 1 and len(row["skipped"]) == 2


def test_fp8_kernels_are_refused_before_compiling_on_a_gpu_without_fp8(monkeypatch):
    from llada.fast.kernels import devices

    monkeypatch.setattr(devices, "spec_of", lambda device: KNOWN[80])  # an A100 answers
    with pytest.raises(RuntimeError, match="compute capability 8.9 or later; NVIDIA A100.* is sm80"):
        devices.require_fp8(torch.device("cuda"))
    monkeypatch.setattr(devices, "spec_of", lambda device: KNOWN[89])
    devices.require_fp8(torch.device("cuda"))  # an L4 has FP8
    devices.require_fp8(torch.device("cpu"))  # the interpreter: no GPU to ask


@pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreted tuner is the CPU stand-in")
def test_bf16_weights_are_benchmarked_and_tuned_apart(tmp_path):
    from llada.bench import kernels as bench

    out, table = tmp_path / "k.json", tmp_path / "tuned.json"
    argv = ["--smoke", "--impl", "triton", "--weights", "bf16", "--tokens", "1", "--iters", "1", "--tune",
            "--tune-limit", "1", "--tune-out", str(table), "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    row = report["rows"][0]
    assert report["weights"] == "bf16" and row["rel_rmse_vs_reference"] < 1e-4  # fp32 on CPU: sum order only
    assert row["weight_bytes"] == row["experts_touched"] * 2 * 3 * 192 * 40  # bf16: 2 bytes, no scales
    assert list(json.loads(table.read_text())["shapes"]) == ["H192-I40-E8-K2-bf16"]


def test_auto_keeps_fp8_ops_off_triton_on_a_gpu_without_fp8(monkeypatch):
    from llada.fast.kernels import devices

    cuda = torch.device("cuda")
    monkeypatch.setattr(kernels, "triton_available", lambda: True)
    monkeypatch.setattr(devices, "spec_of", lambda device: KNOWN[80])
    assert kernels.auto_impl(cuda, fp8=True) == "torch"  # e4m3 does not compile on sm80: the reference runs
    assert kernels.auto_impl(cuda, fp8=False) == "triton"  # bf16 grouped GEMMs do
    monkeypatch.setattr(devices, "spec_of", lambda device: KNOWN[90])
    assert kernels.auto_impl(cuda, fp8=True) == "triton"
    assert kernels.auto_impl(torch.device("cpu"), fp8=True) == "torch"
