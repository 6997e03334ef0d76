"""`python -m llada.bench int8` on a tiny model: every figure of the report, each variant in its own process,
and the sizing that skips what does not fit."""

import json
import os
import statistics
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
    assert a["decode_rule"] == "joint"  # the tiny model is a LLaDA2.1 one
    assert len(a["interleaved_seconds_per_forward"]["int8"]) == 2
    assert r["int8_held_over_bf16_checkpoint"] == round(q["weights_bytes_held"] / r["checkpoint_bytes"], 3)
    medians = [statistics.median(v["seconds_per_forward"]) for v in (q, d)]
    assert r["int8_forward_over_default"] == round(medians[0] / medians[1], 3)
    for child in (d, q, a):  # each child's own load average, at its start and its end
        assert len(child["load_average"]["start"]) == len(child["load_average"]["end"]) == 3
    assert "top-1 agreement" in done.stderr and str(out) in done.stderr


def test_a_variant_that_does_not_fit_is_skipped_with_the_numbers(monkeypatch, tiny_model_dir):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1 << 30)
    assert "GiB free" in bench._does_not_fit(tiny_model_dir, "both")
    monkeypatch.setattr(memory, "available_bytes", lambda device: 64 << 30)
    assert bench._does_not_fit(tiny_model_dir, "int8") is None


def test_int8_only_measures_a_replica_written_in_int8(tmp_path):
    from llada.weights.replica import write_replica

    root = write_replica(tmp_path / "i8", "tiny", format="int8", shard_bytes=4 << 20)
    out = tmp_path / "only.json"
    done = subprocess.run([sys.executable, "-m", "llada.bench", "int8", "--int8-only", "--model", str(root), "--prefix",
                           "24", "--block", "8", "--iters", "2", "--gen-length", "8", "--threads", "1",
                           "--min-available-gib", "0.5", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    q = r["int8"]
    cfg = read_config(root)[0]
    assert r["bench"] == "int8-only" and r["commit"] and r["load_average"] and r["room"]["waited_seconds"] == 0
    assert q["weights_bytes_held"] == memory.weight_bytes(cfg, torch.bfloat16, "int8")
    assert q["bf16_checkpoint_bytes"] == memory.weight_bytes(cfg, torch.bfloat16)
    assert r["int8_held_over_bf16_checkpoint"] == round(q["weights_bytes_held"] / q["bf16_checkpoint_bytes"], 3)
    assert 0 < q["experts_touched_share"] <= 1 and q["forward_bytes_read"] <= q["all_weights_bytes_read"]
    assert len(q["seconds_per_forward"]) == 2 and q["bandwidth_floor_seconds"] > 0 and q["copy_gb_per_s"] > 0
    d = q["decode_S"]
    assert d["threshold"] == 0.5 and d["tokens"] == 8 and d["forwards"] >= 1 and d["tokens_per_s"] > 0
    assert q["peak_rss_decode_bytes"] > 0 and "load_peak_above_held_over_largest_shard" in r


def test_the_load_waits_for_room_and_says_why():
    from llada.bench.int8_only import wait_for_room

    seen, naps = iter([1 << 30, 2 << 30, 8 << 30]), []
    room, waited, why = wait_for_room(4 << 30, read=lambda: next(seen), sleep=naps.append, poll_s=30)
    assert (room, waited, why, naps) == (8 << 30, 60, None, [30, 30])
    room, waited, why = wait_for_room(4 << 30, read=lambda: 1 << 30, sleep=lambda s: None, poll_s=30, patience_s=90)
    assert waited == 90 and why.startswith("MemAvailable 1.0 GiB < 4.0 GiB needed") and "after waiting 90 s" in why


def test_sizing_from_the_config_alone_says_what_a_cpu_load_picks(tmp_path, monkeypatch):
    from llada.bench.int8_sizing import sizing
    from llada.config import ModelConfig
    from llada.weights.replica import replica_config

    cfg = ModelConfig.from_dict(replica_config("mini", "2.2"))
    monkeypatch.setattr(memory, "available_bytes", lambda device: 16.1 * (1 << 30))
    r = sizing(cfg)
    assert (r["bf16_gib"], r["int8_gib"], r["min_room_gib"]) == (30.28, 15.78, {"bf16": 31.28, "int8": 16.78})
    picks = {v["room_gib"]: v["cpu_load_picks"] for v in r["at_room"]}
    assert (picks[16.0], picks[24.0], picks[32.0]) == (None, "int8", "bf16")
    now = r["this_machine_now"]  # 15.8 GiB of int8 weights, 16.1 GiB available: the headroom refuses it, in words
    assert not now["int8_fits"] and "16.1 GiB available, 1 GiB of it kept for the KV cache" in now["refusal"]
    out = tmp_path / "s.json"
    args = ["int8", "--sizing", "--shape", "mini", "--version", "2.2", "--out", str(out)]
    done = subprocess.run([sys.executable, "-m", "llada.bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["bench"] == "int8-sizing" and report["commit"] and report["int8_bytes"] == r["int8_bytes"]


def test_a_22_model_in_int8_is_compared_decoding_with_the_levenshtein_rule(tmp_path):
    from llada.weights.replica import write_replica

    root = write_replica(tmp_path / "r22", "tiny", version="2.2", shard_bytes=4 << 20)
    # block routing routes whole 32-token blocks: the prefix, the block and the decode's block are multiples of 32
    args = bench.parse(["--child", "agree", "--model", str(root), "--prefix", "32", "--block", "32", "--iters", "1",
                        "--gen-length", "32"])
    a = bench.agreement(args)
    assert a["decode_rule"] == "levenshtein" and a["decode_tokens"] > 0 and 0 <= a["top1_agreement"] <= 1
    assert len(a["interleaved_seconds_per_forward"]["int8"]) == 1
