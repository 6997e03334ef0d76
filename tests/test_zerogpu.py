"""ZeroGPU, simulated: `python app.py` with a stand-in `spaces` package (tests/zerogpu_stub) and the
LLaDA2.1-mini replica in the hub cache as `inclusionAI/LLaDA2.1-mini`.

The stand-in fails if torch was imported before it; it records every `.to("cuda")` and every GPU slot.
The app must start with every offered model resident (loaded at start, in the main process, moved to
cuda, the mini in bf16), offer the mini by name, and serve a request in a slot sized from the request
without loading anything again.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llada.config import ModelConfig
from ui.models import gpu_seconds
from ui_helpers import free_port

gradio_client = pytest.importorskip("gradio_client")

ROOT = Path(__file__).resolve().parents[1]
STUB = Path(__file__).resolve().parent / "zerogpu_stub"
MINI = "inclusionAI/LLaDA2.1-mini"
REV = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(root: Path, repo: str, source: Path) -> Path:
    base = root / ("models--" + repo.replace("/", "--"))
    shutil.copytree(source, base / "snapshots" / REV)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(REV)
    return base / "snapshots" / REV


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for(port: int, proc: subprocess.Popen, output: Path, seconds: float = 300) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with {proc.returncode}:\n{output.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"app.py did not start in {seconds} s:\n{output.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def space(tmp_path_factory, replica_dir):
    tmp = tmp_path_factory.mktemp("zerogpu")
    snapshot = _hub_cache(tmp / "hub", MINI, replica_dir)
    log, output, port = tmp / "spaces.jsonl", tmp / "app.log", free_port()
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(STUB), str(ROOT)]), "SPACES_ZERO_GPU": "true",
                        "HF_HUB_CACHE": str(tmp / "hub"), "HF_HUB_OFFLINE": "1", "ZEROGPU_STUB_LOG": str(log),
                        "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1", "LLADA_MODELS": ""}
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT,
                                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_for(port, proc, output)
        yield {"url": f"http://127.0.0.1:{port}/", "log": log, "snapshot": snapshot, "started": _events(log)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_spaces_is_imported_first_and_every_model_is_resident_at_start(space, replica_dir):
    events = space["started"]
    assert events[0]["event"] == "import"  # the stand-in raises if torch came first
    moved = [e for e in events if e["event"] == "to_cuda" and e["module"] == "LLaDA2MoE"]
    mini = sum(ModelConfig.from_json(replica_dir / "config.json").parameter_counts().values())
    assert {"dtype": "torch.bfloat16", "elements": mini} in [{"dtype": e["dtype"], "elements": e["elements"]}
                                                               for e in moved]  # the mini, in bf16
    assert len(moved) == 2  # the embedded model and the mini: everything offered is resident
    assert not [e for e in events if e["event"] == "gpu_call"]


def test_the_mini_is_offered_by_name_and_served_in_a_sized_slot(space):
    client = gradio_client.Client(space["url"], verbose=False)
    config = client.config
    selector = next(c for c in config["components"] if c.get("props", {}).get("elem_id") == "model")
    assert [MINI, str(space["snapshot"])] in selector["props"]["choices"]  # a name, not a commit-hash path
    text, stats = client.predict("def add(", "S", 0.0, None, False, 8, 16, MINI, api_name="/generate")
    assert stats["tokens"] == 16
    assert client.predict(api_name="/trace")["model"] == MINI
    later = _events(space["log"])[len(space["started"]):]
    assert [e["event"] for e in later] == ["gpu_call"]  # one slot, nothing loaded or moved again
    assert later[0]["fn"] == "generate" and later[0]["duration"] == gpu_seconds(16, 8)
