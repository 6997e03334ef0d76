"""`python -m llada.bench decode` runs and reports comparable runs: cache on / off, each forward path."""

import json

from llada.bench import decode
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
    assert set(report["cache_speedup"]) == {"8"}  # one ratio per generation length (its value is timing)


def test_the_cache_speedup_divides_the_uncached_time_by_the_first_paths_cached_time():
    runs = [{"gen_length": 8, "cache": True, "forward": "dynamic", "seconds": 2.0},
            {"gen_length": 8, "cache": True, "forward": "static", "seconds": 1.0},
            {"gen_length": 64, "cache": False, "forward": "dynamic", "seconds": 30.0},
            {"gen_length": 8, "cache": False, "forward": "dynamic", "seconds": 5.0}]
    assert decode._ratio(runs, 8, "dynamic") == 2.5 and decode._ratio(runs, 8, "static") == 5.0


def test_bench_usage_lists_the_benchmarks(capsys):
    assert main([]) == 2
    assert "decode" in capsys.readouterr().err
