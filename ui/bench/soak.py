"""Does the server's memory stay flat? `python -m ui.bench.soak --minutes 30 --visitors 4 [--model DIR]`.

Starts the playground (`app.py`) in a child process and lets `--visitors` simulated visitors use it the way the
page does, each visit a new session (raw HTTP to Gradio's queue, the page's own events found in its config
by their elem_ids): open the tab (its heartbeat), run a prompt, scrub the replay, export the trace, compare
S and Q now and then, call /generate, then close the tab. The server's resident memory (RSS, from /proc) and
the size of its temporary folders (exports and Gradio's copies of them: the child's TMPDIR and
GRADIO_TEMP_DIR point into one scratch folder) are sampled every `--every` seconds. After the warm-up (the
first `--warmup` share of the samples), memory is flat when the mean of the last third of the samples is
within `--tolerance` of the mean of the first third after warm-up; the script prints every sample, the
verdict, and exits 1 when memory grew.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[2]
SESSIONS_ENV = "LLADA_SESSIONS"  # how many sessions the app keeps (ui.demo.SESSIONS)
PROMPTS = ["176+771=", "sort 78505685=", "reverse sun tree snow door:", "def inc(tuyul):\n", "hello there",
           "def add(a, b):"]


class Sample(NamedTuple):
    seconds: float
    rss_mib: float
    temp_mib: float  # the app's temporary folders: export originals and Gradio's copies
    requests: int
    errors: int
    visits: int


def rss_mib(pid: int) -> float:
    """Resident memory of process `pid` in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def folder_mib(folder: Path) -> float:
    """Bytes of the files under `folder`, in MiB (files deleted while walking are skipped)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:
            pass
    return total / 2**20


def serve(port: int, model: str | None, env: dict | None = None) -> subprocess.Popen:
    """`app.py` on `port` in a child process, once it answers."""
    args = [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1"]
    args += ["--model", model] if model else []
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the app exited with status {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/config", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the app did not answer within 300 s")


class Page:
    """The page's events, found in the app's config by the elem_ids of docs UI_CONTRACT."""

    def __init__(self, url: str):
        self.url = url
        config = httpx.get(f"{url}/config", timeout=30).json()
        self.elem = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
        self.values = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}
        self.deps = config["dependencies"]

    def event(self, elem_id: str, trigger: str) -> dict:
        """The server event a `trigger` on the component `elem_id` starts (not a step of a chain; of several,
        the one reading the most inputs: a click on Generate also stops a replay, with no input)."""
        found = [dep for dep in self.deps if dep.get("backend_fn") and dep.get("trigger_after") is None and
                 any(self.elem.get(t[0]) == elem_id and t[1] == trigger for t in dep["targets"])]
        if not found:
            raise KeyError(f"no {trigger} event on #{elem_id}")
        return max(found, key=lambda dep: len(dep["inputs"]))

    def data(self, dep: dict, **values) -> list:
        """The event's inputs: the page's defaults, with `values` by elem_id (dashes as underscores)."""
        given = {k.replace("_", "-"): v for k, v in values.items()}
        return [given.get(self.elem.get(i), self.values.get(i)) for i in dep["inputs"]]


class Heartbeat:
    """A tab's heartbeat: GET /gradio_api/heartbeat/SESSION held open (read in a thread) while the tab is open.

    The server says ALIVE only every 15 s or so, so waiting for the reader to notice would hold each visit
    up to that long; `close` shuts the connection's socket instead, as a closing tab does, and the server
    sees the disconnect and drops the session's state."""

    def __init__(self, client: httpx.Client, url: str, session: str):
        self.client, self.url, self.session = client, url, session
        self.opened = threading.Event()
        self.socket: socket.socket | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            with self.client.stream("GET", f"{self.url}/gradio_api/heartbeat/{self.session}") as stream:
                self.socket = stream.extensions["network_stream"].get_extra_info("socket")
                self.opened.set()
                for _ in stream.iter_raw():
                    pass
        except httpx.HTTPError:
            pass  # the connection was shut under the reader: the tab is closed
        finally:
            self.opened.set()

    def close(self, bound: float = 90.0) -> bool:
        """Drop the connection; True once the reader has ended (within `bound` seconds)."""
        self.opened.wait(bound)
        if self.socket is not None:
            try:
                self.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the server
        self.thread.join(bound)
        return not self.thread.is_alive()


class Visitor:
    """One simulated visitor: visits one after another, each a new session with its own heartbeat."""

    def __init__(self, page: Page, seed: int):
        self.page, self.rng = page, random.Random(seed)
        self.requests = self.errors = self.visits = 0
        self.last_error = ""
        self.client = httpx.Client(timeout=120)  # one client per visitor: a new one builds a TLS context (slow)
        self.beats = httpx.Client(timeout=httpx.Timeout(60, read=None))  # the heartbeat is quiet for seconds

    def call(self, session: str, dep: dict, data: list) -> dict:
        self.requests += 1
        body = {"data": data, "fn_index": dep["id"], "session_hash": session, "event_data": None,
                "trigger_id": dep["targets"][0][0] if dep["targets"] else None}
        joined = self.client.post(f"{self.page.url}/gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            self.fail(f"#{dep['id']}: join {joined.status_code}")
            return {}
        with self.client.stream("GET", f"{self.page.url}/gradio_api/queue/data",
                                params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    msg = json.loads(line[6:])
                    if msg.get("msg") in ("process_completed", "unexpected_error"):
                        if not msg.get("success"):
                            self.fail(f"#{dep['id']}: {str(msg.get('output'))[:200]}")
                        return msg
        self.fail(f"#{dep['id']}: no answer")
        return {}

    def fail(self, why: str) -> None:
        self.errors += 1
        self.last_error = why

    def visit(self) -> None:
        session, page = uuid.uuid4().hex, self.page
        beat = Heartbeat(self.beats, page.url, session)
        prompt = self.rng.choice(PROMPTS)
        run = page.event("generate", "click")
        self.call(session, run, page.data(run, prompt=prompt, gen_length=32))
        scrub = page.event("step", "release")
        for step in range(0, 8, 2):
            self.call(session, scrub, [None, step, False])
        self.call(session, page.event("export", "click"), [None])
        if self.rng.random() < 0.3:
            compare = page.event("run-compare", "click")
            self.call(session, compare, page.data(compare, prompt=prompt, gen_length=32))
        self.requests += 1
        api = self.client.post(f"{page.url}/gradio_api/call/generate", timeout=60,
                               json={"data": [prompt, "S", None, None, False, None, 32, "", None]})
        if api.status_code == 200:
            event = api.json()["event_id"]
            with self.client.stream("GET", f"{page.url}/gradio_api/call/generate/{event}") as stream:
                refused = [line for line in stream.iter_lines() if line.startswith("event: error")]
            if refused:  # the call was answered with an error event (a wrong input count, say)
                self.fail("/generate: answered with an error event")
        else:
            self.fail(f"/generate: {api.status_code}")
        if not beat.close():  # the tab closes: its heartbeat connection drops at once
            self.fail("heartbeat: the stream did not end when its connection closed")
        self.visits += 1


def soak(minutes: float, visitors: int, every: float, model: str | None, port: int, visits: int | None = None,
         sessions: int | None = None) -> list[Sample]:
    """Visitors use the app for `minutes` (or until `visits` visits, sampled every `every` visits then)."""
    scratch = Path(tempfile.mkdtemp(prefix="llada-soak-"))
    (scratch / "tmp").mkdir()
    env = os.environ | ({SESSIONS_ENV: str(sessions)} if sessions else {}) | {
        "TMPDIR": str(scratch / "tmp"), "GRADIO_TEMP_DIR": str(scratch / "gradio")}
    proc = serve(port, model, env)
    page = Page(f"http://127.0.0.1:{port}")
    crowd = [Visitor(page, seed) for seed in range(visitors)]
    stop = threading.Event()

    def walk(v: Visitor) -> None:
        while not stop.is_set():
            v.visit()

    threads = [threading.Thread(target=walk, args=(v,), daemon=True) for v in crowd]
    for t in threads:
        t.start()
    samples, t0, mark = [], time.monotonic(), every
    try:
        while (time.monotonic() - t0 < minutes * 60) if visits is None else sum(v.visits for v in crowd) < visits:
            done = sum(v.visits for v in crowd)
            if visits is None:
                time.sleep(every)
            elif done < mark:
                time.sleep(0.2)
                continue
            mark += every
            s = Sample(time.monotonic() - t0, rss_mib(proc.pid), folder_mib(scratch), sum(v.requests for v in crowd),
                       sum(v.errors for v in crowd), done)
            samples.append(s)
            print(f"{s.seconds:7.0f} s  RSS {s.rss_mib:7.1f} MiB  temp {s.temp_mib:6.1f} MiB  visits {s.visits:5d}  "
                  f"requests {s.requests:6d}  errors {s.errors}", flush=True)
    finally:
        stop.set()
        for why in {v.last_error for v in crowd if v.last_error}:
            print(f"last error: {why}", flush=True)
        for t in threads:
            t.join(timeout=120)
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    return samples


class Verdict(NamedTuple):
    early_mib: float  # mean RSS of the first third after warm-up
    late_mib: float  # mean RSS of the last third
    growth: float  # late / early - 1
    flat: bool


def verdict(samples: list[Sample], warmup: float, tolerance: float) -> Verdict:
    """Flat when the last third's mean RSS is within `tolerance` of the first third's, after warm-up."""
    kept = [s.rss_mib for s in samples[int(len(samples) * warmup):]]
    if len(kept) < 3:
        raise ValueError(f"too few samples after warm-up ({len(kept)}): soak longer or sample more often")
    third = len(kept) // 3
    early, late = statistics.mean(kept[:third]), statistics.mean(kept[-third:])
    return Verdict(early, late, late / early - 1, late / early - 1 <= tolerance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Server memory under simulated visitors over time.")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--visitors", type=int, default=4)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples (visits with --visits)")
    parser.add_argument("--visits", type=int, default=None, help="stop after this many visits instead of --minutes")
    parser.add_argument("--sessions", type=int, default=None, help="sessions the app keeps (default: its own)")
    parser.add_argument("--warmup", type=float, default=0.2, help="share of the samples left out as warm-up")
    parser.add_argument("--tolerance", type=float, default=0.05, help="growth allowed after warm-up")
    parser.add_argument("--model", default=None, help="one more model directory to offer (the default one runs)")
    parser.add_argument("--port", type=int, default=7899)
    args = parser.parse_args(argv)
    samples = soak(args.minutes, args.visitors, args.every, args.model, args.port, args.visits, args.sessions)
    v = verdict(samples, args.warmup, args.tolerance)
    last = samples[-1]
    print(f"{last.visits} visits, {last.requests} requests, {last.errors} errors · after warm-up: "
          f"{v.early_mib:.1f} MiB -> "
          f"{v.late_mib:.1f} MiB ({100 * v.growth:+.1f}%, allowed {100 * args.tolerance:+.0f}%) · "
          f"{'flat' if v.flat else 'GROWING'}")
    return 0 if v.flat else 1


if __name__ == "__main__":
    sys.exit(main())
