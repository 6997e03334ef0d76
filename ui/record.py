"""Record runs of a model for the Learn view: `python -m ui.record [--model DIR] [--out FILE]`.

Each run decodes one prompt with this engine and stores its full trace; the playground replays the file
(labelled as a recording) without loading any model. Works with any LLaDA2.x model directory.

    python -m ui.record                                  # assets/model -> assets/learn_trace.json
    python -m ui.record --model DIR --prompt "12 + 34 =" --runs S Q S+MBE --gen-length 64
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from llada.pipeline import Pipeline

from .learn import RECORDING
from .models import DEFAULT_MODEL
from llada.trace import Trace

from .runs import check_request, drain, start

DEFAULT_PROMPT = "def fibonacci(n):"
DEFAULT_RUNS = ("S", "Q", "S+MBE")


def record_run(pipe: Pipeline, prompt: str, run: str, block_length: int, gen_length: int) -> Trace:
    """One recorded run; `run` is a mode (S, Q, M2T only) with an optional '+MBE'."""
    mode, _, extra = run.partition("+")
    req = check_request(prompt, mode, mbe=extra.upper() == "MBE", block_length=block_length, gen_length=gen_length)
    return drain(start(pipe, req))


def record_file(model: Path, out: Path, prompt: str, runs: list[str], block_length: int, gen_length: int) -> dict:
    pipe = Pipeline.load(model)
    traces = [record_run(pipe, prompt, run, block_length, gen_length) for run in runs]
    data = {"model": pipe.name, "prompt": prompt, "runs": [t.to_dict() for t in traces]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Record decoding runs for the playground's Learn view.")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (default assets/model)")
    parser.add_argument("--out", type=Path, default=RECORDING, help="output JSON (default assets/learn_trace.json)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), help="modes, e.g. S Q 'M2T only' S+MBE")
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--gen-length", type=int, default=64)
    args = parser.parse_args(argv)
    data = record_file(args.model, args.out, args.prompt, args.runs, args.block_length, args.gen_length)
    for run in data["runs"]:
        s = run["result"]["stats"]
        print(f"{run['mode']}{' + MBE' if run['settings']['mbe'] else ''}: {s['steps']} steps, "
              f"{s['tokens']} tokens, TPF {s['tpf']:.2f}, edits {s['edits']}, MBE edits {s['mbe_edits']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
