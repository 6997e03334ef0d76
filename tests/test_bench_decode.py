"""`python -m llada.bench decode` runs and reports comparable runs: cache on / off, each forward path."""

import json

from llada.bench.__main__ import main


def test_decode_bench_smoke(tmp_path):
    out = tmp_path / "decode.json"
    assert main(["decode", "--gen-lengths", "8", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    on, off = sorted(report["runs"], key=lambda r: not r["cache"])
    assert on["cache"] and not off["cache"] and on["forward"] == off["forward"] == "dynamic"
    # tau_mask 1.0 and no editing: one token per forward, so both variants do the same work
    # (16 prompt tokens + 8 masks fill one block of 32: 16 drafts and one verification forward)
    assert on["decode_forwards"] == off["decode_forwards"] == 17 and on["tokens"] == 8
    assert report["cache_speedup"]["8"] == round(off["seconds"] / on["seconds"], 2)  # uncached time / cached time


def test_decode_bench_static_path_does_the_same_work(tmp_path):
    out = tmp_path / "decode.json"
    argv = ["decode", "--gen-lengths", "8", "--threads", "1", "--forward", "dynamic", "static", "--out", str(out)]
    assert main(argv) == 0
    runs = {(r["cache"], r["forward"]): r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {(True, "dynamic"), (True, "static"), (False, "dynamic")}
    assert runs[True, "static"]["decode_forwards"] == runs[True, "dynamic"]["decode_forwards"] == 17


def test_bench_usage_lists_the_benchmarks(capsys):
    assert main([]) == 2
    assert "decode" in capsys.readouterr().err
