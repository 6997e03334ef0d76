"""Does the server's memory stay flat under visitors? Three measurements, one JSON each.

    python -m ui.bench.memory_soak soak --minutes 30 --visitors 4 --out bench/results/memory-soak.json
    python -m ui.bench.memory_soak visits --visits 40 --out /tmp/visits.json
    python -m ui.bench.memory_soak runs --runs 40 --out /tmp/runs.json

`soak` is `python -m ui.bench.soak` (the app in a child process, simulated visitors, each visit a new session that
runs, scrubs, exports, compares, calls `/generate` and closes its tab) with every RSS sample and the verdict
written to `--out`: after warm-up (the first `--warmup` share of the samples) the mean RSS of the last third
must be within `--tolerance` of the first third's. RSS is what the machine sees, but it moves with the
allocator by a few MiB, so it needs time to show a slow leak.

`visits` runs the app in this process and counts, with `tracemalloc`, the Python memory still held after
`--visits` visits (after warm-up visits, every closed session's unload done, and a garbage collection):
retained bytes per visit, and where the most of them were allocated. A cache that keeps something per
session shows here after a few dozen visits, however noisy RSS is.

`runs` is the same count for one tab left open: Generate clicked `--runs` times after `--warmup-runs`, the
bytes still held per run. What a session keeps is bounded (its last run, one copy of the page's values), so
after warm-up a run must leave almost nothing. All three exit 1 when memory grew.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import NamedTuple

from . import soak
from ..sessions import ONE_SHOTS, queue

RETAINED_KIB = 64.0  # per visit, after warm-up: a session's copy of the page alone is ~250 KiB (9-31 KiB measured)
RUN_KIB = 8.0  # per run in one open tab, after warm-up: 0.2-2.5 KiB measured; a run's charts alone are ~30 KiB


class Retained(NamedTuple):
    visits: int
    kib_per_visit: float  # traced Python memory still held after the visits, per visit
    sessions_left: int  # sessions the server still holds (the one-shot API calls' newest few)
    errors: int
    top: list[dict]  # the allocation sites that grew most: {"kib", "count", "where"}


def _settle(demo, bound: float = 60.0) -> int:
    """Wait (at most `bound` s) until every closed tab's session is dropped; the sessions left."""
    deadline = time.monotonic() + bound
    while True:
        left = set(demo.state_holder.session_data) - set(ONE_SHOTS.sessions)
        if not left or time.monotonic() > deadline:
            return len(demo.state_holder.session_data)
        time.sleep(0.2)


def _traced(demo) -> int:
    _settle(demo)
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def retained(visits: int = 40, warmup: int = 6, frames: int = 8, model: str | None = None,
             port: int | None = None) -> Retained:
    """The app in this process, one visitor: `warmup` visits, then `visits` traced ones; what they left held.

    Tracing starts `ONE_SHOTS.keep + 1` visits before the count does: a bounded cache that replaces an untraced
    entry with a traced one would otherwise look like growth (the untraced one's release is not counted)."""
    demo = _served(model, port)
    try:
        visitor = soak.Visitor(soak.Page(demo.local_url.rstrip("/")), seed=0)
        for _ in range(warmup):
            visitor.visit()
        _compare_once(visitor)
        tracemalloc.start(frames)
        for _ in range(ONE_SHOTS.keep + 1):
            visitor.visit()
        before_bytes, before = _traced(demo), tracemalloc.take_snapshot()
        for _ in range(visits):
            visitor.visit()
        after_bytes, after = _traced(demo), tracemalloc.take_snapshot()
        tracemalloc.stop()
        return Retained(visits, (after_bytes - before_bytes) / 1024 / visits, len(demo.state_holder.session_data),
                        visitor.errors, _grown(before, after, frames))
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        demo.close()


def _served(model: str | None, port: int | None):
    """The app in this process, launched as app.py launches it."""
    from ..demo import LOOK, build_demo
    from ..models import Models, model_dirs

    demo = build_demo(Models(model_dirs([model] if model else [])))
    queue(demo, max_size=64, default_concurrency_limit=8)  # as app.py
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **LOOK)
    return demo


def _grown(before, after, frames: int) -> list[dict]:
    """The allocation sites that grew most between two snapshots: {"kib", "count", "where"}."""
    return [{"kib": round(s.size_diff / 1024, 1), "count": s.count_diff, "where": s.traceback.format()[-frames:]}
            for s in after.compare_to(before, "traceback")[:8]]


def session_runs(runs: int = 40, warmup: int = 20, gen_length: int = 8, frames: int = 4, model: str | None = None,
                 port: int | None = None) -> Retained:
    """One tab left open clicks Generate `warmup` times, then `runs` traced times; what those runs left held
    per run, the smaller of the two halves' counts (`visits` counts the runs). Every run is the page's own
    Generate event, on the same prompt."""
    demo = _served(model, port)
    try:
        visitor = soak.Visitor(soak.Page(demo.local_url.rstrip("/")), seed=0)
        session, page = uuid.uuid4().hex, visitor.page
        beat = soak.Heartbeat(visitor.beats, page.url, session)
        run = page.event("generate", "click")
        data = page.data(run, prompt=soak.PROMPTS[0], gen_length=gen_length)
        for _ in range(warmup):
            visitor.call(session, run, data)
        tracemalloc.start(frames)
        visitor.call(session, run, data)  # the run the count starts after: its own frames are traced too
        halves = []  # (KiB per run, snapshot before, snapshot after) of each half of the counted runs
        for count in (runs // 2, runs - runs // 2):
            before_bytes, before = _drained()
            for _ in range(count):
                visitor.call(session, run, data)
            after_bytes, after = _drained()
            halves.append(((after_bytes - before_bytes) / 1024 / count, before, after))
        tracemalloc.stop()
        beat.close()
        # a leak grows in both halves; a one-time cost (a library's first regex or schema) lands in only one
        kib, before, after = min(halves, key=lambda h: h[0])
        return Retained(runs, kib, len(demo.state_holder.session_data), visitor.errors, _grown(before, after, frames))
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        demo.close()


def _drained(tries: int = 8, gap: float = 0.25) -> tuple[int, tracemalloc.Snapshot]:
    """Traced bytes and a snapshot once the server's last messages have left: the least of a few collected
    samples `gap` s apart (a message still being encoded or sent when the run's answer arrived — one SSE frame
    of ~70 KiB under load — is not something the run keeps)."""
    best = None
    for _ in range(tries):
        gc.collect()
        now = tracemalloc.get_traced_memory()[0]
        if best is None or now < best[0]:
            best = (now, tracemalloc.take_snapshot())
        time.sleep(gap)
    return best


def _compare_once(visitor: soak.Visitor) -> None:
    """A tab that compares S and Q, then closes (a visit compares only now and then): what the first comparison
    loads (plotly's JSON encoder, ...) is loaded before the count."""
    session, page = uuid.uuid4().hex, visitor.page
    beat = soak.Heartbeat(visitor.beats, page.url, session)
    compare = page.event("run-compare", "click")
    visitor.call(session, compare, page.data(compare, prompt=soak.PROMPTS[0], gen_length=32))
    beat.close()


def _machine() -> dict:
    """Where and on what the measurement ran: the commit, the CPUs, their load, Python."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=soak.ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"commit": commit, "cpus": os.cpu_count(), "load": list(os.getloadavg()),
            "python": platform.python_version()}


def _write(out: str | None, result: dict) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}", flush=True)


def settled_growth(samples: list[soak.Sample], after_s: float = 300.0) -> float | None:
    """How far RSS rose above its value at `after_s` seconds, at most, until the end (MiB); None if too short."""
    late = [s.rss_mib for s in samples if s.seconds >= after_s]
    return max(late) - late[0] if len(late) >= 2 else None


def run_soak(args) -> int:
    samples = soak.soak(args.minutes, args.visitors, args.every, args.model, args.port, args.visits, args.sessions)
    v = soak.verdict(samples, args.warmup, args.tolerance)
    last, rise = samples[-1], settled_growth(samples)
    print(f"{last.visits} visits, {last.requests} requests, {last.errors} errors · after warm-up: {v.early_mib:.1f} "
          f"-> {v.late_mib:.1f} MiB ({100 * v.growth:+.2f}%, allowed {100 * args.tolerance:+.0f}%) · "
          f"{'flat' if v.flat else 'GROWING'} · from minute 5: "
          f"{'n/a' if rise is None else f'{rise:+.1f} MiB'} · temp folders at most "
          f"{max(s.temp_mib for s in samples):.1f} MiB, {last.temp_mib:.1f} MiB at the end", flush=True)
    _write(args.out, {"command": "python -m ui.bench.memory_soak " + " ".join(args.argv), "machine": _machine(),
                      "minutes": args.minutes, "visitors": args.visitors, "warmup": args.warmup,
                      "tolerance": args.tolerance, "visits": last.visits, "requests": last.requests,
                      "errors": last.errors, "early_mib": round(v.early_mib, 1), "late_mib": round(v.late_mib, 1),
                      "growth_pct": round(100 * v.growth, 2), "flat": v.flat,
                      "rss_rise_from_minute_5_mib": None if rise is None else round(rise, 1),
                      "temp_max_mib": round(max(s.temp_mib for s in samples), 1),
                      "temp_last_mib": round(last.temp_mib, 1),
                      "samples": [s._asdict() | {"rss_mib": round(s.rss_mib, 1), "temp_mib": round(s.temp_mib, 2),
                                                 "seconds": round(s.seconds, 1)} for s in samples]})
    return 0 if v.flat and last.errors == 0 else 1


def run_visits(args) -> int:
    r = retained(args.visits, args.warmup_visits, args.frames, args.model)
    print(f"{r.visits} visits: {r.kib_per_visit:+.2f} KiB retained per visit (bound {RETAINED_KIB} KiB), "
          f"{r.sessions_left} sessions held, {r.errors} errors", flush=True)
    for s in r.top[:5]:
        print(f"  {s['kib']:+9.1f} KiB {s['count']:+6d} blocks  {s['where'][-1].strip()}", flush=True)
    _write(args.out, {"command": "python -m ui.bench.memory_soak " + " ".join(args.argv), "machine": _machine()}
           | r._asdict() | {"bound_kib": RETAINED_KIB})
    return 0 if r.kib_per_visit <= RETAINED_KIB and r.errors == 0 else 1


def run_runs(args) -> int:
    r = session_runs(args.runs, args.warmup_runs, args.gen_length, args.frames, args.model)
    print(f"{r.visits} runs in one tab: {r.kib_per_visit:+.2f} KiB retained per run (bound {RUN_KIB} KiB), "
          f"{r.errors} errors", flush=True)
    for s in r.top[:5]:
        print(f"  {s['kib']:+9.1f} KiB {s['count']:+6d} blocks  {s['where'][-1].strip()}", flush=True)
    _write(args.out, {"command": "python -m ui.bench.memory_soak " + " ".join(args.argv), "machine": _machine()}
           | r._asdict() | {"bound_kib": RUN_KIB})
    return 0 if r.kib_per_visit <= RUN_KIB and r.errors == 0 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="Server memory under simulated visitors, as JSON.")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("soak", help="RSS of the app in a child process over time")
    s.add_argument("--minutes", type=float, default=30.0)
    s.add_argument("--visitors", type=int, default=4)
    s.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    s.add_argument("--visits", type=int, default=None, help="stop after this many visits instead of --minutes")
    s.add_argument("--sessions", type=int, default=None, help="sessions the app keeps (default: its own)")
    s.add_argument("--warmup", type=float, default=0.2, help="share of the samples left out as warm-up")
    s.add_argument("--tolerance", type=float, default=0.05, help="growth allowed after warm-up")
    s.add_argument("--port", type=int, default=7899)
    v = sub.add_parser("visits", help="Python memory retained per visit, traced in this process")
    v.add_argument("--visits", type=int, default=40)
    v.add_argument("--warmup-visits", type=int, default=6)
    v.add_argument("--frames", type=int, default=8, help="traceback depth of the allocation sites")
    r = sub.add_parser("runs", help="Python memory retained per run in one open tab, traced in this process")
    r.add_argument("--runs", type=int, default=40)
    r.add_argument("--warmup-runs", type=int, default=20)
    r.add_argument("--gen-length", type=int, default=32)
    r.add_argument("--frames", type=int, default=4, help="traceback depth of the allocation sites")
    for p in (s, v, r):
        p.add_argument("--model", default=None, help="one more model directory to offer (the default one runs)")
        p.add_argument("--out", default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    args.argv = argv
    return {"soak": run_soak, "visits": run_visits, "runs": run_runs}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
