"""`torchrun --nproc-per-node 2 app.py`: rank 0 serves the page while rank 1 serves its experts (`ui.group`).

One launch on the embedded model (16 experts: 8 a rank, fp32 on the CPU): /generate over HTTP gives what the
same request gives in one process, and Ctrl-C (SIGINT to rank 0) closes the server, releases rank 1 and ends
every rank with status 0. A second launch where one rank is given another model stops every rank at load with
one line from rank 0 naming it. Every wait is bounded (a hang fails, it never blocks CI) and none assumes speed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ui_helpers import api_client, free_port

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
MODEL = ROOT / "assets" / "model"
TIMEOUT = 600  # seconds for the group to load, serve and stop on a loaded machine
REQUEST = ("def add(", "S", None, None, False, 8, 16, None)  # prompt, mode, τs, MBE, block, gen length, model


def group(args: list[str], log: Path, script: Path | None = None) -> subprocess.Popen:
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(script or ROOT / "app.py"), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_for_page(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the group exited ({proc.returncode}) before serving:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(url, timeout=10) as page:
                if page.status == 200:
                    return
        except OSError:  # not listening yet
            time.sleep(0.5)  # waits for the server to listen: a poll inside the TIMEOUT bound above
    raise AssertionError(f"no page at {url} within {TIMEOUT} s:\n{log.read_text()}")


def one_process() -> tuple[str, dict]:
    """The same request in this process: the app's own /generate handler on the same model, without ranks."""
    from ui.models import Models
    from ui.playground.api import generate_api

    *_, (text, stats, _trace) = generate_api(Models([str(MODEL)]), *REQUEST)
    return text, stats


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_rank_0_serves_the_page_while_rank_1_serves_its_experts(tmp_path):
    port, log = free_port(), tmp_path / "group.log"
    proc = group(["--model", str(MODEL), "--host", "127.0.0.1", "--port", str(port)], log)
    try:
        wait_for_page(f"http://127.0.0.1:{port}/", proc, log)
        text, stats = api_client(f"http://127.0.0.1:{port}/").predict(*REQUEST, api_name="/generate")
        pids = {int(r): int(p) for r, p in re.findall(r"\[app\] rank (\d) of 2 \(pid (\d+)\)", log.read_text())}
        assert "split across 2 ranks (torchrun), the one model this group serves" in log.read_text()
        os.kill(pids[0], signal.SIGINT)  # Ctrl-C on rank 0: the server closes, Lead.stop releases rank 1
        assert proc.wait(timeout=TIMEOUT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(pids) == [0, 1] and all(gone(pid) for pid in pids.values())
    alone_text, alone = one_process()
    assert text == alone_text
    keys = ("forwards", "decode_forwards", "cache_forwards", "tokens", "drafts", "edits", "status")
    assert {k: stats[k] for k in keys} == {k: alone[k] for k in keys}


ONE_RANK_ELSEWHERE = """
import os, runpy, sys
if os.environ["RANK"] == "1":  # this rank alone is given a directory with no model in it
    sys.argv[sys.argv.index("--model") + 1] = sys.argv.pop()
else:
    sys.argv.pop()
sys.argv[0] = {app!r}
runpy.run_path({app!r}, run_name="__main__")
"""


def test_a_rank_that_cannot_load_stops_every_rank_with_one_line_from_rank_0(tmp_path):
    script, log = tmp_path / "elsewhere.py", tmp_path / "group.log"
    script.write_text(ONE_RANK_ELSEWHERE.format(app=str(ROOT / "app.py")))
    proc = group(["--model", str(MODEL), "--port", str(free_port()), str(tmp_path)], log, script)
    try:
        status = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text()
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert status != 0 and len(errors) == 1, out
    assert errors[0].startswith("error: rank 1 failed: ValueError: ") and "config.json" in errors[0], out
    assert "Running on" not in out  # no page was served
