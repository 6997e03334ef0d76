"""`python -m llada.bench batch` on a small workload: one JSON report with every run and the medians."""

import json

from llada.bench.__main__ import main


def test_batch_bench_writes_its_report(tmp_path, capsys):
    out = tmp_path / "batch.json"
    assert main(["batch", "--models", "embedded", "--sizes", "1", "3", "--rows", "4", "--repeats", "1",
                 "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (model,) = report["models"]
    assert report["bench"] == "batch" and model["model"] == "embedded" and report["threads"] == 1
    assert [r["batch"] for r in model["runs"]] == [1, 3]
    assert all(r["outputs_equal_b1"] for r in model["runs"]) and model["runs"][0]["tokens"] > 0
    assert model["runs"][1]["model_calls"] < model["runs"][0]["model_calls"]  # rows share forwards
    assert set(model["speedup_vs_b1"]) == {"1", "3"} and "median aggregate tokens/s" in capsys.readouterr().out
