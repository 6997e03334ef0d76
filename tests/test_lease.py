"""`python -m llada.bench lease`: parts capped by the time left, failures recorded, a few small files back.

The mechanics run on stand-in parts (a sleep, an exit status, a JSON of figures) in seconds; the dry run
of the check plan on the CPU (Triton's interpreter, tiny shapes), the plan a lent GPU runs (issue #33), is what
CI runs of a lease.
"""

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from llada.bench import lease

ROOT = Path(__file__).resolve().parents[1]
RETURN_FILES, RETURN_BYTES = 8, 16 << 20  # what a lease brings back: 8 files of at most 16 MiB


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _stand_ins(work: Path, dry_run: bool) -> list[lease.Part]:
    figures = json.dumps({"figures": [{"figure": "f", "measured": "1 ms", "target": "<= 2 ms", "paper": "-",
                                       "ok": True}]})
    return [lease.Part("sleeps", "overruns its cap", [_py("import time; time.sleep(60)")], cap_s=2, min_s=1),
            lease.Part("fails", "exits 3", [_py("print('boom'); raise SystemExit(3)")], cap_s=20, min_s=1),
            lease.Part("measures", "writes figures", [_py(f"open({str(work / 'm.json')!r}, 'w').write({figures!r})")],
                       cap_s=20, min_s=1, out="m.json"),
            lease.Part("side-by-side", "two commands", [_py("pass"), _py("raise SystemExit(1)")], cap_s=20, min_s=1),
            lease.Part("too-long", "needs more than is left", [_py("pass")], cap_s=20, min_s=10_000)]


def test_parts_are_capped_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(lease.PLANS, "engine", _stand_ins)
    monkeypatch.setattr(lease, "preflight", lambda run, dry_run: True)
    start = time.monotonic()
    code = lease.main(["--budget", "60", "--out", str(tmp_path)])
    assert time.monotonic() - start < 30  # the sleeper was killed at its cap, not waited for
    summary = json.loads((tmp_path / lease.SUMMARY).read_text())
    status = {p["name"]: p["status"] for p in summary["parts"]}
    assert status == {"sleeps": "timeout", "fails": "failed", "measures": "ok", "side-by-side": "failed",
                      "too-long": "skipped"}
    parts = {p["name"]: p for p in summary["parts"]}
    assert "boom" in parts["fails"]["error"] and parts["fails"]["returncode"] == 3
    assert parts["side-by-side"]["returncode"] == [0, 1]
    assert summary["figures"] == [{"figure": "f", "measured": "1 ms", "target": "<= 2 ms", "paper": "-", "ok": True}]
    assert code == 1  # not every part ran through


def test_the_rest_is_packed_under_the_file_limit(tmp_path, monkeypatch):
    monkeypatch.setitem(lease.PLANS, "engine", lambda work, dry_run: [
        lease.Part("writes", "a large file and a small one",
                   [_py(f"import os; open({str(work / 'big.bin')!r}, 'wb').write(os.urandom(300_000)); "
                        f"open({str(work / 'small.json')!r}, 'w').write('{{}}')")], cap_s=20, min_s=1)])
    monkeypatch.setattr(lease, "preflight", lambda run, dry_run: True)
    monkeypatch.setattr(lease, "FILE_LIMIT", 100_000)
    lease.main(["--budget", "60", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / lease.SUMMARY).read_text())
    assert summary["left_out_of_tar"] == ["big.bin"]  # incompressible: it would not fit
    with tarfile.open(tmp_path / lease.TAR) as tar:
        assert "small.json" in tar.getnames()
    assert (tmp_path / lease.TAR).stat().st_size <= 100_000


def test_without_xdist_the_tests_run_as_several_pytests(monkeypatch):
    monkeypatch.setattr(lease.importlib.util, "find_spec", lambda name: None)
    commands = lease.test_commands([f"tests/t{k}.py" for k in range(6)])
    assert len(commands) == lease.TEST_GROUPS
    assert sorted(f for c in commands for f in c if f.startswith("tests/")) == [f"tests/t{k}.py" for k in range(6)]


def test_a_broken_stack_starts_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(lease.PLANS, "engine", _stand_ins)
    monkeypatch.setattr(lease.sys, "executable", str(tmp_path / "no-python"))  # the preflight cannot start
    assert lease.main(["--budget", "60", "--out", str(tmp_path)]) == 1
    summary = json.loads((tmp_path / lease.SUMMARY).read_text())
    preflight, *rest = summary["parts"]
    assert preflight["status"] == "failed" and "no-python" in preflight["error"]
    assert [p["status"] for p in rest] == ["skipped"] * 5 and rest[0]["error"] == "the preflight failed"


def test_dry_run_brings_back_few_small_files_within_budget(tmp_path):
    budget = 120
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "llada.bench", "lease", "--dry-run", "--plan", "check",
                          "--budget", str(budget), "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=budget + 60)
    elapsed = time.monotonic() - start
    assert elapsed < budget + 15, run.stderr[-2000:]  # the interpreter's start-up aside, within budget
    files = list(tmp_path.iterdir())
    assert 3 <= len(files) <= RETURN_FILES and all(f.stat().st_size <= RETURN_BYTES for f in files)
    summary = json.loads((tmp_path / lease.SUMMARY).read_text())
    assert summary["dry_run"] and summary["elapsed_s"] <= budget
    assert summary["preflight"]["ok"], summary["preflight"]
    names = [p["name"] for p in summary["parts"]]
    assert names == ["preflight"] + [p.name for p in lease.check_plan(tmp_path, True)]
    assert all(p["status"] in ("ok", "failed", "timeout", "skipped") for p in summary["parts"])
    assert not [p for p in summary["parts"] if p["status"] == "failed"], run.stderr[-3000:]
    assert summary["parts"][1]["status"] == "ok"  # the self-check, first: it always fits
    assert {f["name"] for f in summary["files"]} <= {f.name for f in files}


def test_the_summary_names_the_code_by_the_sha256_of_its_sources(tmp_path, monkeypatch):
    tree = tmp_path / "llada"
    (tree / "fast" / "__pycache__").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n")
    (tree / "fast" / "b.py").write_text("y = 2\n")
    first = lease.source_fingerprint(tree)
    (tree / "fast" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0cache")  # bytecode is no source
    assert lease.source_fingerprint(tree) == first and len(first) == 64
    (tree / "a.py").write_text("x = 2\n")  # one byte changed
    assert lease.source_fingerprint(tree) != first
    (tree / "a.py").write_text("x = 1\n")
    assert lease.source_fingerprint(tree) == first
    (tree / "fast" / "b.py").rename(tree / "b.py")  # the same bytes under another path
    assert lease.source_fingerprint(tree) != first
    (tree / "b.py").rename(tree / "fast" / "b.py")
    (tree / "a.py").write_text("x = 1\ny = 2\n")
    (tree / "fast" / "b.py").write_text("")  # bytes moved across the boundary between two files
    assert lease.source_fingerprint(tree) != first

    monkeypatch.setitem(lease.PLANS, "engine", lambda work, dry_run: [])
    monkeypatch.setattr(lease, "preflight", lambda run, dry_run: True)
    lease.main(["--budget", "30", "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / lease.SUMMARY).read_text())
    assert summary["llada_sha256"] == lease.source_fingerprint(ROOT / "llada")
