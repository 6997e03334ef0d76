"""The forward benchmark runs its smoke size on CPU and writes a JSON report."""

import json

import pytest
import torch

from llada.bench import forward


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()  # the bench's --threads sets a process-wide value
    yield
    torch.set_num_threads(threads)


def test_forward_bench_smoke(tmp_path, capsys):
    out = tmp_path / "forward.json"
    argv = ["--shape", "llada2.1-mini", "--random-weights", "--smoke", "--iters", "1", "--threads", "1",
            "--out", str(out)]
    assert forward.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["quantize"] == "fp8" and report["prefix"] == 64
    assert report["path"] == "static forward, eager"  # the decode loop's static forward; graphs need CUDA
    assert set(report["tps_at_tpf"]) == {"5.34", "12.32"} and report["report_tps"] == 1586.93
    parts = report["bytes"]
    assert parts["total"] == parts["non_expert_weights"] + parts["routed_experts_touched"] + parts["kv_cache"]
    assert 0 < parts["experts_touched_per_layer"] <= 16  # of the smoke model's 16 experts
    assert report["host_syncs_per_forward"] > 0  # the PyTorch reference experts read counts on the host
    assert {"date", "torch", "device", "eager_ms", "share_of_copy"} <= set(report)
    assert "per forward" in capsys.readouterr().err


def test_forward_bench_needs_random_weights():
    with pytest.raises(SystemExit):
        forward.main(["--shape", "llada2.1-mini"])
