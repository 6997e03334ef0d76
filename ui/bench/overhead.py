"""What watching costs: `python -m ui.bench.overhead [--model DIR]`.

Times the same decode three ways on one model and prompt:

* bare: `Pipeline.generate` (the CLI's path, no recording);
* app: the playground's streaming handler drained to the end (recording, canvas frames, charts, tables);
* first frame: from calling the handler to its first canvas frame, and to the first frame with a token.

The overhead of the app over bare should stay under 15%.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ..models import DEFAULT_MODEL, Models
from ..playground.run import generate_ui
from ..settings import check_request


def bare_seconds(pipe, prompt: str, mode: str, block_length: int, gen_length: int) -> tuple[float, dict]:
    req = check_request(pipe.presets, prompt, mode, block_length=block_length, gen_length=gen_length)
    cfg = req.settings.config
    ids = pipe.encode(prompt)
    t = time.perf_counter()
    result = pipe.generate(ids, cfg)
    return time.perf_counter() - t, result.summary()


def app_seconds(models: Models, prompt: str, mode: str, block_length: int, gen_length: int) -> dict:
    """Drain the app's handler; seconds in total, to the first frame and to the first frame after a forward."""
    widgets = preset_inputs(models, mode) | {"block_length": block_length, "gen_length": gen_length}
    t = time.perf_counter()
    marks, frames = [], 0
    for frame in generate_ui(models, prompt=prompt, model=models.default, mode=mode, **widgets):
        frames += 1
        marks.append(time.perf_counter() - t)
    return {"seconds": marks[-1], "first_frame": marks[0], "first_token_frame": marks[min(1, len(marks) - 1)],
            "frames": frames}


def preset_inputs(models: Models, mode: str) -> dict:
    """The widgets' values (by name) as the UI would send them for `mode`, lengths aside."""
    cfg = models.get(None).config(mode)
    off = cfg.editing_threshold is None
    return {"tau_mask": cfg.threshold, "edit": not off, "tau_edit": 0.0 if off else cfg.editing_threshold,
            "mbe": False, "mbe_window": 1, "max_post_steps": cfg.max_post_steps, "temperature": 0.0, "seed": 0}


def run(model: str, prompt: str, mode: str, block_length: int, gen_length: int, repeat: int) -> dict:
    models = Models([model])
    pipe = models.get(None)
    bare_seconds(pipe, prompt, mode, block_length, gen_length)  # warm-up: first-call allocations
    bare, app = [], []
    for _ in range(repeat):  # interleaved, so drifting machine load hits both alike
        seconds, summary = bare_seconds(pipe, prompt, mode, block_length, gen_length)
        bare.append(seconds)
        app.append(app_seconds(models, prompt, mode, block_length, gen_length))
    b = statistics.median(bare)
    a = statistics.median(x["seconds"] for x in app)
    return {"bare": b, "app": a, "overhead": a / b - 1, "first_frame": max(x["first_frame"] for x in app),
            "first_token_frame": max(x["first_token_frame"] for x in app), "frames": app[-1]["frames"],
            "tokens": len(summary["output_ids"]),
            "forwards": summary["num_decode_forwards"] + summary["num_cache_forwards"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Recording and streaming overhead of the playground.")
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--prompt", default="def fibonacci(n):")
    parser.add_argument("--mode", default="S")
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    r = run(args.model, args.prompt, args.mode, args.block_length, args.gen_length, args.repeat)
    print(f"model {args.model} · mode {args.mode} · {r['tokens']} tokens in {r['forwards']} forwards "
          f"(median of {args.repeat})")
    print(f"bare generate        {r['bare']:.3f} s")
    print(f"app stream (drained) {r['app']:.3f} s  ({r['frames']} frames)  overhead {100 * r['overhead']:+.1f}%")
    print(f"first frame          {1000 * r['first_frame']:.0f} ms (prompt and masks), "
          f"{1000 * r['first_token_frame']:.0f} ms (after the first forward)")


if __name__ == "__main__":
    main()
