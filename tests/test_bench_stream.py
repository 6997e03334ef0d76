"""`python -m llada.bench stream` on a few held-out functions: one JSON report, every run's numbers."""

import json

from llada.bench.__main__ import main


def test_stream_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "stream.json"
    assert main(["stream", "--n", "2", "--gen-length", "32", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"] == "stream" and report["mode"] == "S" and report["threads"] == 1
    assert len(report["runs"]) == 2 and report["settings"]["gen_length"] == 32 and report["settings"]["use_cache"]
    for run in report["runs"]:
        assert 0 < run["tokens"] <= 32 and run["forwards"] >= 1 and run["seconds"] > 0
        assert abs(run["tokens_per_s"] - run["tokens"] / run["seconds"]) < 0.01 * run["tokens_per_s"] + 0.01
    assert report["aggregate_tokens_per_s"] > 0 and "tokens/s" in capsys.readouterr().out


def test_stream_bench_refuses_a_bad_count():
    import pytest

    with pytest.raises(SystemExit):
        main(["stream", "--n", "0"])
