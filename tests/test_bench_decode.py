"""`python -m llada.bench decode` runs and reports comparable cache-on / cache-off runs."""

import json

from llada.bench.__main__ import main


def test_decode_bench_smoke(tmp_path):
    out = tmp_path / "decode.json"
    assert main(["decode", "--gen-lengths", "8", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    on, off = sorted(report["runs"], key=lambda r: not r["cache"])
    assert on["cache"] and not off["cache"]
    # tau_mask 1.0 and no editing: one token per forward, so both variants do the same work
    # (16 prompt tokens + 8 masks fill one block of 32: 16 drafts and one verification forward)
    assert on["decode_forwards"] == off["decode_forwards"] == 17 and on["tokens"] == 8
    assert report["cache_speedup"]["8"] == round(off["seconds"] / on["seconds"], 2)  # uncached time / cached time


def test_bench_usage_lists_the_benchmarks(capsys):
    assert main([]) == 2
    assert "decode" in capsys.readouterr().err
