"""The kernels benchmark runs its smoke size on CPU and writes a JSON report."""

import json

import pytest
import torch

from llada.bench import kernels


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()  # the bench's --threads sets a process-wide value
    yield
    torch.set_num_threads(threads)


def test_kernels_bench_smoke(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    assert kernels.main(["--smoke", "--tokens", "1", "8", "--iters", "1", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] is True and report["tokens"] == [1, 8]
    row = report["rows"][1]
    assert row["fp8_ms"] > 0 and 0 < row["share_of_copy_bandwidth"] and "speedup_vs_reference" in row
    assert "M=   8" in capsys.readouterr().err  # progress is shown
