"""A hub repo id as `--model` (`llada.weights.hub`): downloaded, then loaded by the real loader; without a
network one `error:` line and exit status 2. Nothing here reaches the network: the download function is
replaced by a copy of a replica, and the one subprocess runs with HF_HUB_OFFLINE=1 and an empty cache."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llada.__main__ import main
from llada.pipeline import Pipeline
from llada.weights import hub
from llada.weights.checkpoint import CheckpointError
from llada.weights.replica import write_replica

REPO = "inclusionAI/LLaDA2.1-mini"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Whatever a test does, the real download is never called."""
    monkeypatch.setattr(hub, "_snapshot_download", lambda repo, progress: pytest.fail(f"tried to download {repo}"))


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    return write_replica(tmp_path_factory.mktemp("hub") / "replica", "tiny")


def _fake_hub(monkeypatch, tmp_path, replica):
    """A download that copies the replica into a snapshot folder named like the hub's (a commit hash)."""
    calls = []

    def download(repo, progress):
        calls.append((repo, progress))
        snap = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
        if not snap.exists():
            shutil.copytree(replica, snap)
        return str(snap)

    monkeypatch.setattr(hub, "_snapshot_download", download)
    return calls


def test_names_read_as_repo_ids_only_when_no_such_directory_exists(tmp_path, monkeypatch):
    assert hub.is_repo_id(REPO) and not hub.is_repo_id("assets/model/") and not hub.is_repo_id("a/b/c")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inclusionAI" / "LLaDA2.1-mini").mkdir(parents=True)
    assert not hub.is_repo_id(REPO)  # a local directory of that name wins
    assert hub.model_path(REPO) == Path(REPO)


def test_pipeline_downloads_a_repo_id_and_loads_it(monkeypatch, tmp_path, replica):
    calls = _fake_hub(monkeypatch, tmp_path, replica)
    pipe = Pipeline.load(REPO, quantize="int8", decode_check=False)
    assert calls == [(REPO, False)] and pipe.name == REPO
    assert type(pipe.model.layers[1].mlp.experts).__name__ == "Int8Experts"


def test_cli_downloads_with_progress_then_decodes(monkeypatch, tmp_path, replica, capsys):
    calls = _fake_hub(monkeypatch, tmp_path, replica)
    code = main(["generate", "--model", REPO, "--prompt-ids", "11,42,7", "--gen-length", "8", "--block-length", "8",
                 "--quantize", "int8", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert calls == [(REPO, True)] and len(json.loads(out.out)["output_ids"]) == 8


def test_a_refused_download_is_one_error_line_and_status_2(monkeypatch, capsys):
    def refused(repo, progress):
        raise ConnectionError("Failed to resolve 'huggingface.co'\n(a long traceback text)")

    monkeypatch.setattr(hub, "_snapshot_download", refused)
    code = main(["generate", "--model", REPO, "--prompt", "hi"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {REPO}: cannot download from the Hugging Face hub: ConnectionError")
    assert len(err.splitlines()) == 1
    with pytest.raises(CheckpointError, match="cannot download"):
        hub.model_path(REPO)


def test_offline_without_a_cache_fails_within_seconds(tmp_path):
    """The real huggingface_hub, offline, in a fresh process: one line, status 2, no traceback, no hang."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf")}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "llada", "generate", "--model", REPO, "--prompt", "hi"], env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.startswith(f"error: {REPO}: cannot download"), out.stderr
    assert "not in the local hub cache" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert time.monotonic() - start < 60  # imports on a loaded 2-core machine take most of it


def test_the_app_downloads_hub_ids_and_keeps_directories(monkeypatch, tmp_path, replica):
    from ui.models import cli_models

    calls = _fake_hub(monkeypatch, tmp_path, replica)
    got = cli_models([REPO, str(replica)])
    assert got == [(REPO, str(tmp_path / "hub" / "models--inclusionAI--LLaDA2.1-mini" / "snapshots" / "0123abcd")),
                   str(replica)] and calls == [(REPO, True)]
