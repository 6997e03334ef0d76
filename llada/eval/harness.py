"""Score | TPF in miniature: accuracy and speed of every decoding mode, on tasks and on held-out code.

    python -m llada.eval --model assets/model --n 50 --seed 0            # readable tables
    python -m llada.eval --model assets/model --n 50 --seed 0 --json     # the stable JSON shape

For each mode the same items are decoded through `Pipeline.generate` (the one decode loop):

    S         the model's S preset (low tau_mask: many drafts per forward, edits repair them)
    Q         the Q preset (careful drafting, editing on)
    M2T       drafting only (LLaDA2.0-like)
    S_noedit  S's tau_mask with editing off: what the edits in S are worth
    S_MBE     S with Multi-Block Editing: finished blocks stay editable while the next one decodes

Task track (`tasks`): per task and overall, accuracy (exact match of the answer text), TPF (generated
tokens / all forwards, cache refreshes included), TPS (generated tokens / generation seconds, see
`TPS_HELP`) and edits per 100 generated tokens (T2T and MBE edits). Code track (`codetrack`, `--code-n`): held-out
functions completed from signature + docstring, scored by `ast.parse` and by the names they read.
Both report `mbe_runs`: the share of runs that crossed a block boundary in which MBE edited an
earlier block. Every run stops at the first finished block holding EOS (`eos_early_stop`).
`--split train` draws task items the model may have seen, for tuning presets without touching the
held-out ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from ..presets import tau_text
from .batched import BATCH, decode_texts
from .tally import MODES, ModeReport, Tally, mode_config, run_tally
from ..data.tasks import TASKS, Item, eval_items

TPS_HELP = ("TPS: generated tokens per second of the whole evaluation's wall time. All items of all modes "
            "decode in one batch, an item's modes side by side, and a forward memo answers a row whose inputs an "
            "earlier row had: each forward's engine time is shared among the rows that used it, so a mode's "
            "seconds are its share of that time, not the time of the mode decoding alone. Accuracy, TPF and "
            "edits do not depend on the batch or the memo.")

CODE_PROMPTS = ("def fibonacci(n):\n", "def is_prime(n):\n", "def reverse_words(text):\n",
                "def read_config(path):\n", "def mean(values):\n")


def score_item(pipe, item: Item, cfg) -> Tally:
    """Decode one prompt and check its answer."""
    result = pipe.generate(pipe.encode(item.prompt), cfg)
    text = pipe.decode_text([t for t in result.output_ids if t != pipe.eos_id])
    return run_tally(result, cfg, correct=int(item.check(text)))


def evaluate(pipe, tasks: list[str], n: int, seed: int, modes: list[str] | None = None,
             split: str = "eval", gen_length: int = 32, progress: bool = True, batch: int = BATCH) -> dict:
    """The report of every mode on the same `n` items per task (the JSON shape of UI_CONTRACT.md).

    All items of all modes decode together, `batch` rows at a time (`batched`): the same outputs as one by one."""
    from tqdm import tqdm

    modes = modes or list(MODES)
    items = {task: eval_items(task, n, seed, split) for task in tasks}
    pipe.generate(pipe.encode("1+1="), mode_config(pipe, "S", gen_length))  # warm-up, not timed
    cfgs = {mode: mode_config(pipe, mode, gen_length) for mode in modes}
    jobs = item_major(items, modes)
    bar = tqdm(total=len(jobs), desc="eval tasks", file=sys.stderr, disable=not progress)
    runs = decode_texts(pipe, [item.prompt for _, _, item in jobs], [cfgs[mode] for mode, _, _ in jobs], batch,
                        progress=bar.update)
    bar.close()
    reports = {mode: ModeReport(cfg.threshold, cfg.editing_threshold) for mode, cfg in cfgs.items()}
    for (mode, task, item), (text, result, seconds) in zip(jobs, runs):
        tally = reports[mode].tasks.setdefault(task, Tally())
        tally.add(replace(run_tally(result, cfgs[mode], correct=int(item.check(text))), seconds=seconds))
    return {"model": pipe.name, "seed": seed, "n": n, "modes": {mode: r.to_dict() for mode, r in reports.items()}}


def item_major(items: dict[str, list[Item]], modes: list[str]) -> list[tuple[str, str, Item]]:
    """(mode, task, item) of every decode, item by item, an item's modes side by side: they ask mostly for
    the same forwards, which the decode's forward memo then answers while they are still held."""
    return [(mode, task, item) for task, task_items in items.items() for item in task_items for mode in modes]


def format_table(report: dict) -> str:
    """Markdown table: one row per mode, overall columns then per-task accuracy."""
    modes = report["modes"]
    tasks = list(next(iter(modes.values()))["tasks"])
    head = ["mode", "tau_mask", "tau_edit", "accuracy", "TPF", "TPS", "edits/100"] + [f"{t} acc \\| TPF" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in modes.items():
        cells = [name, f"{m['threshold']:g}", tau_text(m['editing_threshold']), f"{100 * m['accuracy']:.1f}",
                 f"{m['tpf']:.2f}", f"{m['tps']:.0f}", f"{m['edits_per_100']:.1f}"]
        cells += [f"{100 * m['tasks'][t]['accuracy']:.0f} \\| {m['tasks'][t]['tpf']:.2f}" for t in tasks]
        lines.append("| " + " | ".join(cells) + " |")
    return f"model {report['model']}, seed {report['seed']}, n {report['n']} per task\n\n" + "\n".join(lines)


def code_samples(pipe, prompts=CODE_PROMPTS, mode: str = "S", gen_length: int = 128) -> list[dict]:
    """Free-text generations for code prompts (not scored): prompt, output text, TPF, edits."""
    out = []
    for prompt in prompts:
        result = pipe.generate(pipe.encode(prompt), pipe.config(mode, gen_length=gen_length, eos_early_stop=True))
        out.append({"prompt": prompt, "text": pipe.decode_text(result.output_ids), "tokens": len(result.output_ids),
                    "tpf": result.tpf, "tps": result.tps, "edits": result.edits})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m llada.eval", description="Accuracy | TPF of every decoding mode.",
                                 epilog=TPS_HELP)
    ap.add_argument("--model", default="assets/model", help="model directory")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of {', '.join(TASKS)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--n", type=int, default=50, help="items per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("eval", "train"), default="eval")
    ap.add_argument("--gen-length", type=int, default=32)
    ap.add_argument("--code-n", type=int, default=50, help="held-out functions of the code track (0: no code track)")
    ap.add_argument("--code-gen-length", type=int, default=128)
    ap.add_argument("--code-root", action="append", default=None,
                    help="directory of .py files for the code track (repeatable; default: the installed Python)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--batch", type=int, default=BATCH,
                    help=f"items decoded at once, sharing forwards (default {BATCH}; the results do not depend on it)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--json", action="store_true", help="print the JSON report only")
    ap.add_argument("--samples", action="store_true", help="also print code samples (S mode, 128 tokens)")
    args = ap.parse_args(argv)
    for name, allowed in (("tasks", TASKS), ("modes", MODES)):
        bad = [x for x in getattr(args, name).split(",") if x not in allowed]
        if bad:
            ap.error(f"unknown {name[:-1]} {bad[0]!r}; choose from {', '.join(allowed)}")
    if args.n < 1:
        ap.error("--n must be at least 1")
    if args.batch < 1:
        ap.error("--batch must be at least 1")
    if args.code_n < 0:
        ap.error("--code-n must be 0 (no code track) or more")
    if args.device not in ("cpu", "cuda"):
        ap.error(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device")
    return args


def full_report(pipe, args) -> dict:
    """Task track, then (unless --code-n 0) the code track under the "code" key."""
    from .codetrack import evaluate_code, held_out_items

    modes = args.modes.split(",")
    report = evaluate(pipe, args.tasks.split(","), args.n, args.seed, modes, args.split, args.gen_length,
                      batch=args.batch)
    if args.code_n:
        items = held_out_items(args.code_n, args.seed, args.code_root)
        report["code"] = evaluate_code(pipe, items, modes, args.code_gen_length, batch=args.batch)
    return report


def main(argv: list[str] | None = None) -> None:
    import torch

    from ..fast.heap import keep_freed_memory
    from ..pipeline import Pipeline
    from .codetrack import format_code_table

    args = parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    pipe = Pipeline.load(args.model, device=args.device)
    report = full_report(pipe, args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(report))
        if "code" in report:
            print("\n" + format_code_table(report["code"]))
    if args.samples:
        for s in code_samples(pipe):
            print(f"\n--- {s['prompt']!r}  ({s['tokens']} tokens, TPF {s['tpf']:.2f}, {s['tps']:.0f} tok/s)")
            print(s["prompt"] + s["text"])


if __name__ == "__main__":
    main()
