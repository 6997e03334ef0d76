"""`python -m llada.train`: train and save (llada/train), then evaluate (llada/eval) and write the card.

    evaluate   the task and code tracks in every mode (eval.json), code samples (samples.json)
    card       OUT/README.md from those files (`write.write_card`)

With `--eval-only --checkpoint-code-n N` every checkpoint copy is first given its Q-mode parse rate on
N held-out functions. The flags are `llada.train.cli`'s (`python -m llada.train --help`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from ..data.tasks import TASKS
from ..eval.codetrack import evaluate_code, held_out_items
from ..eval.harness import CODE_PROMPTS, code_samples, evaluate
from ..pipeline import Pipeline
from ..train.cli import Trained, run_command
from ..train.loop import TrainConfig, device_name
from .write import write_card


def eval_device(trained_on: str) -> str:
    """Where a saved run is evaluated: the device it trained on when this machine has one, else the CPU (a run
    trained on a leased GPU is evaluated back on the CPU machine)."""
    return trained_on if trained_on != "cuda" or torch.cuda.is_available() else "cpu"


def evaluate_trained(tc: TrainConfig, summary: dict) -> tuple[dict, list[dict]]:
    """Load the saved directory like any checkpoint; both eval tracks and the code samples. Where they ran
    goes into summary["eval_device"] (the card's TPS depends on it)."""
    device = eval_device(summary["device_type"])
    summary["eval_device"] = device_name(torch.device(device))
    pipe = Pipeline.load(tc.out, device=device)
    report = evaluate(pipe, list(TASKS), tc.eval_n, tc.seed)
    items = held_out_items(tc.code_n, tc.seed, summary["data"]["roots"]) if tc.code_n else []
    if items:
        report["code"] = evaluate_code(pipe, items, gen_length=tc.eval_gen_length)
    prompts = (list(CODE_PROMPTS) + [it.prompt for it in items])[:tc.samples]
    return report, code_samples(pipe, prompts, "S", tc.eval_gen_length)


def checkpoint_parse_rates(out: Path, summary: dict, n: int, seed: int) -> None:
    """Add "parses" (Q mode, n held-out functions) to each curve point whose checkpoint copy exists."""
    items = held_out_items(n, seed, summary["data"]["roots"])
    for point in summary.get("curve", []):
        path = out / "checkpoints" / point.get("dir", f"{point['minutes']:05.1f}min")
        if path.exists():
            code = evaluate_code(Pipeline.load(path), items, ["Q"], summary["config"]["eval_gen_length"])
            point["parses"] = round(code["modes"]["Q"]["parses"], 4)
            print(f"checkpoint {path.name}: Q parses {point['parses']:.1%} of {len(items)}", flush=True)


def pilot_curves(dirs: str) -> list[dict]:
    """{"name", "parameters", "active", "curve"} of each pilot run directory (from its training.json)."""
    out = []
    for d in filter(None, dirs.split(",")):
        s = json.loads((Path(d) / "training.json").read_text())
        c = s["config"]
        out.append({"name": f"pilot hidden {c['hidden']}, {c['layers']} layers", "parameters": s["parameters"],
                    "active": s["active_parameters"], "curve": s.get("curve", [])})
    return out


def evaluate_and_write_card(run: Trained) -> Path:
    """Evaluate the saved run; training.json (with eval_seconds), eval.json, samples.json, then README.md."""
    out, summary = Path(run.tc.out), run.summary
    if run.checkpoint_code_n:
        checkpoint_parse_rates(out, summary, run.checkpoint_code_n, run.tc.seed)
    t0 = time.perf_counter()
    report, samples = evaluate_trained(run.tc, summary)
    summary["eval_seconds"] = round(time.perf_counter() - t0, 1)
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "samples.json").write_text(json.dumps(samples, indent=2) + "\n")
    return write_card(out, summary, report, samples, run.commands, pilot_curves(run.pilots))


def rewrite_card(run: Trained) -> Path:
    """The card again from the saved eval.json and samples.json (new pilots, an edited writer)."""
    out = Path(run.tc.out)
    try:
        report, samples = (json.loads((out / name).read_text()) for name in ("eval.json", "samples.json"))
    except FileNotFoundError as err:
        sys.exit(f"--card-only: {err.filename} does not exist (run --eval-only first)")
    return write_card(out, run.summary, report, samples, run.commands, pilot_curves(run.pilots))


def main(argv: list[str] | None = None) -> None:
    run = run_command(sys.argv[1:] if argv is None else argv)
    if run is not None:
        print(f"wrote {rewrite_card(run) if run.card_only else evaluate_and_write_card(run)}")
