"""`python -m llada.bench decode` runs and reports comparable runs: cache on / off, each forward path."""

import json

from llada.bench.__main__ import main


def test_decode_bench_smoke(tmp_path):
    out = tmp_path / "decode.json"
    argv = ["decode", "--gen-lengths", "8", "--threads", "1", "--forward", "dynamic", "static", "--out", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    runs = {(r["cache"], r["forward"]): r for r in report["runs"]}
    assert set(runs) == {(True, "dynamic"), (True, "static"), (False, "dynamic")}
    on, static, off = runs[True, "dynamic"], runs[True, "static"], runs[False, "dynamic"]
    # tau_mask 1.0 and no editing: one token per forward, so every variant does the same work
    # (16 prompt tokens + 8 masks fill one block of 32: 16 drafts and one verification forward)
    assert on["decode_forwards"] == off["decode_forwards"] == static["decode_forwards"] == 17 and on["tokens"] == 8
    assert report["cache_speedup"]["8"] == round(off["seconds"] / on["seconds"], 2)  # uncached time / cached time


def test_bench_usage_lists_the_benchmarks(capsys):
    assert main([]) == 2
    assert "decode" in capsys.readouterr().err
