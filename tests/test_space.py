"""The Space settings: README.md's front matter (what Hugging Face reads) equals spaces.yaml, its values are
ones the Hub documents, and the runtime requirements stay apart from the test tools."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = {"sdk", "sdk_version", "python_version", "app_file", "short_description", "models", "preload_from_hub",
            "suggested_hardware"}
# huggingface.co/docs/hub/spaces-config-reference lists these flavors for suggested_hardware (ZeroGPU is
# chosen in the Space's settings, not here)
DOCUMENTED_HARDWARE = {"cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "a10g-small", "a10g-large",
                       "a10g-largex2", "a10g-largex4", "a100-large"}
ZEROGPU_PYTHON = "3.10.13"  # the one Python version ZeroGPU runs (huggingface.co/docs/hub/spaces-zerogpu)
TEST_ONLY = ("pytest", "playwright", "gradio_client", "pytest-timeout")


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


def requirements(name: str) -> list[str]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    return block[1].strip().splitlines() if block else []


def test_spaces_yaml_is_complete():
    s = spaces_settings()
    assert REQUIRED <= set(s)
    assert s["sdk"] == "gradio" and (ROOT / s["app_file"]).exists()
    assert str(s["sdk_version"]).split(".")[0] == "6"  # requirements.txt pins gradio 6.x
    assert isinstance(s["python_version"], str) and len(s["short_description"]) <= 60


def test_space_values_are_documented_ones():
    s = spaces_settings()
    assert s["suggested_hardware"] in DOCUMENTED_HARDWARE, s["suggested_hardware"]
    assert s["python_version"] == ZEROGPU_PYTHON
    for repo in ("inclusionAI/LLaDA2.1-mini", "inclusionAI/LLaDA2.2-mini"):  # the family's current minis
        assert repo in s["models"] and repo in s["preload_from_hub"], repo


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


def test_runtime_requirements_hold_no_test_tools():
    runtime = requirements("requirements.txt")
    assert not [r for r in runtime if re.split(r"[<>=!~ ]", r)[0].lower() in TEST_ONLY]
    dev = requirements("requirements-dev.txt")
    assert dev[0] == "-r requirements.txt"  # the dev file installs the runtime too
    assert {re.split(r"[<>=!~ ]", r)[0].lower() for r in dev[1:]} >= {"pytest", "playwright", "gradio_client"}


def test_readme_commands_and_ci_agree():
    setup, tests = readme_commands()
    assert "pip install -r requirements.txt" in setup and setup.endswith("python app.py")
    assert "pip install -r requirements-dev.txt" in tests and tests.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1].strip() == tests  # CI runs exactly the README's test command
