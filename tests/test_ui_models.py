"""Which checkpoints the playground offers: local directories, and preloaded hub snapshots on a GPU."""

import shutil

import pytest

from ui import models as m


def _fake_hub_cache(root, repo, source):
    """The hub cache layout: models--org--name/{refs/main, snapshots/<rev>/...}."""
    base = root / ("models--" + repo.replace("/", "--"))
    rev = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(source, base / "snapshots" / rev)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return base / "snapshots" / rev


def test_preloaded_repos_come_from_spaces_yaml(tmp_path):
    f = tmp_path / "spaces.yaml"
    f.write_text("sdk: gradio\npreload_from_hub:\n  - org/model config.json,model.safetensors\n  - org/other\n")
    assert m.preloaded_repos(f) == ["org/model", "org/other"]
    assert m.preloaded_repos(tmp_path / "none.yaml") == []


def test_hub_snapshots_are_found_locally_and_never_downloaded(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    snap = _fake_hub_cache(tmp_path, "org/model", tiny_model_dir)
    assert m.hub_snapshots(["org/model", "org/absent"]) == [str(snap)]


@pytest.mark.parametrize("gpu", [True, False])
def test_hub_models_are_offered_only_with_a_gpu(monkeypatch, tmp_path, gpu):
    monkeypatch.setattr(m, "has_gpu", lambda: gpu)
    monkeypatch.setattr(m, "preloaded_repos", lambda: ["org/model"])
    monkeypatch.setattr(m, "hub_snapshots", lambda repos: [str(tmp_path)])
    dirs = m.model_dirs([], env="", default=None)
    assert (str(tmp_path) in dirs) is gpu
