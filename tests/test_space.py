"""The Space settings: README.md's front matter (what Hugging Face reads) equals spaces.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = {"sdk", "sdk_version", "python_version", "app_file", "short_description", "models", "preload_from_hub",
            "suggested_hardware"}


def front_matter(text: str) -> dict | None:
    """The YAML between a leading '---' line and the next '---' line; None when there is none."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---"), None)
    if end is None:
        return None
    return yaml.safe_load("\n".join(lines[1:end])) or {}


def spaces_settings() -> dict:
    return yaml.safe_load((ROOT / "spaces.yaml").read_text(encoding="utf-8"))


def test_spaces_yaml_is_complete():
    s = spaces_settings()
    assert REQUIRED <= set(s)
    assert s["sdk"] == "gradio" and (ROOT / s["app_file"]).exists()
    assert str(s["sdk_version"]).split(".")[0] == "6"  # requirements.txt pins gradio 6.x
    assert isinstance(s["python_version"], str) and len(s["short_description"]) <= 60


def test_front_matter_parser():
    text = "---\n" + (ROOT / "spaces.yaml").read_text(encoding="utf-8") + "---\n# Title\n"
    assert front_matter(text) == spaces_settings()
    assert front_matter("# no front matter\n") is None


def test_readme_front_matter_equals_spaces_yaml():
    readme = ROOT / "README.md"
    assert readme.exists(), "README.md is missing"
    settings = front_matter(readme.read_text(encoding="utf-8"))
    assert settings is not None, "README.md has no front matter: paste spaces.yaml between two '---' lines at its top"
    assert settings == spaces_settings()
