"""Every command in README.md and docs/*.md works as written (see tests/docs_commands.py for how they are read).

This file runs the documents in no part of `PARTS` and the checks of the reading itself; the slow parts have
their own files (tests/test_docs_commands_*.py) so that parallel workers run them side by side.
"""

import re
import subprocess
import sys

import pytest

from docs_commands import (DOCS, PARTS, README_MAX_LINES, ROOT, TIMEOUT_S, Command, _help_of, _shell, check,
                           commands, docs_of, helps, problems_of)

pytestmark = pytest.mark.slow  # a dozen processes, most of them importing torch: minutes on 2 cores


@pytest.mark.parametrize("doc", docs_of(None), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_works_as_written(doc, tmp_path):
    assert not (problems := problems_of(doc, tmp_path)), problems


def test_every_document_is_in_one_part():
    parts = [docs_of(None), *(docs_of(part) for part in PARTS)]
    assert sorted(d for docs in parts for d in docs) == sorted(DOCS)
    assert all(docs for docs in parts[1:]), "a part names no document: " + str(PARTS)


def test_the_python_snippets_run():
    for doc in DOCS:
        for n, code in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)):
            done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
            assert done.returncode == 0, f"{doc.name}, python snippet {n}: {done.stderr[-800:]}"


def test_links_and_named_paths_exist():
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for link in re.findall(r"\]\(([^)#\s]+)\)", text):
            if not re.match(r"\w+://", link) and not (doc.parent / link).exists():
                missing.append(f"{doc.name}: link {link}")
        for path in re.findall(r"`((?:llada|ui|tests|assets|docs|bench)/[\w./-]+)`", text):
            if not (ROOT / path).exists():
                missing.append(f"{doc.name}: path {path}")
    assert not missing, "\n".join(missing)


def test_the_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_commands_are_read_as_a_shell_reads_them():
    text = "\n".join([
        "```python", "print('not a command')  # needs: gpu", "```",
        "<!-- needs: network -->", "```bash", "pip install x", "```",
        "```console", "# a comment", "$ .venv/bin/python -m llada generate --model a \\",
        "    --prompt 'a # b' --json   # needs: gpu, file", "echo '#x'", "```",
    ])
    found = commands(text)
    assert [c.text for c in found] == ["pip install x",
                                       (".venv/bin/python -m llada generate --model a --prompt 'a # b' --json   "
                                        "# needs: gpu, file"), "echo '#x'"]
    assert [set(c.needs) for c in found] == [{"network"}, {"gpu", "file"}, set()]
    assert [c.line for c in found] == [6, 10, 12]
    assert _help_of(found[1].text)[2:] == ["llada", "generate", "--help"]
    assert _help_of("pip install x") is None
    assert check(Command("true", 1, frozenset({"gpus"}))).startswith("unknown needs")
    assert check(Command("exit 3", 1, frozenset())) == "exit 3: "


def test_help_checks_run_in_one_process_and_each_answers_for_itself(tmp_path):
    """A document's `--help` checks share one process: a module that is missing or answers without a usage
    line still fails on its own, and the others' answers are their own."""
    argvs = [_help_of(f".venv/bin/python -m {m}") for m in ("llada.fast.kernels.aot", "llada.no_such_module",
                                                             "this", "llada.train")]
    answered = helps(argvs, tmp_path)
    assert [code for code, _ in answered.values()] == [0, 1, 0, 0]
    assert "usage: python -m llada.fast.kernels.aot" in answered[tuple(argvs[0])][1]
    assert "No module named llada.no_such_module" in answered[tuple(argvs[1])][1]
    assert "Beautiful is better than ugly" in answered[tuple(argvs[2])][1]  # runs, but prints no usage
    assert "usage" in answered[tuple(argvs[3])][1] and "aot" not in answered[tuple(argvs[3])][1]
    cmd = Command(".venv/bin/python -m this   # needs: gpu", 1, frozenset({"gpu"}))
    assert check(cmd, tmp_path, answered).startswith("-m this --help failed (0): ")


def test_a_checkout_under_tmp_keeps_its_interpreter(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", "/tmp/ci/.venv/bin/python")
    shell = _shell(".venv/bin/python -m llada.weights.replica /tmp/r --shape tiny", tmp_path)
    assert shell == f"/tmp/ci/.venv/bin/python -m llada.weights.replica {tmp_path}/r --shape tiny"
