"""HumanEval / HumanEval+ score | TPF per decoding mode: the LLaDA2.1 report's code row, reproducible.

    python -m llada.eval humaneval --model M [--plus] [--modes S Q] [--n N] [--json]
    python -m llada.eval humaneval --completions samples.jsonl [--json]      # score given samples
    torchrun --nproc-per-node N -m llada.eval humaneval --model M ...        # the problems split across N ranks

For each mode the model writes one greedy completion per problem through `Pipeline.generate` (the one
decode loop, `eos_early_stop` on), prompted as EvalPlus prompts (`humaneval_prompt`: the chat template
for an instruct model, the raw code prefix for a base model); the solution is cut out as EvalPlus cuts
it and run in the sandbox on the base inputs (HumanEval) and, with `--plus`, the plus inputs
(HumanEval+) (`humaneval_score`). Checking runs in the background while the next problem decodes.

Per mode: pass@1 on HumanEval and HumanEval+ (percent), TPF (generated tokens / all forwards, cache
refreshes included), TPS (generated tokens / decode seconds), forwards, edits (T2T + MBE) and the
failure kinds. Laid out as the report's rows ("score | TPF"):

    | mode | tau_mask | tau_edit | HumanEval score | TPF | HumanEval+ score | TPF | TPS | forwards | edits | failures |

Per problem, `OUT/MODE.jsonl` (default OUT: runs/humaneval/MODEL) holds the prompt's length, the raw
completion, the tested solution, the verdicts, the failure kind and detail, tokens, forwards, edits,
decode and check seconds; `OUT/report.json` the report (`--json` prints it). Under torchrun each rank loads
the whole model and runs its share of the problems (`llada.dist.share`); rank 0 writes the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, NamedTuple

from ..config import DecodeConfig
from ..presets import load_presets
from .humaneval_data import DATA, MINI, HumanEvalError, Problem, load_problems
from .humaneval_prompt import build_prompt, solution_of
from .humaneval_score import Evaluator, Verdict, read_samples, scores_json
from .sandbox import Sandbox

DEFAULT_MODES = ("S", "Q")


def fit_gen_length(prompt_length: int, gen_length: int, block_length: int, positions: int) -> int:
    """The longest generation up to gen_length whose run, padded to whole blocks, fits the model."""
    return min(gen_length, positions // block_length * block_length - prompt_length)


class Job(NamedTuple):
    """A problem ready to decode: its row so far (no verdict), its prompt ids and settings (None: no room)."""

    problem: Problem
    row: dict
    ids: list[int]
    cfg: DecodeConfig | None


def prepare(pipe, problem: Problem, mode: str, gen_length: int, chat: bool | None) -> Job:
    """The problem's prompt and settings, the generation cut to what fits the model."""
    prompt = build_prompt(pipe.tokenizer, problem, chat)
    cfg = pipe.config(mode, gen_length=gen_length, eos_early_stop=True)
    room = fit_gen_length(len(prompt.ids), gen_length, cfg.block_length, pipe.model.config.max_position_embeddings)
    row = {"task_id": problem.task_id, "mode": mode, "prompt_tokens": len(prompt.ids), "gen_length": room,
           "prompt": prompt}
    if room < 1:
        return Job(problem, {**row, "completion": "", "solution": "", "tokens": 0, "forwards": 0, "edits": 0,
                             "mbe_edits": 0, "seconds": 0.0, "skip": "prompt_too_long"}, prompt.ids, None)
    return Job(problem, row, prompt.ids, pipe.config(mode, gen_length=room, eos_early_stop=True))


def finish(pipe, job: Job, trace) -> dict:
    """The per-problem row (without the verdict) from its finished trace."""
    completion = pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id])
    return {**job.row, "completion": completion, "solution": solution_of(job.problem, job.row["prompt"], completion),
            "tokens": len(trace.output_ids), "forwards": trace.forwards, "edits": trace.edits,
            "mbe_edits": trace.mbe_edits, "seconds": round(trace.seconds, 4), "skip": None}


def decode_problems(pipe, problems: list[Problem], mode: str, args) -> Iterator[tuple[Job, dict]]:
    """(job, row) of every problem in order, `args.batch` problems sharing each forward (every trace as
    if decoded alone); a row's `seconds` is the engine time of the rounds it took part in."""
    jobs = [prepare(pipe, p, mode, args.gen_length, args.chat) for p in problems]
    for lo in range(0, len(jobs), args.batch):
        chunk = jobs[lo:lo + args.batch]
        live = [j for j in chunk if j.cfg is not None]
        traces = iter(pipe.generate_batch([j.ids for j in live], [j.cfg for j in live], max_batch=args.batch)
                      if live else [])
        for job in chunk:
            row = job.row if job.cfg is None else finish(pipe, job, next(traces))
            yield job, {k: v for k, v in row.items() if k != "prompt"}


def add_verdict(row: dict, verdict: Verdict | None) -> dict:
    if verdict is None:  # not run: the prompt leaves no room to write
        return {**row, "base": False, "plus": False, "error": row["skip"], "detail": "", "check_seconds": 0.0}
    return {**row, "base": verdict.base, "plus": verdict.plus, "error": verdict.error, "detail": verdict.detail,
            "check_seconds": verdict.seconds}


def run_mode(pipe, evaluator: Evaluator, problems: list[Problem], mode: str, args, bar) -> tuple[list[dict], float]:
    """Decode every problem in a mode, checking each in the background; the per-problem rows and the
    decoding's wall seconds."""
    from concurrent.futures import ThreadPoolExecutor

    rows, futures, decoding = [], [], 0.0
    with ThreadPoolExecutor(max_workers=evaluator.jobs) as pool:
        started = time.monotonic()
        for job, row in decode_problems(pipe, problems, mode, args):
            rows.append(row)
            futures.append(None if row["skip"] else pool.submit(evaluator.check, job.problem, row["solution"],
                                                                 args.plus))
            bar.update(1)
        decoding = time.monotonic() - started
        return [add_verdict(row, f and f.result()) for row, f in zip(rows, futures)], decoding


def mode_summary(cfg, rows: list[dict], plus: bool, seconds: float) -> dict:
    """The mode's line of the report; `seconds`: the decoding's wall time (TPS = generated tokens / it)."""
    n = max(len(rows), 1)
    tokens, forwards = sum(r["tokens"] for r in rows), sum(r["forwards"] for r in rows)
    base, plus_passed = sum(r["base"] for r in rows), sum(bool(r["plus"]) for r in rows)
    return {"threshold": cfg.threshold, "editing_threshold": cfg.editing_threshold, "block_length": cfg.block_length,
            "humaneval": 100.0 * base / n, "humaneval_plus": 100.0 * plus_passed / n if plus else None,
            "passed": {"base": base, "plus": plus_passed if plus else None, "total": len(rows)},
            "tpf": tokens / max(forwards, 1), "tps": tokens / seconds if seconds else 0.0, "tokens": tokens,
            "forwards": forwards, "edits": sum(r["edits"] + r["mbe_edits"] for r in rows), "seconds": round(seconds, 2),
            "failures": dict(Counter(r["error"] for r in rows if r["error"]).most_common())}


def format_table(report: dict) -> str:
    """Markdown: one row per mode, score | TPF as the LLaDA2.1 report writes it."""
    head = ["mode", "tau_mask", "tau_edit", "HumanEval score \\| TPF", "HumanEval+ score \\| TPF", "TPS",
            "forwards", "edits", "failures"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in report["modes"].items():
        edit = "off" if m["editing_threshold"] is None else f"{m['editing_threshold']:g}"
        plus = "-" if m["humaneval_plus"] is None else f"{m['humaneval_plus']:.2f} \\| {m['tpf']:.2f}"
        fails = ", ".join(f"{k} {v}" for k, v in m["failures"].items()) or "-"
        cells = [name, f"{m['threshold']:g}", edit, f"{m['humaneval']:.2f} \\| {m['tpf']:.2f}", plus,
                 f"{m['tps']:.0f}", str(m["forwards"]), str(m["edits"]), fails]
        lines.append("| " + " | ".join(cells) + " |")
    where = "bubblewrap" if report["isolated"] else "resource limits only"
    return (f"model {report['model']}, {report['n']} problems of {Path(report['data']).name}, gen_length "
            f"{report['gen_length']}, greedy, programs run with {where}\n\n" + "\n".join(lines))


def evaluate(pipe, evaluator: Evaluator, problems: list[Problem], args, ranks=None) -> dict | None:
    """Every mode on the same problems; the report (rows written to args.out as each mode ends).

    ranks (torchrun, `llada.dist.share`): each rank decodes and checks its share of the problems, rank 0
    gathers the rows in the problems' order and writes and returns the report one process would (its
    decoding seconds the slowest rank's); the other ranks return None."""
    from tqdm import tqdm

    from ..dist.share import gather, share, slowest

    lead = ranks is None or ranks.lead
    out = Path(args.out or Path("runs") / "humaneval" / pipe.name)
    pipe.generate(pipe.encode("def f(x):\n", chat=False), pipe.config(args.modes[0], gen_length=8))  # warm-up
    mine = share(problems, ranks)
    bar = tqdm(total=len(args.modes) * len(mine), desc="humaneval", file=sys.stderr, disable=args.quiet or not lead)
    report = {"model": pipe.name, "data": str(args.data), "n": len(problems), "gen_length": args.gen_length,
              "plus": args.plus, "isolated": evaluator.sandbox.isolated, "out": str(out), "modes": {}}
    for mode in args.modes:
        start = time.monotonic()
        rows, decoding = run_mode(pipe, evaluator, mine, mode, args, bar)
        rows, decoding = gather(rows, ranks), slowest(decoding, ranks)
        if not lead:
            continue
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"{mode}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        report["modes"][mode] = {**mode_summary(pipe.config(mode), rows, args.plus, decoding),
                                 "wall_seconds": round(time.monotonic() - start, 1)}
        bar.set_postfix(mode=mode, base=f"{report['modes'][mode]['humaneval']:.1f}")
    bar.close()
    if not lead:
        return None
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m llada.eval humaneval",
                                 description="HumanEval / HumanEval+ pass@1 (greedy), TPF and TPS per decoding mode.")
    ap.add_argument("--model", help="model directory (not needed with --completions)")
    ap.add_argument("--completions", help="score an EvalPlus samples file (task_id + solution or completion)")
    ap.add_argument("--plus", action="store_true", help="also run the HumanEval+ inputs (--completions always does)")
    ap.add_argument("--mini", action="store_true", help="HumanEval+ mini: fewer plus inputs")
    ap.add_argument("--data", help="an EvalPlus HumanEval+ .jsonl(.gz) file (default: assets/humanevalplus/)")
    ap.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES), help="the model's modes (default: S Q)")
    ap.add_argument("--n", "--first", type=int, default=None, help="the first N problems (default: all 164; "
                    "--first under torchrun, whose own options make --n ambiguous)")
    ap.add_argument("--gen-length", type=int, default=512, help="tokens per completion (cut to fit the model)")
    ap.add_argument("--chat", choices=("auto", "on", "off"), default="auto",
                    help="chat prompt (auto: when the tokenizer has a chat template)")
    ap.add_argument("--batch", type=int, default=8, help="problems decoded together, sharing each forward "
                    "(every trace as if decoded alone; default 8)")
    ap.add_argument("--jobs", type=int, default=None, help="programs checked at a time (default: CPUs, at most 4)")
    ap.add_argument("--isolate", choices=("auto", "bwrap", "none"), default="auto",
                    help="bubblewrap around each program (auto: when it works here)")
    ap.add_argument("--cache", help="directory of the canonical outputs' cache (default ~/.cache/llada/humaneval)")
    ap.add_argument("--out", help="directory of the per-problem JSONL and report.json")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--quantize", default=None, choices=("fp8", "fp8-dense"))
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", action="store_true", help="print the JSON report only")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if not args.model and not args.completions:
        ap.error("give --model (decode and score) or --completions FILE (score samples)")
    if args.n is not None and args.n < 1:
        ap.error("--n must be at least 1")
    if args.gen_length < 1:
        ap.error("--gen-length must be at least 1")
    if args.batch < 1:
        ap.error("--batch must be at least 1")
    if args.jobs is not None and args.jobs < 1:
        ap.error("--jobs must be at least 1")
    args.chat = {"auto": None, "on": True, "off": False}[args.chat]
    args.data = Path(args.data) if args.data else (MINI if args.mini else DATA)
    return args


def score_completions(args) -> dict:
    problems = load_problems(args.data)
    samples = read_samples(args.completions, {p.task_id: p for p in problems})
    evaluator = Evaluator(sorted({p.task_id: p for p, _ in samples}.values(), key=problems.index),
                          Sandbox(args.isolate), args.data, args.cache, args.jobs)
    return scores_json(evaluator.check_all(samples, plus=True))


def format_scores(scores: dict) -> str:
    base, plus = scores["base"], scores["plus"]
    kinds = Counter(p["error"] for p in scores["problems"] if p["error"])
    return "\n".join([_score_line("HumanEval", base), _score_line("HumanEval+", plus),
                      "failures: " + (", ".join(f"{k} {v}" for k, v in kinds.most_common()) or "none")])


def _score_line(name: str, s: dict) -> str:
    return f"{name}: {s['passed']}/{s['total']} ({100 * s['passed'] / max(s['total'], 1):.2f}%)"


def run(args, ranks=None) -> dict | None:
    """The report of a model, or the scores of a samples file (settings checked before the model loads);
    under torchrun (`ranks`) the problems are split across the ranks and only rank 0 returns the report."""
    if args.completions:
        return score_completions(args)
    problems = load_problems(args.data)[:args.n]
    modes = load_presets(args.model) if Path(args.model, "config.json").exists() else {}
    unknown = [m for m in args.modes if modes and m not in modes]
    if unknown:
        raise HumanEvalError(f"unknown mode {unknown[0]!r}; this model has {', '.join(modes)}")
    import torch

    from ..dist.share import share
    from ..pipeline import Pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    try:
        pipe = Pipeline.load(args.model, dtype=dtype, device=args.device, quantize=args.quantize)  # the whole model
        if pipe.tokenizer is None:
            raise HumanEvalError(f"{args.model}: the model has no tokenizer; HumanEval prompts are text")
        evaluator = Evaluator(share(problems, ranks), Sandbox(args.isolate), args.data, args.cache, args.jobs)
    except (ValueError, RuntimeError) as err:
        if ranks is not None:
            ranks.agree(err)  # RankError on every rank: none goes on to decode while another waits
        raise
    if ranks is not None:
        ranks.agree(None)  # every rank has its model and its problems' references; a later failure ends the
        # rank's process, and torchrun ends the others
    return evaluate(pipe, evaluator, problems, args, ranks)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ranks = None if args.completions else _ranks(args.device)
    try:
        report = run(args, ranks)
    except (ValueError, RuntimeError) as err:  # HumanEvalError, PresetError, ConfigError; CheckpointError; RankError
        if ranks is None or ranks.lead:
            print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        if ranks is not None:
            ranks.stop()
    if report is None:  # a rank other than 0: rank 0 prints
        return
    if args.json:
        print(json.dumps(report, indent=None if args.completions else 2))
    else:
        print(format_scores(report) if args.completions else format_table(report))


def _ranks(device: str):
    """The torchrun ranks splitting the problems (None for one process)."""
    import torch

    from ..dist.group import Ranks

    return Ranks.start(torch.device(device))


if __name__ == "__main__":
    main()
