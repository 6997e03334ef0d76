"""`python -m llada.bench int8` on a tiny model: every figure of the report, each variant in its own process,
and the sizing that skips what does not fit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from llada.bench import int8 as bench
from llada.weights import memory
from llada.weights.checkpoint import read_config

ROOT = Path(__file__).resolve().parents[1]


def test_int8_bench_reports_memory_speed_and_agreement(tmp_path, tiny_model_dir):
    out = tmp_path / "int8.json"
    done = subprocess.run([sys.executable, "-m", "llada.bench", "int8", "--model", str(tiny_model_dir), "--prefix",
                           "24", "--block", "8", "--iters", "2", "--agree", "--gen-length", "8", "--threads", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    assert r["bench"] == "int8" and r["commit"] and r["load_average"] and r["command"].startswith("python -m llada")
    cfg = read_config(tiny_model_dir)[0]
    d, q = r["default"], r["int8"]
    assert (d["dtype"], d["quantize"], q["dtype"], q["quantize"]) == ("float32", None, "bfloat16", "int8")
    assert q["weights_bytes_held"] == memory.weight_bytes(cfg, torch.bfloat16, "int8")  # the sizing is exact
    assert d["weights_bytes_held"] == memory.weight_bytes(cfg, torch.float32)
    for v in (d, q):
        assert len(v["seconds_per_forward"]) == 2 and v["rss_before_load_bytes"] < v["peak_rss_load_bytes"]
        assert v["bandwidth_floor_seconds"] > 0 and v["forward_bytes_read"] < v["weights_bytes_held"] + (1 << 20)
    a = r["agreement"]
    assert a["positions"] == 32 and 0 <= a["top1_agreement"] <= 1 and a["decode_tokens"] == 8
    assert len(a["interleaved_seconds_per_forward"]["int8"]) == 2
    assert r["int8_held_over_bf16_checkpoint"] == round(q["weights_bytes_held"] / r["checkpoint_bytes"], 3)
    assert "top-1 agreement" in done.stderr and str(out) in done.stderr


def test_a_variant_that_does_not_fit_is_skipped_with_the_numbers(monkeypatch, tiny_model_dir):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1 << 30)
    assert "GiB free" in bench._does_not_fit(tiny_model_dir, "both")
    monkeypatch.setattr(memory, "available_bytes", lambda device: 64 << 30)
    assert bench._does_not_fit(tiny_model_dir, "int8") is None
