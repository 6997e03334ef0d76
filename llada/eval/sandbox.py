"""Run an untrusted Python program in a child process it cannot escape from, and always end it.

    box = Sandbox()                                   # bubblewrap when it works here, else limits alone
    done = box.run("/path/to/program.py", ["job.json"], Limits(wall_seconds=5), files={"job.json": b"..."})
    done.result, done.timed_out, done.output, done.returncode

Model-written code never runs in the evaluator's process. Each program runs in a child with:

    limits      CPU seconds, address space, file size, processes (`resource.setrlimit` before exec),
                a wall-clock timeout, at most `output_bytes` of stdout+stderr kept (more: killed)
    a fresh     temporary working directory, removed afterwards; the environment is rebuilt from
    directory   nothing (PATH, LANG, HOME=the directory): no inherited variables, so no secrets
    the end     the child leads its own process group; the whole group is killed when it finishes,
                times out or floods its output, so nothing it started outlives it

Where bubblewrap works (`/usr/bin/bwrap`, Debian's `bubblewrap`), the child also runs in namespaces
of its own: the root file system bound read-only (the user's home hidden except the interpreter), a
private `/tmp`, an empty network namespace, its own PID namespace, no capabilities, and it dies with
its parent. Where it does not, `Sandbox()` says so once on stderr and keeps the limits (the harness
inside adds its own guards: `humaneval_child.py`).

The program reports on a pipe of its own (`result`; its file descriptor is the program's first argument):
a channel it cannot mix up with what it prints.
The kernel does not apply the process limit to root (uid 0); the harness refuses to fork instead.
"""

from __future__ import annotations

import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

BWRAP = "/usr/bin/bwrap"
_WARNED: set[str] = set()


@dataclass(frozen=True)
class Limits:
    """What one child may use. Memory is address space (RLIMIT_AS), as EvalPlus limits it (4 GiB)."""

    wall_seconds: float = 10.0
    cpu_seconds: int | None = None  # None: the wall time, rounded up, plus one
    memory_bytes: int = 4 << 30
    file_bytes: int = 16 << 20  # largest file it may write
    processes: int = 64  # tasks of its user beyond those running now (not enforced for root)
    output_bytes: int = 1 << 20  # stdout + stderr beyond this: killed, `output_over`
    result_bytes: int = 256 << 20  # what it may report on its result pipe


class Finished(NamedTuple):
    """How a child ended. `result` is what it wrote on its result pipe; `output` the first bytes it printed."""

    returncode: int | None  # negative: killed by that signal
    result: bytes
    output: bytes
    timed_out: bool
    output_over: bool
    seconds: float
    isolated: bool  # it ran inside bubblewrap


def bwrap_problem() -> str | None:
    """Why bubblewrap cannot isolate a child here, or None when it can (checked once by running it)."""
    if not os.path.exists(BWRAP):
        return f"{BWRAP} not found (Debian: apt-get install bubblewrap)"
    try:
        probe = subprocess.run([BWRAP, *_bwrap_flags(tempfile.gettempdir()), "true"], capture_output=True,
                               timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{BWRAP} does not start ({err})"
    if probe.returncode != 0:
        return f"{BWRAP} cannot create namespaces here ({probe.stderr.decode(errors='replace').strip()[:200]})"
    return None


def _bwrap_flags(workdir: str, keep: tuple[str, ...] = ()) -> list[str]:
    """Read-only root, private /tmp with the working directory bound writable, no network, no capabilities."""
    hidden = ["/tmp", *_home()]  # replaced by empty file systems inside
    flags = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    flags += [arg for d in hidden for arg in ("--tmpfs", d)]
    flags += [arg for p in _needed(keep, hidden) for arg in ("--ro-bind", p, p)]
    flags += ["--bind", workdir, workdir, "--chdir", workdir, "--unshare-net", "--unshare-pid",
              "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    if os.geteuid() == 0:
        flags += ["--cap-drop", "ALL"]  # as root bwrap would keep every capability (remount, kill, ...)
    return flags


def _home() -> list[str]:
    """The user's home directory, hidden from the child (none when it is / or missing)."""
    home = os.path.realpath(os.path.expanduser("~"))
    return [] if home in ("/", "") or not os.path.isdir(home) else [home]


def _needed(also: tuple[str, ...], hidden: list[str]) -> list[str]:
    """What the interpreter and the program need to start that lies under a hidden directory (a checkout
    or virtual environment in /tmp or the home directory), parents first so they are bound read-only again."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable),
                                           os.path.dirname(os.path.realpath(sys.executable)), *also)}
    return sorted(p for p in paths if os.path.isdir(p) and any(p.startswith(d + os.sep) for d in hidden))


class Sandbox:
    """Runs programs under `Limits`; `isolate` is "auto" (bubblewrap when it works), "bwrap" or "none"."""

    def __init__(self, isolate: str = "auto", python: str = sys.executable):
        if isolate not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolate must be auto, bwrap or none, got {isolate!r}")
        problem = bwrap_problem() if isolate != "none" else None
        if isolate == "bwrap" and problem:
            raise RuntimeError(f"bubblewrap was asked for but cannot be used: {problem}")
        self.isolated = isolate != "none" and problem is None
        self.python = python
        if isolate == "auto" and problem and problem not in _WARNED:
            _WARNED.add(problem)
            print(f"sandbox: {problem}; programs run with resource limits only (the file system and the "
                  "network stay visible to them)", file=sys.stderr)

    def command(self, argv: list[str], workdir: str) -> list[str]:
        """The child's command line: `python -I -B argv...`, inside bubblewrap when isolated."""
        inner = [self.python, "-I", "-B", *argv]
        program = os.path.dirname(os.path.realpath(argv[0])) if os.path.isabs(argv[0]) else None
        return [BWRAP, *_bwrap_flags(workdir, (program,) if program else ()), *inner] if self.isolated else inner

    def run(self, program: str, args: list[str], limits: Limits, files: dict[str, bytes] | None = None) -> Finished:
        """Run `python program RESULT_FD args...` in a fresh directory holding `files`, removed afterwards."""
        workdir = tempfile.mkdtemp(prefix="llada-sandbox-")
        try:
            for name, data in (files or {}).items():
                Path(workdir, name).write_bytes(data)
            read_end, write_end = os.pipe()
            try:
                cmd = self.command([str(program), str(write_end), *args], workdir)
                return self._run(cmd, workdir, limits, read_end, write_end)
            finally:
                os.close(read_end)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run(self, cmd: list[str], workdir: str, limits: Limits, read_end: int, write_end: int) -> Finished:
        start = time.monotonic()
        try:  # both pipe ends are close-on-exec: only this child inherits the write end (pass_fds)
            proc = subprocess.Popen(cmd, cwd=workdir, env=clean_env(workdir), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_end,),
                                    start_new_session=True, preexec_fn=_limiter(limits))
        finally:
            os.close(write_end)  # the child holds the only write end: EOF once it and all it started are gone
        try:
            result, output, timed_out, over = _collect(proc, read_end, limits, start)
        finally:
            _kill_group(proc)
        return Finished(proc.returncode, result, output, timed_out, over, time.monotonic() - start, self.isolated)


def clean_env(workdir: str) -> dict[str, str]:
    """A child's whole environment: nothing inherited."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
            "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _limiter(limits: Limits):
    """The preexec function: set the limits in the child between fork and exec."""
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else int(limits.wall_seconds) + 2
    nproc = _tasks_of_user() + limits.processes if os.geteuid() != 0 else limits.processes

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit, SIGKILL a second later
        for kind, value in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_bytes),
                            (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(kind, (value, value))

    return apply


def _tasks_of_user() -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) of this user now; 0 where /proc says nothing."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    return count


def _collect(proc: subprocess.Popen, result_fd: int, limits: Limits,
             start: float) -> tuple[bytes, bytes, bool, bool]:
    """Read fd 3 and the output until both close or the wall time passes (then the group is killed)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "output")
    sel.register(result_fd, selectors.EVENT_READ, "result")
    got = {"output": bytearray(), "result": bytearray()}
    seen = {"output": 0, "result": 0}
    cap = {"output": limits.output_bytes, "result": limits.result_bytes}
    timed_out = over = False
    while sel.get_map():
        left = limits.wall_seconds - (time.monotonic() - start)
        if left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(timeout=min(left, 1.0)):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            seen[key.data] += len(chunk)
            room = cap[key.data] + 1 - len(got[key.data])
            got[key.data] += chunk[:max(room, 0)]
        if seen["output"] > limits.output_bytes or seen["result"] > limits.result_bytes:
            over = True
            break
    sel.close()
    if not (timed_out or over):  # both pipes closed: give the child what is left of its time to exit
        try:
            proc.wait(timeout=max(limits.wall_seconds - (time.monotonic() - start), 0.01))
        except subprocess.TimeoutExpired:
            timed_out = True
    return bytes(got["result"]), bytes(got["output"][:limits.output_bytes]), timed_out, over


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it leads it), then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it to init rather than hang the run
        pass
    if proc.stdout is not None and not proc.stdout.closed:
        proc.stdout.close()
