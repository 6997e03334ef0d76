"""The int8 forward before and after a change of its kernels' steps, against the default CPU load, taking turns.

    python -m llada.bench int8-configs --shape load --version 2.2 --rounds 3 --iters 9

One process loads a replica twice, the default way (bf16 above 1B parameters) and in int8, and times the decode
loop's call (`forward_rows`: a `--block`-token block over a `--prefix`-token KV cache) of three variants taking
turns, so that a busy machine's noise hits each alike: "default", "int8 stepwise" (each pair's row split into two
int8 digits per product, step by step: `Int8Experts.forward_ref`, `int8_linear_intmm_ref`,
`Int8SwiGLU.forward_ref`, `Int8MoE.forward_ref`: the int8 forward before the digits were shared) and "int8" (as it
runs: `int8_digits` once per layer for the experts' many rows, `grouped_intmm`, once per MoE for its shared and
routed experts, once per SwiGLU for gate and up). Each round reports the medians and int8 / default, of the wall's
seconds and of this process's CPU seconds; the rounds show how much the ratio moves with the load. Then the logits
of a prefix + block forward (fp32, the `--agree` forward of `llada.bench int8`): whether the two int8 variants
agree bit for bit, and each one's relative RMSE and top-1 agreement (all positions, the block's) against the
default's; and the int8 logits with x in two digits everywhere, as it runs (one digit in the routed experts'
many rows, `llada.fast.int8.EXPERT_DIGITS`) and in one digit everywhere (`digits_of_x`).

The stepwise variant is set by swapping the classes' forwards and the "intmm" kernel for the duration of its
calls (this benchmark's process only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

VARIANTS = ("default", "int8 stepwise", "int8")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench int8-configs", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a bf16 model directory (default: a replica of --shape)")
    parser.add_argument("--shape", default="load", help="replica shape: tiny or load (~2.2 GB)")
    parser.add_argument("--version", default="2.2", choices=("2.1", "2.2"), help="replica version")
    parser.add_argument("--workdir", default="/tmp/llada-replicas", help="where replicas are written and reused")
    parser.add_argument("--prefix", type=int, default=1024, help="tokens in the KV cache")
    parser.add_argument("--block", type=int, default=32, help="tokens per forward")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timed turns")
    parser.add_argument("--iters", type=int, default=9, help="timed forwards per variant and round")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/int8-configs-<shape>.json)")
    return parser.parse_args(argv)


@contextmanager
def stepwise(on: bool):
    """Inside, int8 runs its step-by-step definitions (the forward before the digits were shared)."""
    from ..fast import int8
    from ..fast.int8_mlp import Int8MoE, Int8SwiGLU

    kept = int8.Int8Experts.forward, int8.KERNELS["intmm"], Int8SwiGLU.forward, Int8MoE.forward
    if on:
        int8.Int8Experts.forward, int8.KERNELS["intmm"] = int8.Int8Experts.forward_ref, int8.int8_linear_intmm_ref
        Int8SwiGLU.forward, Int8MoE.forward = Int8SwiGLU.forward_ref, Int8MoE.forward_ref
    try:
        yield
    finally:
        int8.Int8Experts.forward, int8.KERNELS["intmm"], Int8SwiGLU.forward, Int8MoE.forward = kept


def turns(models: dict, caches: dict, block: torch.Tensor, prefix: int, iters: int) -> dict[str, dict]:
    """Wall and CPU seconds (this process's, all threads) per forward of each variant, taking turns, after one
    warm-up turn. The CPU seconds move less with other work on a shared machine than the wall's."""
    from ..model import RowInput

    times = {name: {"wall": [], "cpu": []} for name in VARIANTS}
    with torch.inference_mode():
        for i in range(iters + 1):
            for name in VARIANTS:
                with stepwise(name == "int8 stepwise"):
                    t, c = time.perf_counter(), time.process_time()
                    models[name].forward_rows([RowInput(block, start=prefix, cache=caches[name])])
                    if i:
                        times[name]["wall"].append(round(time.perf_counter() - t, 4))
                        times[name]["cpu"].append(round(time.process_time() - c, 4))
    return times


def logits_report(models: dict, vocab: int, prefix: int, block: int) -> dict:
    """Each int8 variant's logits against the default's, and whether the two int8 variants agree bit for bit."""
    from ..fast.kernels.reference import rel_rmse
    from ..model import block_causal_mask
    from .int8_probe import random_ids

    T = prefix + block
    ids = random_ids(vocab, T, seed=1)[None]  # (1, T)
    mask = block_causal_mask(torch.arange(T) // block)
    out = {}
    with torch.inference_mode():
        for name in VARIANTS:
            with stepwise(name == "int8 stepwise"):
                out[name] = models[name](ids, mask=mask)[0]  # (T, V) fp32
    ref, top = out["default"], out["default"].argmax(-1)
    report = {"int8_equals_stepwise_bit_for_bit": torch.equal(out["int8"], out["int8 stepwise"]), "positions": T}
    for name in VARIANTS[1:]:
        same = out[name].argmax(-1) == top  # (T,)
        report[name] = {"logits_rel_rmse": round(float(rel_rmse(out[name], ref)), 4),
                        "top1_agreement": round(same.float().mean().item(), 4),
                        "top1_agreement_block": round(same[-block:].float().mean().item(), 4)}
    return report


@contextmanager
def digits_of_x(where: str):
    """Inside, x is split into `where`'s digits: "two everywhere" (the experts' many rows too), "as it runs"
    (`llada.fast.int8.EXPERT_DIGITS` there, two in the linears) or "one everywhere" (the second digit zeroed in
    every split: the first digit's products)."""
    from ..fast import int8, int8_digits as digits, int8_mlp

    kept = int8.EXPERT_DIGITS, digits.int8_digits, int8.int8_digits, int8_mlp.int8_digits
    if where == "two everywhere":
        int8.EXPERT_DIGITS = 2
    elif where == "one everywhere":
        def first_only(x, n=2):
            d = kept[1](x, n)
            d.codes[1:].zero_()
            return d
        digits.int8_digits = int8.int8_digits = int8_mlp.int8_digits = first_only
    try:
        yield
    finally:
        int8.EXPERT_DIGITS, digits.int8_digits, int8.int8_digits, int8_mlp.int8_digits = kept


def digits_report(models: dict, vocab: int, prefix: int, block: int) -> dict:
    """The int8 logits against the default's with x in two digits everywhere, as it runs, and in one digit
    everywhere: what the experts' one digit costs next to what the weights' int8 rounding does."""
    from ..fast.kernels.reference import rel_rmse
    from ..model import block_causal_mask
    from .int8_probe import random_ids

    T = prefix + block
    ids = random_ids(vocab, T, seed=1)[None]  # (1, T)
    mask = block_causal_mask(torch.arange(T) // block)
    report = {}
    with torch.inference_mode():
        ref = models["default"](ids, mask=mask)[0]  # (T, V)
        for where in ("two everywhere", "as it runs", "one everywhere"):
            with digits_of_x(where):
                out = models["int8"](ids, mask=mask)[0]
            report[where] = {"logits_rel_rmse": round(float(rel_rmse(out, ref)), 4),
                             "top1_agreement": round((out.argmax(-1) == ref.argmax(-1)).float().mean().item(), 4)}
    return report


def main(argv: list[str]) -> int:
    from ..weights.checkpoint import load_model
    from .int8 import _prefill
    from .int8_probe import load_now, where
    from .load import replica
    from .timing import start, write_report

    args = parse(argv)
    start(args.threads)
    root = Path(args.model) if args.model else replica(args.shape, Path(args.workdir), args.version)
    ref, quant = load_model(root), load_model(root, quantize="int8")
    models = {"default": ref, "int8 stepwise": quant, "int8": quant}
    (c1, block), (c2, _) = _prefill(ref, args.prefix, args.block), _prefill(quant, args.prefix, args.block)
    caches = {"default": c1, "int8 stepwise": c2, "int8": c2}  # a forward of the block writes the same keys
    report = {"bench": "int8-configs", "command": "python -m llada.bench int8-configs " + " ".join(argv), **where(),
              "model": str(root), "version": args.version, "prefix": args.prefix, "block": args.block, "rounds": []}
    for _ in range(args.rounds):
        began = load_now()
        times = turns(models, caches, block, args.prefix, args.iters)
        wall = {name: statistics.median(t["wall"]) for name, t in times.items()}
        cpu = {name: statistics.median(t["cpu"]) for name, t in times.items()}
        report["rounds"].append({"load_average": {"start": began, "end": load_now()}, "median_seconds": wall,
                                 "median_cpu_seconds": cpu,
                                 "over_default": {n: round(wall[n] / wall["default"], 3) for n in VARIANTS[1:]},
                                 "cpu_over_default": {n: round(cpu[n] / cpu["default"], 3) for n in VARIANTS[1:]},
                                 "seconds": times})
    for key in ("over_default", "cpu_over_default"):
        report[f"{key}_per_round"] = {n: [r[key][n] for r in report["rounds"]] for n in VARIANTS[1:]}
    report["logits"] = logits_report(models, ref.config.vocab_size, args.prefix, args.block)
    report["digits_of_x"] = digits_report(models, ref.config.vocab_size, args.prefix, args.block)
    name = root.name if args.model else f"{args.shape}-{args.version}"
    out = write_report(report, args.out, f"bench/results/int8-configs-{name}.json")
    print(f"[int8-configs] int8 / default per round, wall {report['over_default_per_round']}, CPU "
          f"{report['cpu_over_default_per_round']}; logits "
          f"{report['logits']}; digits of x {report['digits_of_x']}; wrote {out}", file=sys.stderr)
    return 0
