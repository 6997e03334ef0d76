"""Inserts and deletes on the tasks: how often a LLaDA2.2-format model's decoding moves tokens.

    python -m llada.bench indel --model assets/model22 --n 50 --modes S,Q --out bench/results/indel-model22.json

For each mode and task, `n` held-out task items (`llada.data.tasks.eval_items`, the evaluation split)
are decoded one by one through `Pipeline.generate` with the model's own presets (EOS stops the run).
Per mode and task the JSON gives accuracy (exact match), TPF (generated tokens / all forwards), the runs
with at least one insert (a SPLIT) and at least one delete (a DELETE), the runs with either, and the
moves in all; overall sums the tasks (accuracy: the mean over tasks). `examples` lists a few runs that
moved tokens (prompt, answer, inserts, deletes) for choosing the playground's examples.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from .timing import cpu_report, emit


def measure(pipe, modes: list[str], tasks: list[str], n: int, seed: int, gen_length: int) -> dict:
    """{mode: {task: counts, "overall": counts}, "examples": [...]} over the same items in every mode."""
    from ..data.tasks import eval_items

    report, moved = {}, []
    for mode in modes:
        cfg = pipe.config(mode, gen_length=gen_length, eos_early_stop=True)
        per_task = {}
        for task in tasks:
            c = dict.fromkeys(("items", "correct", "tokens", "forwards", "insert_runs", "delete_runs", "moved_runs",
                               "inserts", "deletes"), 0)
            for item in eval_items(task, n, seed):
                trace = pipe.generate(pipe.encode(item.prompt), cfg)
                text = pipe.decode_text([t for t in trace.output_ids if t != pipe.eos_id])
                ins, dels = trace.inserts, trace.deletes
                c["items"] += 1
                c["correct"] += int(item.check(text))
                c["tokens"] += len(trace.output_ids)
                c["forwards"] += trace.forwards
                c["insert_runs"] += int(ins > 0)
                c["delete_runs"] += int(dels > 0)
                c["moved_runs"] += int(ins + dels > 0)
                c["inserts"] += ins
                c["deletes"] += dels
                if ins + dels and len(moved) < 40:
                    moved.append({"mode": mode, "task": task, "prompt": item.prompt, "answer": text,
                                  "right": item.check(text), "inserts": ins, "deletes": dels})
            per_task[task] = _rates(c)
        total = {k: sum(t[k] for t in per_task.values()) for k in per_task[tasks[0]] if isinstance(
            per_task[tasks[0]][k], int)}
        per_task["overall"] = _rates(total) | {
            "accuracy": sum(per_task[t]["accuracy"] for t in tasks) / len(tasks)}
        report[mode] = per_task
    return report | {"examples": moved}


def _rates(c: dict) -> dict:
    return c | {"accuracy": c["correct"] / max(c["items"], 1), "tpf": c["tokens"] / max(c["forwards"], 1)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m llada.bench indel", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="assets/model22")
    ap.add_argument("--n", type=int, default=50, help="items per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="S,Q")
    ap.add_argument("--tasks", default="add,sort,reverse,rename")
    ap.add_argument("--gen-length", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="", help="also write the JSON here")
    args = ap.parse_args(argv)
    from ..pipeline import Pipeline

    torch.set_num_threads(args.threads)
    pipe = Pipeline.load(args.model)
    if pipe.model.config.version != "2.2":
        print(f"{args.model} is a LLaDA{pipe.model.config.version} model: it never inserts or deletes", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = measure(pipe, args.modes.split(","), args.tasks.split(","), args.n, args.seed, args.gen_length)
    emit(cpu_report("indel", argv, t0, args.threads, model=args.model, n=args.n, seed=args.seed,
                    results=results), args.out)
    return 0
