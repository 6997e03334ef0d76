"""The program that runs inside the sandbox: one problem's code on its inputs, one JSON line per group out.

    python -I -B humaneval_child.py RESULT_FD job.json        (started by `humaneval_score`, never by hand)

It is a standalone script (standard library only; `-I` keeps the project off its path) and also the
module where the value codec lives, so the evaluator imports `encode` / `decode` from here.

The job (written by the evaluator into the child's directory, read and deleted before any of the
problem's code runs) names a `mode`:

    "check"      exec the solution, call `entry_point` on every input of each group (base, then plus)
                 with a time limit per input, and compare with the expected outputs as EvalPlus does:
                 `out == exp`; floats within atol (1e-6 when atol is 0 and exp holds floats) with
                 `np.allclose(rtol=1e-7)` after a type (and length) check; HumanEval/32 `find_zero`
                 passes when |poly(xs, out)| <= atol. A group stops at its first failing input.
                 Each group runs on a fresh exec of the code.
    "reference"  run the canonical solution on a copy of every input; report outputs and seconds.

Every group writes one line to RESULT_FD: {"group", "passed", "kind", "index", "detail"} or, for the
reference, {"group", "outputs", "times"}. A failure's `kind`: syntax, missing (no entry point), error,
wrong (an output differs), timeout, memory, exit (SystemExit), output (printed more than allowed),
process (started a process), write (wrote outside its directory), file_size (a file over the size
limit), network, ctypes (looked up a C function). Guards installed
before the code runs: an audit hook that refuses those actions (it cannot be removed), stdin empty,
stdout/stderr swallowed up to a bound.

Values travel as JSON with tags for what JSON lacks: tuple {"$t": [..]}, set {"$s": [..]}, dict
{"$d": [[k, v], ..]}, non-finite float {"$f": "nan"}, big int {"$i": hex}, bytes {"$b": hex}, complex.
An expected output over 4 KB (unless it is floats) travels as {"$h": sha256} of a normal form that
equates what `==` equates among these types (HumanEval/15's longest output is 147 MB of text); a
candidate's output is then compared by its digest.
"""

from __future__ import annotations

import array
import copy
import hashlib
import json
import math
import os
import signal
import sys
import time

OUTPUT_LIMIT = 1 << 20  # characters a solution may print through sys.stdout / sys.stderr
BIG_INT = 1 << 64  # larger ints travel as hex (str(int) is limited to 4300 digits)
EXACT = 1 << 53  # ints below this are exact as floats
DIGEST_OVER = 4096  # an expected output longer than this (as JSON, floats aside) travels as its digest
PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
                  "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn"}
WRITE_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move"}
NETWORK_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
                  "socket.gethostbyname", "socket.__new__"}
CTYPES_EVENTS = {"ctypes.dlsym", "ctypes.dlsym/handle"}  # looking up a C function (importing ctypes is fine)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


# ---------------------------------------------------------------- values ----

def encode(x):
    """A value as tagged JSON (TypeError for what cannot travel)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x if -BIG_INT < x < BIG_INT else {"$i": hex(x)}
    if isinstance(x, float):
        return x if math.isfinite(x) else {"$f": repr(x)}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, tuple):
        return {"$t": [encode(v) for v in x]}
    if isinstance(x, (set, frozenset)):
        return {"$s": [encode(v) for v in x]}
    if isinstance(x, dict):
        return {"$d": [[encode(k), encode(v)] for k, v in x.items()]}
    if isinstance(x, bytes):
        return {"$b": x.hex()}
    if isinstance(x, complex):
        return {"$c": [encode(x.real), encode(x.imag)]}
    raise TypeError(f"a value of type {type(x).__name__} cannot be encoded")


def decode(x):
    """The value of tagged JSON (inverse of `encode`)."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) != 1 or not next(iter(x)).startswith("$"):
        return {k: decode(v) for k, v in x.items()}  # a plain object (a job, an input read from JSON)
    (tag, v), = x.items()
    if tag == "$t":
        return tuple(decode(e) for e in v)
    if tag == "$s":
        return {decode(e) for e in v}
    if tag == "$d":
        return {decode(k): decode(val) for k, val in v}
    if tag == "$f":
        return float(v)
    if tag == "$i":
        return int(v, 16)
    if tag == "$b":
        return bytes.fromhex(v)
    if tag == "$c":
        return complex(decode(v[0]), decode(v[1]))
    if tag == "$h":
        return Digest(v)
    raise ValueError(f"unknown tag {tag!r}")


class Digest(str):
    """An expected output too long to travel: the sha256 of its `normal` form."""


def normal(x):
    """A JSON-able form that is equal for values Python's == finds equal (1 == 1.0 == True, {1} == frozenset({1})).

    Not for NaN (nan != nan, but their forms are equal): a digest is never taken of float outputs."""
    if isinstance(x, (bool, int)) or (isinstance(x, float) and x.is_integer()):
        return ["n", hex(int(x))]
    if isinstance(x, float):
        return ["f", repr(x)]
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)):
        tag = "l" if isinstance(x, list) else "t"
        if x and all(type(v) is float or (type(v) in (int, bool) and -EXACT < v < EXACT) for v in x):
            packed = array.array("d", (float(v) + 0.0 for v in x)).tobytes()  # + 0.0: -0.0 == 0.0
            return [tag, "numbers", hashlib.sha256(packed).hexdigest()]  # a fast path: 10 M numbers in 1 s
        return [tag, [normal(v) for v in x]]
    if isinstance(x, (set, frozenset)):
        return ["s", sorted(json.dumps(normal(v)) for v in x)]
    if isinstance(x, dict):
        return ["d", sorted([json.dumps(normal(k)), normal(v)] for k, v in x.items())]
    if isinstance(x, bytes):
        return ["b", x.hex()]
    raise TypeError(f"no normal form for {type(x).__name__}")


def digest(x) -> str:
    return hashlib.sha256(json.dumps(normal(x)).encode()).hexdigest()


def expected_form(out):
    """How a canonical output travels: tagged JSON, or its digest when long (float outputs never)."""
    enc = encode(out)
    if not is_floats(out) and len(json.dumps(enc)) > DIGEST_OVER:
        return {"$h": digest(out)}
    return enc


# ---------------------------------------------------------------- guards ----

class Refused(BaseException):
    """An action the sandbox does not allow (a BaseException: `except Exception` does not swallow it)."""

    def __init__(self, kind: str, what: str):
        super().__init__(f"{kind} refused: {what}")
        self.kind = kind


class Timeout(BaseException):
    pass


class OutputLimit(BaseException):
    pass


class Sink:
    """sys.stdout / sys.stderr for the solution: counts what it prints, keeps nothing."""

    def __init__(self):
        self.chars = 0

    def write(self, text) -> int:
        self.chars += len(text)
        if self.chars > OUTPUT_LIMIT:
            raise OutputLimit(f"printed more than {OUTPUT_LIMIT} characters")
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class Empty:
    """sys.stdin for the solution: input() gets EOF."""

    def readline(self, *_):
        return ""

    def read(self, *_):
        return ""


def install_guards(workdir: str, refusals: list) -> None:
    """The audit hook (for the rest of this process's life) and the swallowed standard streams."""
    root = os.path.realpath(workdir)

    def inside(path) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        full = os.path.realpath(os.fsdecode(path))  # relative to the current directory, wherever it is
        return full == root or full.startswith(root + os.sep)

    def hook(event: str, args: tuple) -> None:
        kind = None
        if event in PROCESS_EVENTS:
            kind = "process"
        elif event in NETWORK_EVENTS:
            kind = "network"
        elif event in CTYPES_EVENTS:
            kind = "ctypes"
        elif event == "open" and _writes(args) and not inside(args[0]):
            kind = "write"
        elif event in WRITE_EVENTS and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes))):
            kind = "write"
        if kind:
            refusals.append(kind)
            raise Refused(kind, f"{event} {args[:2]!r}"[:200])

    sys.addaudithook(hook)
    sys.stdin, sys.stdout, sys.stderr = Empty(), Sink(), Sink()


def _writes(args: tuple) -> bool:
    _, mode, flags = args
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def _alarm(_signum, _frame):
    raise Timeout("time limit")


# ------------------------------------------------------------------ runs ----

def kind_of(err: BaseException, refusals: list) -> str:
    """The failure kind of an exception (a refusal seen earlier wins: the code may have caught it)."""
    if refusals:
        return refusals[0]
    for cls, kind in ((Refused, None), (Timeout, "timeout"), (MemoryError, "memory"), (SystemExit, "exit"),
                      (OutputLimit, "output"), (SyntaxError, "syntax")):
        if isinstance(err, cls):
            return kind or err.kind
    if isinstance(err, OSError) and err.errno == 27:  # EFBIG: a file over the size limit
        return "file_size"
    return "error"


def load(code: str, entry_point: str, limit: float):
    """exec the code in fresh globals (within `limit` seconds); its entry point."""
    scope: dict = {}  # as EvalPlus: __name__ falls back to the builtins' ("builtins"), not "__main__"
    compiled = compile(code, "solution.py", "exec")
    with time_limit(limit):
        exec(compiled, scope)
    if not callable(scope.get(entry_point)):
        raise LookupError(f"no function {entry_point!r}")
    return scope[entry_point]


class time_limit:
    """SIGALRM after `seconds` (raises Timeout in the running code)."""

    def __init__(self, seconds: float):
        self.seconds = max(seconds, 1e-3)

    def __enter__(self):
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)


def is_floats(x) -> bool:
    """EvalPlus's test: a float, or a non-empty list / tuple of floats, or a float array."""
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return type(x).__name__ == "ndarray" and str(getattr(x, "dtype", "")) in ("float64", "float32")


def allclose(out, exp, atol: float) -> bool:
    """np.allclose(out, exp, rtol=1e-7, atol) (numpy when it is installed)."""
    try:
        import numpy as np
    except ImportError:
        pairs = zip(out, exp) if isinstance(exp, (list, tuple)) else [(out, exp)]
        return all(a == b or abs(a - b) <= atol + 1e-7 * abs(b) for a, b in pairs)
    return bool(np.allclose(out, exp, rtol=1e-07, atol=atol))


def poly(xs: list, x: float) -> float:
    """The oracle of HumanEval/32 (find_zero): the polynomial with coefficients xs at x."""
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))


def matches(out, exp, inp, atol: float, entry_point: str) -> tuple[bool, float]:
    """Is `out` right? Also the atol for the next inputs (EvalPlus raises it to 1e-6 once floats appear)."""
    if entry_point == "find_zero":
        return abs(poly(*inp, out)) <= atol, atol
    if isinstance(exp, Digest):
        try:
            exact = digest(out) == exp
        except (TypeError, ValueError, RecursionError):
            exact = False
    else:
        exact = out == exp
    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact and atol != 0:
        if type(out) is not type(exp) or (isinstance(exp, (list, tuple)) and len(out) != len(exp)):
            return False, atol
        return allclose(out, exp, atol), atol
    return bool(exact), atol


def check_group(job: dict, group: dict, refusals: list) -> dict:
    """Run one group's inputs until the first failure; the verdict."""
    deadline = time.monotonic() + group["timeout"]
    atol, index = job["atol"], None
    try:
        fn = load(job["code"], job["entry_point"], group["timeout"])
        for index, (inp, exp, limit) in enumerate(zip(group["inputs"], group["expected"], group["limits"])):
            with time_limit(min(limit, deadline - time.monotonic())):
                out = fn(*inp)
            ok, atol = matches(out, exp, inp, atol, job["entry_point"])
            if not ok:
                return {"passed": False, "kind": "wrong", "index": index, "detail": f"input {index}: wrong output"}
    except LookupError as err:
        return {"passed": False, "kind": "missing", "index": None, "detail": str(err)}
    except BaseException as err:  # noqa: B036 - SystemExit, timeouts and refusals are verdicts too
        detail = f"{type(err).__name__}: {err}"[:300]
        return {"passed": False, "kind": kind_of(err, refusals), "index": index, "detail": detail}
    if refusals:  # refused and swallowed with a bare except: still not a pass
        return {"passed": False, "kind": refusals[0], "index": None, "detail": f"{refusals[0]} refused"}
    return {"passed": True, "kind": None, "index": None, "detail": ""}


def reference_group(job: dict, group: dict) -> dict:
    """The canonical solution's outputs and seconds on (copies of) each input."""
    fn = load(job["code"], job["entry_point"], group["timeout"])
    outputs, times = [], []
    for inp in group["inputs"]:
        inp = copy.deepcopy(inp)
        start = time.perf_counter()
        out = fn(*inp)
        times.append(time.perf_counter() - start)
        outputs.append(expected_form(out))
    return {"outputs": outputs, "times": times}


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv: list[str]) -> None:
    result_fd, job_path = int(argv[0]), argv[1]
    with open(job_path, encoding="utf-8") as f:
        job = decode(json.load(f))
    os.remove(job_path)
    signal.signal(signal.SIGALRM, _alarm)
    refusals: list = []
    me = os.getpid()
    install_guards(os.getcwd(), refusals)
    for group in job["groups"]:
        if job["mode"] == "reference":
            line = reference_group(job, group)
        else:
            line = check_group(job, group, refusals)
        if os.getpid() != me:  # a forked copy of this process: it never reports
            os._exit(0)
        _write_all(result_fd, (json.dumps({"group": group["name"], **line}) + "\n").encode())
        refusals.clear()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
