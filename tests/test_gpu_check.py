"""`python -m llada.bench gpu-check`: refuses in one line without CUDA, lists its plan, and sets measured
figures beside what they should be."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.bench import gpu_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "check.json"
    run = subprocess.run([sys.executable, "-m", "llada.bench", "gpu-check", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [run.stderr.strip()]  # one line
    assert run.stderr.startswith("error: gpu-check measures a CUDA GPU") and not out.exists()


def test_plan_lists_every_step_without_a_gpu(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "x.json"), "--plan", "--skip", "decode"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["self-check", "tests", "tune", "kernels", "forward"]
    assert any("kernels --tune" in line for line in lines) and any("pytest" in line for line in lines)
    for test in gpu_check.TESTS:  # the compiled kernel tests it runs exist
        assert (ROOT / test).exists(), test


def test_expected_beside_actual():
    parts = {
        "self-check": {"bf16": [{"tokens": 1, "experts_rel_rmse": 0.003, "router_agreement": 1.0, "ok": True}],
                       "fp8": [{"ok": False, "error": "RuntimeError: out of resource"}]},
        "kernels": {"copy_gb_per_s": 3000.0,
                    "rows": [{"tokens": 32, "weight_bytes": 510_000_000, "gemm_ms": 0.19, "layer_share_of_copy": 0.81},
                             {"tokens": 1, "weight_bytes": 25_000_000, "gemm_ms": 0.2, "layer_share_of_copy": 0.05}]},
        "forward": {"forward_ms": 5.0, "copy_gb_per_s": 3000.0, "host_syncs_per_forward": 0},
    }
    rows = {r["figure"]: r for r in gpu_check.expectations(parts)}
    assert rows["self-check bf16 M=1"]["ok"] and not rows["self-check fp8 M=?"]["ok"]
    assert "out of resource" in rows["self-check fp8 M=?"]["actual"]
    assert rows["MoE layer M=32, share of copy bandwidth"]["ok"]  # 81% >= 70%
    gemm32, gemm1 = rows["GEMMs M=32 (gate/up + SiLU + down)"], rows["GEMMs M=1 (gate/up + SiLU + down)"]
    assert gemm32["expected"].startswith("~170 us") and gemm32["ok"]  # 510 MB at 3 TB/s; 190 us measured
    assert not gemm1["ok"]  # 200 us for 25 MB (~8 us at copy speed): far off
    forward = rows["mini forward, CUDA graph"]  # 3.9 ms x 4000 / 3000 = 5.2 ms on this slower device
    assert forward["ok"] and forward["expected"].startswith("<= 5.20 ms")
    assert rows["host syncs per forward"]["ok"]
    json.dumps(rows)  # the report is JSON


def test_without_fp8_every_step_runs_bf16_experts(tmp_path):
    steps = gpu_check.commands(tmp_path, fp8=False)
    assert list(steps) == list(gpu_check.STEPS)
    assert all("--weights bf16" in " ".join(steps[s]) for s in ("tune", "kernels"))
    assert all("--quantize none" in " ".join(steps[s]) for s in ("forward", "decode"))
