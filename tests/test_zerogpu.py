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
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llada.config import ModelConfig
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
        time.sleep(0.5)  # waits for: the app's port (poll interval of the bounded wait)
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
    assert len(moved) == 3  # the embedded model, the small 2.2 model and the mini: everything offered is resident
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
    assert later[0]["fn"] == "generate" and later[0]["duration"] >= 30  # never below the app's request budget
    assert stats["engine"]["engine"] == "reference"  # chosen inside the GPU call (the stand-in keeps the CPU)


def test_a_sweep_runs_as_calls_that_each_fit_a_visitors_quota(tiny_model_dir, tmp_path):
    from llada.eval.sweep_cache import SweepCache
    from ui import zerogpu
    from ui.explorer import sweeps
    from ui.models import Models

    assert zerogpu.CLOCK.sweep_seconds(sweeps.DECODE_BUDGET.seconds) <= 120  # an unauthenticated day: 2 min
    models = Models([str(tiny_model_dir)])
    settings = (["0.5"], ["off", "0.5"], ["off"], ["add"], 1, 8)
    (*_, cut) = sweeps.run_sweep(models, SweepCache(tmp_path), models.default, *settings, seconds=0.0)
    assert sweeps.TIME_UP in cut.progress  # what split_sweep continues on

    calls, script = [], [["Sweeping", f"**Stopped** ({sweeps.TIME_UP})"], ["Sweeping", "**Done**"], ["never"]]

    def call(data):
        calls.append(data)
        yield from script[len(calls) - 1]

    frames = list(zerogpu.split_sweep(call, "grid", 10, more=lambda f: sweeps.TIME_UP in f))
    assert frames == script[0] + script[1] and calls == ["grid", "grid"]  # continued once, stopped when done
    calls.clear()
    assert len(list(zerogpu.split_sweep(call, "grid", 1, more=lambda f: True))) == 2  # at most `calls` calls


def test_the_engine_is_chosen_inside_the_first_gpu_call_of_each_worker(tiny_model_dir, monkeypatch):
    import types

    from ui import models as m
    from ui import zerogpu

    fake = types.ModuleType("spaces")
    fake.GPU = lambda fn, duration=60: fn
    monkeypatch.setitem(sys.modules, "spaces", fake)
    monkeypatch.setenv("SPACES_ZERO_GPU", "1")
    monkeypatch.setattr(zerogpu, "ON_CALL", [])
    monkeypatch.setattr(m, "ON_CALL", zerogpu.ON_CALL)
    models = m.Models([str(tiny_model_dir)], rt=m.Runtime("zerogpu", "cpu", 8 * 2**30, fp8=True))
    models.load_resident()
    assert zerogpu.ON_CALL == [models.engines_on_gpu]
    pipe = models.get(None)
    seen = []
    handler = zerogpu.on_gpu(lambda: seen.append(getattr(pipe, "engine_pid", None)) or pipe.engine)
    report = handler()
    assert seen == [os.getpid()] and report.engine == "reference"  # chosen before the handler ran, in this process
    pipe.engine_pid = -1  # as if this were a new worker: chosen again there
    handler()
    assert pipe.engine_pid == os.getpid()


ZEROGPU_TORCH = ("2.1.0", "2.1.1", "2.1.2", "2.2.0", "2.2.2", "2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0")  # its docs
TORCH_TRITON = {"2.6.0": "3.2.0", "2.7.1": "3.3.1", "2.8.0": "3.4.0"}  # the triton each torch release requires


def _pins(name: str) -> dict[str, str]:
    lines = [x.strip() for x in (ROOT / name).read_text(encoding="utf-8").splitlines()]
    return dict(re.match(r"([A-Za-z0-9_.-]+)(.*)", x).groups() for x in lines if x and not x.startswith("#"))


def test_the_zerogpu_requirements_pin_a_documented_torch_and_otherwise_match():
    space, ci = _pins("requirements-zerogpu.txt"), _pins("requirements.txt")
    torch_version = space["torch"].removeprefix("==")
    assert torch_version in ZEROGPU_TORCH and space["triton"] == "==" + TORCH_TRITON[torch_version]
    assert {k: v for k, v in space.items() if k not in ("torch", "triton")} == \
        {k: v for k, v in ci.items() if k not in ("torch", "triton")}


def test_every_module_parses_as_the_spaces_python():
    import ast

    files = [*ROOT.glob("llada/**/*.py"), *ROOT.glob("ui/**/*.py"), ROOT / "app.py"]
    for path in files:  # ZeroGPU runs Python 3.10.13 only; CI runs a newer one
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 10))
    assert len(files) > 50


# suggested_hardware -> (compute capability, GiB): the GPU a Space of that flavor has
HARDWARE = {"a100-large": (80, 80), "a10g-large": (86, 24), "a10g-small": (86, 24), "t4-small": (75, 16)}


def test_the_suggested_hardware_runs_the_mini_on_the_fast_bf16_engine(tmp_path, monkeypatch):
    import yaml

    from llada.weights import memory
    from llada.weights.replica import replica_config
    from ui import models as m

    flavor = yaml.safe_load((ROOT / "spaces.yaml").read_text(encoding="utf-8"))["suggested_hardware"]
    arch, gib = HARDWARE[flavor]
    assert arch >= 80  # the fused kernels (bf16 grouped GEMMs) run from sm80: the self-checked fast engine
    mini = tmp_path / "mini"
    mini.mkdir()
    (mini / "config.json").write_text(json.dumps(replica_config("mini")))
    gpu = m.Models([(MINI, str(mini))], rt=m.Runtime("cuda", "cuda", (gib - 2) * 2**30, fp8=arch >= 89))
    monkeypatch.setattr(memory, "available_bytes", lambda device: 128 * 2**30)  # a Space host's RAM, not this one's
    zero = m.Models([(MINI, str(mini))], rt=m.Runtime("zerogpu", "cuda", m.ZEROGPU_ROOM, fp8=True))
    for models in (gpu, zero):  # bf16 experts (no FP8 on sm80; on ZeroGPU's H200 the mini fits in bf16)
        assert [(o.name, str(o.dtype), o.quantize) for o in models.offered] == [(MINI, "torch.bfloat16", None)]
