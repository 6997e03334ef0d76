"""Tile configurations: what the starting table picks, what it refuses, and that a tuned table wins."""

import json

import pytest

from llada.kernels import configs
from llada.kernels.configs import MoEConfig

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
    tuned = MoEConfig(block_m=32, up_n=128, up_split_k=2, up_warps=8, down_n=128)
    key = configs.shape_key(2048, 512, 256, 8)
    table = {"device": "NVIDIA H200", "shapes": {key: [{"tokens": 32, "config": tuned.to_dict(), "gemm_ms": 0.1}]}}
    (tmp_path / "nvidia-h200.json").write_text(json.dumps(table))
    monkeypatch.setattr(configs, "TUNED_DIR", tmp_path)
    configs.load_tuned.cache_clear()
    assert configs.choose_config(32, 2048, 512, 256, 8, "NVIDIA H200") == tuned
    assert configs.choose_config(8, 2048, 512, 256, 8, "NVIDIA H200") == tuned  # nearest measured M above
    assert configs.choose_config(32, 2048, 512, 256, 8, "NVIDIA H100 80GB HBM3") == configs.default_config(32, **MINI)
    assert configs.choose_config(32, 96, 40, 6, 2, "NVIDIA H200") == configs.default_config(32, 2, 6, 40, 96)
    configs.load_tuned.cache_clear()
