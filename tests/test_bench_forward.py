"""The forward benchmark runs its smoke size on CPU and writes a JSON report."""

import json

import pytest

from llada.bench import forward


def test_forward_bench_smoke(tmp_path, capsys):
    out = tmp_path / "forward.json"
    argv = ["--shape", "llada2.1-mini", "--random-weights", "--smoke", "--iters", "1", "--threads", "1",
            "--out", str(out)]
    assert forward.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["quantize"] == "fp8" and report["prefix"] == 64
    assert report["path"] == "static forward, eager"  # the decode loop's static forward; graphs need CUDA
    parts = report["bytes"]
    smoke = forward.SHAPES["smoke"]  # the KV cache read: K and V, every layer and KV head, prefix + block, fp32
    kv_values = 2 * smoke["num_hidden_layers"] * smoke["num_key_value_heads"] * (64 + 32) * smoke["head_dim"]
    assert parts["kv_cache"] == 4 * kv_values
    assert parts["total"] == parts["non_expert_weights"] + parts["routed_experts_touched"] + parts["kv_cache"]
    assert 0 < parts["experts_touched_per_layer"] <= 16  # of the smoke model's 16 experts
    assert report["host_syncs_per_forward"] > 0  # the PyTorch reference experts read counts on the host
    assert {"date", "torch", "device", "eager_ms", "share_of_copy"} <= set(report)
    assert "per forward" in capsys.readouterr().err


def test_forward_bench_says_its_weights_are_random(capsys):
    """Numbers of random weights are never mistaken for a checkpoint's: the flag that says so is asked for."""
    with pytest.raises(SystemExit) as stop:
        forward.main(["--shape", "llada2.1-mini"])
    assert stop.value.code == 2 and "only --random-weights is supported" in capsys.readouterr().err
