"""The sandbox: what a hostile or broken program does is a failure of that program, and the run goes on.

Solutions are checked through the real harness (`humaneval_child.py`) in real child processes, inside
bubblewrap where it works on this machine (the CI installs it) and with limits alone otherwise.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from llada.eval import sandbox as sb
from llada.eval.humaneval_child import encode
from llada.eval.humaneval_data import CHILD
from llada.eval.humaneval_score import verdict
from llada.eval.sandbox import Limits, Sandbox


def check(box: Sandbox, code: str, inputs=([1], [2]), expected=(2, 3), wall: float = 20.0, limit: float = 1.0):
    """The verdict of `code` (defining f) on inputs, as the evaluator reads it."""
    groups = [{"name": "base", "inputs": list(inputs), "expected": [encode(e) for e in expected],
               "limits": [limit] * len(inputs), "timeout": limit * len(inputs) + 1}]
    job = {"mode": "check", "code": textwrap.dedent(code), "entry_point": "f", "atol": 0, "groups": groups}
    done = box.run(str(CHILD), ["job.json"], Limits(wall_seconds=wall), files={"job.json": json.dumps(job).encode()})
    return verdict("T/0", ["base"], done)


@pytest.fixture(scope="module", params=["auto", "none"])
def box(request):
    """Each behaviour twice: with bubblewrap where it works here, and with the limits and the harness alone."""
    return Sandbox(request.param)


HOSTILE = {  # name -> (code, the failure kind it must get)
    "infinite loop": ("def f(x):\n    while True:\n        pass\n", "timeout"),
    "fork bomb": ("import os\ndef f(x):\n    while True:\n        os.fork()\n", "process"),
    "subprocess": ("import subprocess\ndef f(x):\n    subprocess.run(['true'])\n    return x + 1\n", "process"),
    "memory bomb": ("def f(x):\n    a = bytearray(8 << 30)\n    return x + 1\n", "memory"),
    "sys.exit at import": ("import sys\nsys.exit(0)\ndef f(x):\n    return x + 1\n", "exit"),
    "sys.exit in the call": ("import sys\ndef f(x):\n    sys.exit(3)\n", "exit"),
    "os._exit": ("import os\ndef f(x):\n    os._exit(0)\n", "exit"),
    "huge print": ("def f(x):\n    while True:\n        print('x' * 4096)\n", "output"),
    "huge raw output": ("import os\ndef f(x):\n    while True:\n        os.write(1, b'x' * 65536)\n", "output"),
    "catches everything": ("import os\ndef f(x):\n    try:\n        os.fork()\n    except BaseException:\n"
                           "        pass\n    return x + 1\n", "process"),
    "C fork": ("import ctypes\ndef f(x):\n    ctypes.CDLL(None).fork()\n    return x + 1\n", "ctypes"),
    "syntax error": ("def f(x)\n    return x\n", "syntax"),
    "no entry point": ("def g(x):\n    return x + 1\n", "missing"),
    "wrong answer": ("def f(x):\n    return x\n", "wrong"),
    "raises": ("def f(x):\n    return 1 / 0\n", "error"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_or_broken_program_fails_with_its_kind(box, name):
    code, kind = HOSTILE[name]
    v = check(box, code)
    assert (v.base, v.error) == (False, kind), v


def test_a_write_outside_its_directory_is_refused_and_nothing_is_written(box, tmp_path):
    target = tmp_path / "escaped.txt"
    v = check(box, f"def f(x):\n    open({str(target)!r}, 'w').write('x')\n    return x + 1\n")
    assert (v.base, v.error) == (False, "write")
    assert not target.exists()
    inside = check(box, "def f(x):\n    open('scratch.txt', 'w').write('x')\n    return x + 1\n")
    assert inside.base and inside.error is None  # its own directory is writable


def test_the_run_goes_on_after_hostile_programs(box):
    for name in ("fork bomb", "memory bomb", "huge print"):
        assert not check(box, HOSTILE[name][0]).base
    assert check(box, "def f(x):\n    return x + 1\n").base


def raw(box: Sandbox, program: str, limits: Limits = Limits(wall_seconds=20)) -> sb.Finished:
    """Run a plain program (no harness, no guards) that reports on the fd given as its first argument."""
    return box.run("program.py", [], limits, files={"program.py": textwrap.dedent(program).encode()})


def test_the_environment_is_rebuilt_from_nothing(box, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    done = raw(box, """
        import json, os, sys
        os.write(int(sys.argv[1]), json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode())
    """)
    seen = json.loads(done.result)
    assert "SECRET_TOKEN" not in seen["env"]
    assert set(seen["env"]) - {"PWD"} == set(sb.clean_env("/x"))  # bubblewrap sets PWD
    assert os.path.basename(seen["cwd"]).startswith("llada-sandbox-")
    assert not os.path.exists(seen["cwd"])  # the fresh directory is removed afterwards


def test_the_cpu_limit_ends_a_busy_program():
    done = raw(Sandbox("none"), "while True:\n    pass\n", Limits(wall_seconds=60, cpu_seconds=1))
    assert done.returncode == -24 and not done.timed_out  # SIGXCPU from RLIMIT_CPU, long before the wall time


def test_the_whole_process_group_is_killed_at_the_end():
    """A program that leaves a sleeping child behind: the child is gone when `run` returns."""
    done = raw(Sandbox("none"), """
        import os, sys, time
        pid = os.fork()
        if pid == 0:
            for fd in (1, 2, int(sys.argv[1])):
                os.close(fd)
            time.sleep(120)  # waits for: being killed with the group (the sandboxed grandchild outlives its parent)
            os._exit(0)
        os.write(int(sys.argv[1]), str(pid).encode())
        os._exit(0)
    """)
    pid = int(done.result)
    deadline = time.monotonic() + 90  # a generous bound: the child's end is waited for, not assumed
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)  # waits for: the child's end (poll interval, 90 s bound)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()  # a zombie has been killed, only not reaped yet
    except FileNotFoundError:
        return False


def isolated_box() -> Sandbox:
    box = Sandbox("auto")
    if not box.isolated:
        pytest.skip(f"bubblewrap cannot isolate here: {sb.bwrap_problem()}")
    return box


def test_bubblewrap_gives_a_read_only_root_a_private_tmp_and_no_network():
    box = isolated_box()
    target = Path(__file__).resolve().parent / f".escape-{os.getpid()}.txt"  # on the root file system
    marker = Path(tempfile.gettempdir()) / f"llada-marker-{os.getpid()}"  # the host's /tmp
    marker.write_text("host")
    done = raw(box, f"""
        import json, os, socket, sys
        out = {{}}
        try:
            open({str(target)!r}, 'w')
            out['write'] = 'written'
        except OSError as err:
            out['write'] = err.errno
        out['tmp'] = os.listdir('/tmp')
        try:
            socket.create_connection(('1.1.1.1', 53), timeout=2)
            out['net'] = 'connected'
        except OSError as err:
            out['net'] = type(err).__name__
        os.write(int(sys.argv[1]), json.dumps(out).encode())
    """)
    seen = json.loads(done.result)
    written = target.exists()
    target.unlink(missing_ok=True)
    marker.unlink()
    # read-only where the checkout is visible; absent where it lies in the host's /tmp or home
    assert seen["write"] in (errno.EROFS, errno.ENOENT) and not written
    assert any(name.startswith("llada-sandbox-") for name in seen["tmp"]) and marker.name not in seen["tmp"]
    assert seen["net"] != "connected"


def test_without_bubblewrap_the_evaluator_says_so_once(monkeypatch, capsys):
    monkeypatch.setattr(sb, "BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(sb, "_WARNED", set())
    assert not Sandbox("auto").isolated and not Sandbox("auto").isolated
    err = capsys.readouterr().err
    assert err.count("resource limits only") == 1
    with pytest.raises(RuntimeError, match="bubblewrap"):
        Sandbox("bwrap")
    v = check(Sandbox("auto"), HOSTILE["fork bomb"][0])
    assert (v.base, v.error) == (False, "process")  # the limits and the harness's guards stay
