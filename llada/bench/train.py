"""Training speed: tokens/s and achieved GFLOP/s of one training step, beside a plain fp32 matmul.

    python -m llada.bench train [--preset cpu] [--threads 2] [--experts-impl loop,grouped] [--steps 6]

The model is the training preset's size with fresh weights; the batch is random token rows of the
preset's code shape (`code_batch` x `code_length`, a quarter of each row as the prompt), so nothing
is read from disk. A step is exactly the training loop's: the M2T + T2T loss of the [clean ; noisy]
layout, backward, gradient clipping, AdamW. Per experts implementation the JSON gives the median step
time, tokens/s (rows x length / step time: content tokens of the batch) and GFLOP/s (the step's
FLOPs as `recipes.step_flops` counts them, over the step time); `matmul_gflops` is a square fp32
matmul of the same threads, timed in the same run, and `ratio` = step GFLOP/s / matmul GFLOP/s
(the share of the machine's plain matmul rate the training step reaches).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from .timing import device_info, time_ms

MATMUL_N = 1024


def matmul_gflops(n: int = MATMUL_N, iters: int = 10) -> float:
    """GFLOP/s of an (n, n) @ (n, n) fp32 matmul on the CPU's current threads."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    ms = time_ms(lambda: a @ b, torch.device("cpu"), iters=iters, warmup=2)
    return 2 * n ** 3 / (ms / 1e3) / 1e9


def step_fn(tc, impl: str, vocab: int, compiled: bool = False):
    """A closure running one training step of the preset's model on a fixed random batch."""
    from ..train.build import model_config
    from ..train.experts import use_grouped_experts
    from ..train.objective import Batch, NoiseConfig, diffusion_loss
    from ..model import LLaDA2MoE

    model = LLaDA2MoE(model_config(tc, vocab)).init_weights(seed=0).train()
    use_grouped_experts(model, impl)
    if compiled:  # as the training loop compiles: each layer on its own, static shapes
        for layer in model.layers:
            layer.compile(dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    N, L = tc.code_batch, tc.code_length
    ids = torch.randint(2, vocab, (N, L), generator=gen)
    batch = Batch(ids, torch.full((N,), L // 4), torch.full((N,), L - L // 4))
    block = max(b for b in tc.block_lengths if L % b == 0)

    def step():
        loss = diffusion_loss(model, batch, block, 1, NoiseConfig(), gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step, model.config


def main(argv: list[str]) -> int:
    from ..train.loop import preset_config
    from ..train.recipes import TRAINING_PRESETS, sizes

    ap = argparse.ArgumentParser(prog="python -m llada.bench train", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="cpu", choices=list(TRAINING_PRESETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--experts-impl", default="loop,grouped",
                    help="comma-separated: loop, grouped, grouped+compile (each layer through torch.compile)")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per implementation (after one warm-up)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the preset's)")
    for name in ("hidden", "layers", "experts", "expert_width", "code_batch", "code_length"):
        ap.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    overrides = {k: getattr(args, k) for k in ("hidden", "layers", "experts", "expert_width", "code_batch",
                                                 "code_length") if getattr(args, k) is not None}
    tc = preset_config(args.preset, device="cpu", **overrides)
    vocab = args.vocab or tc.vocab_size
    report = {"device": device_info(torch.device("cpu")), "threads": torch.get_num_threads(), "preset": args.preset,
              "batch": [tc.code_batch, tc.code_length], "matmul_gflops": round(matmul_gflops(), 1), "impls": {}}
    for impl in args.experts_impl.split(","):
        base, _, extra = impl.partition("+")
        step, cfg = step_fn(tc, base, vocab, compiled=extra == "compile")
        s = sizes(cfg, tc.code_batch, tc.code_length)
        t0 = time.perf_counter()
        step()  # warm-up (compiles, when asked)
        warm_s = time.perf_counter() - t0
        ms = time_ms(step, torch.device("cpu"), iters=args.steps, warmup=0)
        gflops = s.step_flops / (ms / 1e3) / 1e9
        report["impls"][impl] = {"step_ms": round(ms, 1), "tokens_per_s": round(tc.code_batch * tc.code_length
                                                                                 / (ms / 1e3)),
                                 "gflops": round(gflops, 1), "first_step_s": round(warm_s, 1),
                                 "parameters": s.total, "active": s.active}
        print(f"{impl:8s} step {ms:8.1f} ms  {report['impls'][impl]['tokens_per_s']:6d} tok/s  "
              f"{gflops:6.1f} GFLOP/s", file=sys.stderr)
    report["matmul_after_gflops"] = round(matmul_gflops(), 1)  # the machine is shared: bracket the steps
    for r in report["impls"].values():
        r["ratio"] = round(r["gflops"] / max(report["matmul_gflops"], report["matmul_after_gflops"]), 3)
    print(json.dumps(report, indent=2))
    return 0
