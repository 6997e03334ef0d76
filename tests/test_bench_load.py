"""`python -m llada.bench load` at tiny size on the CPU: it writes a replica, measures the load in a fresh
process and reports every figure the GPU run reports (the full-size mini needs a GPU machine)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_load_bench_reports_load_and_decode(tmp_path):
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, "-m", "llada.bench", "load", "--shape", "tiny", "--workdir", str(tmp_path),
                           "--device", "cpu", "--gen-length", "8", "--block-length", "8", "--threads", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    assert (r["bench"], r["shape"], r["dtype"], r["quantize"], r["threads"]) == ("load", "tiny", "float32", "none", 1)
    assert r["date"] and r["device"].startswith("cpu")
    on_disk = sum(f.stat().st_size for f in Path(r["model"]).glob("*.safetensors"))
    assert r["checkpoint_bytes"] == on_disk
    assert 2 * r["parameters"] < on_disk < 2 * r["parameters"] + (1 << 20)  # bf16 + headers
    assert r["weights_bytes"] == 4 * r["parameters"]  # loaded in fp32 on the CPU
    assert r["rss_before_load_bytes"] < r["peak_rss_bytes"] and r["load_seconds"] > 0
    for mode in ("S", "Q"):
        d = r["decode"][mode]
        assert d["tokens"] == 8 and d["forwards"] >= 2  # one block of 8 at least drafts, then verifies
        assert abs(d["forwards_per_s"] - d["forwards"] / d["seconds"]) < 0.01 * d["forwards_per_s"] + 0.01  # rounding
    assert r["decode"]["S"]["threshold"] == 0.5 and r["decode"]["Q"]["threshold"] == 0.7  # the official modes
    assert "peak RSS" in done.stderr and str(out) in done.stderr
