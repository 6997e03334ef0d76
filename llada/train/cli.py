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

This module does the training half (build, train, save) and hands a `Trained` value on; the last two
steps, evaluate and card, live in `llada/card/`, above training and evaluation, which never import
each other. `python -m llada.train` (`__main__.py`) runs `llada.card.command.main`, both halves.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

import torch

from .loop import TrainConfig, preset_config, setup, train
from .recipes import ASSUMED_TFLOPS, TRAINING_PRESETS, estimated_steps, sizes

TUPLES = {"sources": str, "roots": str, "block_lengths": int, "pip_packages": str}
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
    ap.add_argument("--card-only", action="store_true",
                    help="with --eval-only: rewrite OUT/README.md from its eval.json and samples.json "
                         "(e.g. with --pilots)")
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


COMMANDS = "commands.txt"  # every command that trained OUT, one a line (a resumed run has several)


def record_command(out: Path, argv: list[str]) -> str:
    """Append this command to OUT/commands.txt; returns all of them (the card's "How it was trained")."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / COMMANDS, "a") as f:
        f.write("python -m llada.train " + shlex.join(argv) + "\n")
    return (out / COMMANDS).read_text().rstrip("\n")


class Trained(NamedTuple):
    """A saved run whose evaluation and card come next (what `run_command` hands to `llada/card/`)."""
    tc: TrainConfig
    summary: dict  # training.json as trained (or as read back with --eval-only)
    commands: str  # OUT/commands.txt: every command that trained OUT, one a line
    pilots: str  # --pilots: comma list of pilot run directories
    checkpoint_code_n: int  # --eval-only --checkpoint-code-n N: Q parse rate per checkpoint (0: none)
    card_only: bool = False  # --eval-only --card-only: the card again from the saved evaluation


def trained_earlier(tc: TrainConfig, args: argparse.Namespace) -> Trained:
    """--eval-only: the run in --out, read back from its training.json and commands.txt."""
    out = Path(tc.out)
    if not (out / "training.json").exists():
        sys.exit(f"--eval-only: {out / 'training.json'} does not exist (train into --out first)")
    summary = json.loads((out / "training.json").read_text())
    torch.set_num_threads(tc.threads)
    commands = (out / COMMANDS).read_text().rstrip("\n") if (out / COMMANDS).exists() else ""
    return Trained(tc, summary, commands, args.pilots, args.checkpoint_code_n, args.card_only)


def run_command(argv: list[str]) -> Trained | None:
    """Plan, train and save (or read back a run with --eval-only); None when the command stops before the card."""
    tc, args = parse_args(argv)
    if args.dry_run:
        print(plan(setup(tc, progress=True)))
        return None
    if args.eval_only:
        return trained_earlier(tc, args)
    commands = record_command(Path(tc.out), argv)
    summary = train(tc, on_ready=lambda run: print(plan(run), flush=True), resume=args.resume)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    return None if args.no_eval else Trained(tc, summary, commands, args.pilots, 0)
