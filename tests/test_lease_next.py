"""The second lease (`--plan next`): its parts fit one call with time left to train, the tune goes deeper and
keeps each M it finished, the MoE layer is timed launch by launch, and v4 is trained compiled, once more
eagerly if that run dies, only from data built for its own vocabulary."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llada.bench import kernels, lease, lease_launches, lease_train
from llada.fast.kernels import configs
from llada.fast.kernels.devices import KNOWN

FIRST_PREFLIGHT_S = 9.0  # what the first lease's preflight took on an H200


def test_next_plan_checks_tunes_times_launches_then_trains(tmp_path):
    parts = lease.PLANS["next"](tmp_path, False)
    assert [p.name for p in parts] == ["self-check", "tests", "tune", "moe-launches", "train"]
    *engine, train = parts
    # every engine part at its cap still leaves training its minimum within one 560 s call
    assert sum(p.cap_s for p in engine) + FIRST_PREFLIGHT_S + lease.PACK_S <= 560 - train.min_s
    assert "llada.bench.lease_train" in train.argvs[0] and "--dry-run" not in train.argvs[0]
    tune = " ".join(parts[2].argvs[0])
    assert "--tokens 32 8 1 " in tune and "--tune-stages 3 4 5 6 " in tune and "--tune-limit 30 " in tune
    assert parts[3].argvs[0][2:4] == ["llada.bench.lease_engine", "moe-launches"] and parts[3].out


def test_the_next_tune_covers_its_tile_height_at_every_depth_and_all_fit_hopper():
    tokens, stages, limit = lease.NEXT_TUNE
    first = configs.candidates((16, 32), stages)[:limit]
    assert first == configs.candidates((16,), stages)  # the limit is exactly block_m 16's candidates
    assert {c.up_stages for c in first} == {3, 4, 5, 6} and all(c.up_stages == c.down_stages for c in first)
    assert all(configs.fits(c, KNOWN[90]) for c in first)  # none skipped on an H100 / H200: each is timed
    default = configs.candidates()
    assert len(default) == 72 and {c.up_stages for c in default} == {3, 4}  # the plain tune as before
    with pytest.raises(ValueError, match="stages"):
        configs.candidates((16,), (1,))


def test_a_tune_cut_short_keeps_the_token_counts_it_finished(tmp_path, monkeypatch):
    real = kernels.tune_tokens

    def stops_at_8(M, *args):
        if M == 8:
            raise KeyboardInterrupt  # the lease's cap killing the part
        return real(M, *args)

    monkeypatch.setattr(kernels, "tune_tokens", stops_at_8)
    table = tmp_path / "tuned.json"
    with pytest.raises(KeyboardInterrupt):
        kernels.main(["--tune", "--impl", "triton", "--tokens", "1", "8", "--tune-limit", "1", "--tune-stages", "5",
                      "--tune-out", str(table), "--out", str(tmp_path / "bench.json")])
    rows = json.loads(table.read_text())["shapes"]
    [(key, [row])] = rows.items()
    assert row["tokens"] == 1 and row["config"]["up_stages"] == 5


def test_moe_launches_dry_run_times_each_of_the_eight_launches(monkeypatch):
    monkeypatch.setattr(lease_launches, "TOKENS", (1,))  # one M keeps CI short; the step runs 1, 8, 32
    report = lease_launches.launches_step(dry_run=True)
    [row] = report["rows"]
    parts = ["router", "top-k", "sort", "quantize", "up", "silu", "down", "k-sum"]
    assert [r["part"] for r in row["launches"]] == parts
    assert all(r["alone_us"] > 0 and r["in_order_us"] > 0 for r in row["launches"])
    assert row["in_order_sum_us"] == pytest.approx(sum(r["in_order_us"] for r in row["launches"]), abs=0.1)
    assert len(report["figures"]) == 2 and all(f["ok"] is None for f in report["figures"])  # a CPU judges nothing


def test_the_lease_preset_is_small_enough_to_ship():
    from llada.train.build import model_config
    from llada.train.loop import preset_config
    from llada.train.recipes import param_counts

    tc = preset_config(lease_train.PRESET)
    total, _ = param_counts(model_config(tc, tc.vocab_size))
    assert 2 * total <= 12e6  # bf16 shards of the embedded default
    assert tc.code_share <= 0.6 and tc.device == "auto" and tc.compile == "auto"  # >= 40% task steps; compiled


def _carried(tmp_path: Path, monkeypatch, vocab: int) -> None:
    carried = tmp_path / "carry"
    carried.mkdir()
    (carried / "rows.xz").write_bytes(b"")
    data = tmp_path / "data"
    data.mkdir()
    (data / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"t{k}": k for k in range(vocab)}}}))
    monkeypatch.setattr(lease_train, "CARRIED", carried)
    monkeypatch.setattr("llada.bench.lease_data.unpack", lambda src, dest: data)
    monkeypatch.setenv("LEASE_PART_DEADLINE", str(time.time() + 600))


def test_data_built_for_another_vocabulary_is_refused(tmp_path, monkeypatch):
    _carried(tmp_path, monkeypatch, vocab=8192)  # the first lease's data
    with pytest.raises(SystemExit, match="8,192 tokens.*wants 4,096"):
        lease_train.main([str(tmp_path / "train.json")])


def test_a_compiled_run_that_dies_is_run_once_more_eagerly(tmp_path, monkeypatch):
    _carried(tmp_path, monkeypatch, vocab=4096)
    calls = []

    def fake_run(argv, cwd):
        calls.append(argv)
        if len(calls) == 1:
            return subprocess.CompletedProcess(argv, -11)  # the compiled run crashed
        summary = {"steps": 10, "seconds": 100.0, "prep_seconds": 5.0, "tokens": 10_000_000, "device": "GPU",
                   "compiled": False, "parameters": 5_800_000, "active_parameters": 3_700_000,
                   "first_loss": {"task": 2.0}, "final_loss": {"task": 0.1}}
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "training.json").write_text(json.dumps(summary))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(lease_train.subprocess, "run", fake_run)
    assert lease_train.main([str(tmp_path / "train.json")]) == 0
    assert [a[a.index("--compile") + 1] for a in calls] == ["on", "off"]
    assert all(a[a.index("--preset") + 1] == "lease" for a in calls)
    record = json.loads((tmp_path / "train.json").read_text())
    assert record["failed"]["returncode"] == -11 and record["returncode"] == 0 and record["compiled"] is False
    assert all(f["ok"] is not False for f in record["figures"])


def test_moe_launches_is_a_lease_engine_step(tmp_path):
    done = subprocess.run([sys.executable, "-m", "llada.bench.lease_engine", "nope", str(tmp_path / "x.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "moe-launches" in done.stderr


CHECK_BUDGET = 200  # `--plan check --budget 200`: what a short slot's ~320 s leaves after a fresh machine starts
LAST_LEASE_S = {"self-check": 27, "moe-launches": 10, "forward-fp8": 25.4, "forward-bf16": 20.5}  # H200 seconds


def test_check_plan_fits_its_budget_on_the_last_leases_timings(tmp_path):
    parts = lease.PLANS["check"](tmp_path, False)
    assert [p.name for p in parts] == ["self-check", "tests", "moe-launches", "forward-fp8", "forward-bf16"]
    assert sum(p.cap_s for p in parts) + FIRST_PREFLIGHT_S + lease.PACK_S <= CHECK_BUDGET  # every cap honoured
    for part in parts:
        assert LAST_LEASE_S.get(part.name, 0) * 1.2 <= part.cap_s, part.name  # each step's time with room
    files = sorted(f for argv in parts[1].argvs for f in argv if f.startswith("tests/"))
    assert files == sorted(lease.CHECK_TESTS)  # one pytest -n 8 where xdist is installed, else a few
    assert all((lease.ROOT / f.split("::")[0]).exists() for f in lease.CHECK_TESTS + lease.DRY_CHECK_TESTS)
    steps = [p.argvs[0][2:4] for p in parts if p.name != "tests"]
    assert steps == [["llada.bench.lease_engine", name] for name in
                     ("self-check", "moe-launches", "forward-fp8", "forward-bf16")]
    assert all("--dry-run" not in a for p in parts for a in p.argvs)


def test_the_preflight_names_the_tuned_table_the_kernels_read():
    from llada.bench.preflight import tuned_table

    assert tuned_table("NVIDIA H200") == "llada/fast/kernels/tuned/nvidia-h200.json"  # the check's GPU
    assert (lease.ROOT / tuned_table("NVIDIA H200")).exists()
    assert tuned_table("NVIDIA A100-SXM4-80GB") is None  # no table: `configs.default_config`


def test_the_check_dry_run_runs_the_engine_dry_runs_and_its_one_quick_test(tmp_path):
    """The check plan on the CPU is the engine plan's dry-run steps plus its own tests part, run here: its one
    quick test passes (`test_lease.py` runs the whole plan as a lease: budget, files, packing)."""
    parts = {p.name: p for p in lease.PLANS["check"](tmp_path, True)}
    engine = {p.name: p for p in lease.engine_parts(tmp_path, True)}
    for name in ("self-check", "forward-fp8", "forward-bf16"):
        assert parts[name].argvs == engine[name].argvs, name
    assert parts["moe-launches"].argvs == [lease.engine_step(tmp_path, True, "moe-launches")]
    [argv] = parts["tests"].argvs if len(parts["tests"].argvs) == 1 else [None]
    assert argv is not None and [a for a in argv if a.startswith("tests/")] == lease.DRY_CHECK_TESTS
    done = subprocess.run(argv, cwd=lease.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
