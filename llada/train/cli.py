"""`python -m llada.train --preset NAME [--SETTING VALUE ...]`: one command from nothing to a model card.

    build      corpus (installed Python source), tokenizer, rows, model; print the plan
    train      bounded by --minutes / --steps, with a progress bar and checkpoints
    save       OUT/: sharded bf16 safetensors + index, tokenizer, presets.json, loss.csv, loss.png
    evaluate   the task and code tracks in every mode (eval.json), code samples (samples.json)
    card       OUT/README.md from those files

`--dry-run` stops after the plan (the corpus size in files and tokens, the parameter counts and the
estimated number of steps); `--no-eval` stops after saving; `--resume` continues a stopped run in
--out; `--eval-only` evaluates a run trained earlier and writes its card. Every training command is
appended to OUT/commands.txt, which the card quotes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import fields
from pathlib import Path

import torch

from .loop import TrainConfig, preset_config, setup, train
from .recipes import ASSUMED_TFLOPS, TRAINING_PRESETS, estimated_steps, sizes

TUPLES = {"sources": str, "roots": str, "block_lengths": int}
OPTIONAL = {"steps": int, "max_files": int, "init": str, "data_from": str}


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes", "on")


def _converter(name: str, default):
    if isinstance(default, bool):
        return _flag
    if name in TUPLES:
        return lambda text: tuple(TUPLES[name](x) for x in text.split(",") if x)
    return OPTIONAL.get(name) or type(default)


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python -m llada.train", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", required=True, choices=list(TRAINING_PRESETS),
                    help="; ".join(f"{k}: {p.summary}" for k, p in TRAINING_PRESETS.items()))
    ap.add_argument("--dry-run", action="store_true", help="build corpus, tokenizer and model, print the plan, stop")
    ap.add_argument("--no-eval", action="store_true", help="stop after saving the model")
    ap.add_argument("--pilots", default="", help="comma list of earlier run directories whose held-out curves "
                    "the card shows beside this run's (the pilot runs that chose its size)")
    ap.add_argument("--eval-only", action="store_true",
                    help="no training: evaluate the model in --out (trained earlier) and write its card")
    ap.add_argument("--checkpoint-code-n", type=int, default=0,
                    help="with --eval-only: the Q-mode parse rate of every checkpoint on this many held-out functions")
    ap.add_argument("--resume", action="store_true",
                    help="continue the stopped run in --out from its last checkpoint (OUT/resume.pt)")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        if f.name in ("preset", "noise"):
            continue
        ap.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None,
                        type=_converter(f.name, getattr(defaults, f.name)), help="(the preset's value unless given)")
    args = ap.parse_args(argv)
    overrides = {f.name: getattr(args, f.name) for f in fields(TrainConfig)
                 if f.name not in ("preset", "noise") and getattr(args, f.name) is not None}
    try:
        return preset_config(args.preset, **overrides), args
    except ValueError as err:
        ap.error(str(err))


def plan(run) -> str:
    """What is about to happen: corpus size, model size, step cost and the steps expected in the budget."""
    tc, d, cfg = run.tc, run.built.data, run.built.model.config
    s = sizes(cfg, tc.code_batch, tc.code_length)
    task_cost = (tc.task_batch * tc.task_length) / (tc.code_batch * tc.code_length)
    steps = estimated_steps(s, tc.minutes, run.device.type, tc.code_share, task_cost)
    return "\n".join([
        f"preset {tc.preset} on {run.device.type}: out {tc.out}",
        f"corpus: {d['train_files']:,} training files ({d['train_tokens']:,} tokens), {d['held_out_files']:,} held out "
        f"({d['held_out_tokens']:,} tokens); {d['window_rows']:,} window rows, {d['function_rows']:,} function rows "
        f"({d['functions']:,} functions)",
        f"model: {s.total:,} parameters, {s.active:,} active per token; vocabulary {cfg.vocab_size:,}",
        f"a code step: {tc.code_batch} x {tc.code_length} tokens, {s.step_flops / 1e12:.2f} TFLOP; at an assumed "
        f"{ASSUMED_TFLOPS[run.device.type]:g} TFLOP/s about {steps:,} steps fit in {tc.minutes:g} min"
        + (f" (bounded at {tc.steps:,})" if tc.steps else "")])


def evaluate_trained(tc: TrainConfig, summary: dict) -> tuple[dict, list[dict]]:
    """Load the saved directory like any checkpoint; both eval tracks and the code samples."""
    from ..eval.codetrack import evaluate_code, held_out_items
    from ..eval.harness import CODE_PROMPTS, code_samples, evaluate
    from ..data.tasks import TASKS
    from ..pipeline import Pipeline

    pipe = Pipeline.load(tc.out, device=summary["device_type"])
    report = evaluate(pipe, list(TASKS), tc.eval_n, tc.seed)
    items = held_out_items(tc.code_n, tc.seed, summary["data"]["roots"]) if tc.code_n else []
    if items:
        report["code"] = evaluate_code(pipe, items, gen_length=tc.eval_gen_length)
    prompts = (list(CODE_PROMPTS) + [it.prompt for it in items])[:tc.samples]
    return report, code_samples(pipe, prompts, "S", tc.eval_gen_length)


def checkpoint_parse_rates(out: Path, summary: dict, n: int, seed: int) -> None:
    """Add "parses" (Q mode, n held-out functions) to each curve point whose checkpoint copy exists."""
    from ..eval.codetrack import evaluate_code, held_out_items
    from ..pipeline import Pipeline

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


COMMANDS = "commands.txt"  # every command that trained OUT, one a line (a resumed run has several)


def record_command(out: Path, argv: list[str]) -> str:
    """Append this command to OUT/commands.txt; returns all of them (the card's "How it was trained")."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / COMMANDS, "a") as f:
        f.write("python -m llada.train " + shlex.join(argv) + "\n")
    return (out / COMMANDS).read_text().rstrip("\n")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    tc, args = parse_args(argv)
    if args.dry_run:
        print(plan(setup(tc, progress=True)))
        return
    out = Path(tc.out)
    if args.eval_only:
        if not (out / "training.json").exists():
            sys.exit(f"--eval-only: {out / 'training.json'} does not exist (train into --out first)")
        summary = json.loads((out / "training.json").read_text())
        torch.set_num_threads(tc.threads)
        if args.checkpoint_code_n:
            checkpoint_parse_rates(out, summary, args.checkpoint_code_n, tc.seed)
        commands = (out / COMMANDS).read_text().rstrip("\n") if (out / COMMANDS).exists() else ""
    else:
        commands = record_command(out, argv)
        summary = train(tc, on_ready=lambda run: print(plan(run), flush=True), resume=args.resume)
        print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
        if args.no_eval:
            return
    from .card import write_card

    t0 = time.perf_counter()
    report, samples = evaluate_trained(tc, summary)
    summary["eval_seconds"] = round(time.perf_counter() - t0, 1)
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "samples.json").write_text(json.dumps(samples, indent=2) + "\n")
    card = write_card(out, summary, report, samples, commands, pilot_curves(args.pilots))
    print(f"wrote {card}")
