"""A slow model in the playground, measured: what a visitor sees while each forward of a large model runs.

    python -m ui.bench slow-model DIR --room-gib 3 --out bench/results/slow-model.json

Offers DIR as the app would on this CPU (`--room-gib` fakes the memory available, so a model that would
not fit as saved is offered in int8), loads it with the real loader, and runs the playground's handler
(`ui.playground.run.generate_ui`) `--runs` times: the first run measures the model's pace, the later ones
are budgeted by it (`ui.pace.slow_budget`). Per run: the forwards, the status and note, the progress lines
shown while a forward ran, and the longest gap between two frames the page received (what a visitor waits
without news). Written as JSON with the command, commit and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _run(models, gen_length: int) -> dict:
    """One playground run: its frames' times, progress lines and final state."""
    from ui.playground.run import generate_ui

    page = {"mode": "S", "tau_mask": 0.7, "edit": True, "tau_edit": 0.5, "mbe": False, "mbe_window": 1,
            "block_length": 32, "gen_length": gen_length, "max_post_steps": 16, "temperature": 0.0, "seed": 0,
            "ghost": False}
    start = last = time.monotonic()
    gaps, working, frames = [], [], 0
    for out in generate_ui(models, prompt="def add(a, b):", **page):
        now = time.monotonic()
        gaps.append(now - last)
        last, frames = now, frames + 1
        if isinstance(out.stats, str) and "working: forward" in out.stats:
            working.append(out.stats.split("<small>")[-1].removesuffix("</small>"))
    trace = out.trace
    return {"seconds": round(time.monotonic() - start, 2), "forwards": trace.forwards, "status": trace.status,
            "note": trace.note, "frames": frames, "progress_lines": len(working),
            "progress_examples": working[:3] + working[-2:], "longest_gap_s": round(max(gaps), 2),
            "final_stats": out.stats}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The playground on a slow model: progress, pace and budget.")
    parser.add_argument("model", help="a LLaDA2.x checkpoint directory (e.g. a replica, --shape load)")
    parser.add_argument("--room-gib", type=float, default=None, help="fake the memory available (default: real)")
    parser.add_argument("--gen-length", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default=None, help="JSON file to write (default: print only)")
    args = parser.parse_args(argv)
    from ui import models as m
    from ui.pace import SLOW, pace_of

    room = None if args.room_gib is None else int(args.room_gib * 2**30)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    models = m.Models([str(Path(args.model).resolve())], rt=m.Runtime("cpu", "cpu", room=room))
    if not models.offered:
        sys.exit(f"error: {models.note()}")
    offered = models.offered[0]
    pipe = models.get(None)
    load_s = time.monotonic() - t0
    runs = [_run(models, args.gen_length) for _ in range(args.runs)]
    result = {"command": "python -m ui.bench slow-model " + " ".join(argv if argv is not None else sys.argv[1:]),
              "commit": _commit(), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                               "load_average_before": [round(x, 2) for x in load_before],
                                               "load_average_after": [round(x, 2) for x in os.getloadavg()]},
              "offered": {"name": offered.name, "quantize": offered.quantize, "note": offered.note},
              "load_s": round(load_s, 1), "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                                                / 2**20, 2),
              "seconds_per_forward": pace_of(pipe).per_forward, "slow_budget": vars(SLOW), "runs": runs}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
