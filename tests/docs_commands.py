"""Every command in README.md and docs/*.md works as written: how the commands are read and run.

The tests are `tests/test_docs_commands*.py`, one file per part of `PARTS` so that parallel workers
(`--dist loadfile` hands out whole files) run the slow documents side by side.

Each fenced ```bash, ```sh or ```console block is read line by line: a line ending in a backslash goes
on with the next, a line that starts with `#` is a comment, a console block's `$ ` prompt is dropped.
A command that needs what a test run cannot give says so, either in its trailing comment
(`... # needs: gpu`) or for a whole block on the line just above it (`<!-- needs: network, server -->`):

    gpu       a CUDA GPU            network   the internet (pip, the hub)
    file      a file the user makes first (DIR, samples.jsonl)
    server    it serves until stopped             browser   Chromium
    time      minutes or more (training, HumanEval, full benchmarks)

Such a command is checked, not run: `python -m MODULE [SUBCOMMAND]` must answer `--help` with a usage
line (a document's `--help` checks run in one process, one after another, so that their imports are paid
once), anything else must parse (`bash -n`). Every other command runs as written from the repository
root with stdin closed, `.venv/bin/python` being the interpreter that runs these tests and `/tmp/` a fresh
directory per file; one file's commands run in their order, so a command may read what an earlier one of
its file wrote. A command that names no `/tmp/` path runs once per test process, however many documents
repeat it. The
```python snippets run too, and every relative link and every repository path named in backticks must
exist, so the documents follow the code when files move.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = {"gpu", "network", "file", "server", "browser", "time"}
SHELL_FENCES = {"bash", "sh", "console"}
README_MAX_LINES = 250  # the README reads in five minutes; everything else lives in docs/
TIMEOUT_S = 600
# documents whose commands take minutes, each part run by its own test file; every other one is in
# tests/test_docs_commands.py
PARTS = {
    "training": ("docs/training.md",),  # an evaluation of the embedded model
    "playground": ("docs/playground.md", "docs/humaneval.md"),  # the app's and the evaluations' --help
    "benchmarks": ("docs/benchmarks.md", "docs/gpu.md"),  # a dozen benchmarks' --help and the census
    "distributed": ("docs/distributed.md",),  # a 2-rank torchrun run
}


def docs_of(part: str | None) -> list[Path]:
    """The documents of one part of PARTS; None: those in no part."""
    named = {name for docs in PARTS.values() for name in docs}
    if part is None:
        return [d for d in DOCS if d.relative_to(ROOT).as_posix() not in named]
    return [d for d in DOCS if d.relative_to(ROOT).as_posix() in PARTS[part]]


@dataclass(frozen=True)
class Command:
    text: str  # the command as a shell reads it, continuations joined
    line: int  # where it starts in its file (1-based)
    needs: frozenset[str]  # empty: run it as written


def _needs(comment: str) -> set[str]:
    m = re.search(r"needs:\s*([\w ,]+)", comment)
    return {w for w in re.split(r"[ ,]+", m[1].strip()) if w} if m else set()


def _trailing_comment(command: str) -> str:
    """The comment at the end of a command line ('' when there is none), quotes respected."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[i:]
    return ""


def commands(markdown: str) -> list[Command]:
    """The shell commands of a markdown text, in order."""
    found, lines = [], markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w+)\s*$", lines[i])
        if not fence or fence[1] not in SHELL_FENCES:
            i += 1 + (bool(fence) and _skip_block(lines, i))
            continue
        block_needs = _needs(lines[i - 1]) if i and lines[i - 1].lstrip().startswith("<!--") else set()
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            start, text = i, lines[i]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            text = text.strip().removeprefix("$ ")
            if text and not text.startswith("#"):
                needs = block_needs | _needs(_trailing_comment(text))
                found.append(Command(text, start + 1, frozenset(needs)))
        i += 1
    return found


def _skip_block(lines: list[str], i: int) -> int:
    """Lines from a non-shell fence at i to its closing fence (so its text is never read as commands)."""
    j = i + 1
    while j < len(lines) and not lines[j].startswith("```"):
        j += 1
    return j - i


def _shell(command: str, tmp: Path | None = None) -> str:
    """The command for bash: this interpreter for the venv's, and `tmp` for /tmp/ (a run leaves no trace)."""
    command = command.replace("/tmp/", f"{tmp}/") if tmp else command  # first: the interpreter may live in /tmp
    return command.replace(".venv/bin/python", shlex.quote(sys.executable))


def _help_of(command: str) -> list[str] | None:
    """`python -m MODULE [SUBCOMMAND] --help` for a python -m command; None for anything else."""
    words = shlex.split(command, comments=True)
    if "-m" not in words or not any(w.endswith(("python", "python3")) for w in words):
        return None
    at = words.index("-m")
    subcommands = []
    for w in words[at + 2:]:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", w):
            break
        subcommands.append(w)
    return [sys.executable, "-m", words[at + 1], *subcommands, "--help"]


# runs `python -m MODULE [SUBCOMMAND] --help` for each argv of a list in one process: the imports they share
# (torch, gradio) are paid once, not once per command (each alone costs seconds of CPU)
HELP_RUNNER = """
import contextlib, io, json, runpy, sys, traceback
path, answers = sys.argv[1], []
for argv in json.loads(sys.argv[2]):
    sys.argv, buf, code = list(argv), io.StringIO(), 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
            print("" if stop.code is None or isinstance(stop.code, int) else stop.code)
        except BaseException:
            traceback.print_exc()
            code = 1
    answers.append([code, buf.getvalue()])
with open(path, "w") as out:
    json.dump(answers, out)
"""


def helps(argvs: list[list[str]], tmp: Path) -> dict[tuple[str, ...], tuple[int, str]]:
    """(exit code, output) of each `_help_of` command, the distinct ones run in one process (HELP_RUNNER)."""
    distinct = list(dict.fromkeys(tuple(a) for a in argvs))
    if not distinct:
        return {}
    answers = tmp / "helps.json"
    done = subprocess.run([sys.executable, "-c", HELP_RUNNER, str(answers),
                           json.dumps([list(a[2:]) for a in distinct])], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode or not answers.exists():
        return {a: (done.returncode or 1, done.stderr[-600:]) for a in distinct}
    return {a: (code, text) for a, (code, text) in zip(distinct, json.loads(answers.read_text()))}


RAN: dict[str, str | None] = {}  # command -> what was wrong ('' or None), for commands that touch no /tmp/


def check(cmd: Command, tmp: Path | None = None, answered: dict | None = None) -> str | None:
    """What is wrong with one command ('' or None when nothing): run it, or check it when it needs more.

    `answered`: the `helps` of the document's commands, run beforehand (else this one's is run alone)."""
    if unknown := cmd.needs - NEEDS:
        return f"unknown needs {sorted(unknown)} (known: {sorted(NEEDS)})"
    if cmd.needs:
        help_cmd = _help_of(cmd.text)
        if help_cmd:
            if answered is None or tuple(help_cmd) not in answered:
                with tempfile.TemporaryDirectory() as scratch:
                    answered = helps([help_cmd], Path(scratch))
            code, text = answered[tuple(help_cmd)]
            if code or "usage" not in text.lower():
                return f"{' '.join(help_cmd[1:])} failed ({code}): {text[-600:]}"
            return None
        argv = ["bash", "-n", "-c", _shell(cmd.text)]
        done = subprocess.run(argv, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        return f"{' '.join(argv[1:])} failed ({done.returncode}): {(done.stderr or done.stdout)[-600:]}" \
            if done.returncode else None
    if cmd.text in RAN:  # the same command in another document (README.md repeats docs/cli.md's first ones)
        return RAN[cmd.text]
    done = subprocess.run(["bash", "-c", _shell(cmd.text, tmp)], cwd=ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    why = f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}" if done.returncode else None
    if "/tmp/" not in cmd.text:  # what reads or writes /tmp/ may depend on its document's earlier commands
        RAN[cmd.text] = why
    return why


def problems_of(doc: Path, tmp: Path) -> str:
    """Every command of one document checked in its order ('' when all work)."""
    found = commands(doc.read_text(encoding="utf-8"))
    answered = helps([h for c in found if c.needs and not c.needs - NEEDS and (h := _help_of(c.text))], tmp)
    return "\n".join(f"{doc.name}:{c.line}: {c.text}\n    {why}" for c in found
                     if (why := check(c, tmp, answered)))
