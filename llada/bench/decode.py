"""Decode speed on CPU: forwards per second and tokens per second, KV cache on and off.

A random model of LLaDA2.1-mini's proportions, scaled down (hidden 256, 8 groups of 4 experts, top-8,
expert width hidden/4, GQA 4:1, partial rotary 0.5), decodes the same prompt at each gen_length with
the cache on and off. Editing is off and τ_mask is 1.0, so every run drafts one token per forward and
both variants do the same number of forwards: the time ratio is the per-forward cost ratio.

    python -m llada.bench decode [--gen-lengths 64 512] [--out bench/results/decode-cpu.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path

import torch
from tqdm import tqdm

from ..config import ModelConfig
from ..decode import DecodeConfig, generate
from ..model import LLaDA2MoE

MINI_PROPORTIONS = {"vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
                    "num_key_value_heads": 1, "head_dim": 64, "partial_rotary_factor": 0.5,
                    "intermediate_size": 640, "moe_intermediate_size": 64, "num_experts": 32,
                    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "num_shared_experts": 1,
                    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "rope_theta": 600000.0,
                    "max_position_embeddings": 4096}


def random_model(seed: int = 0) -> LLaDA2MoE:
    return LLaDA2MoE(ModelConfig(**MINI_PROPORTIONS)).init_weights(seed=seed).eval().requires_grad_(False)


def run_one(model: LLaDA2MoE, prompt: list[int], gen_length: int, use_cache: bool) -> dict:
    vocab = model.config.vocab_size
    cfg = DecodeConfig(threshold=1.0, editing_threshold=None, gen_length=gen_length, block_length=32,
                       use_cache=use_cache)
    start = time.perf_counter()
    result = generate(model, prompt, cfg, mask_id=vocab - 1, eos_id=vocab - 2)
    seconds = time.perf_counter() - start
    return {"gen_length": gen_length, "cache": use_cache, "tokens": len(result.output_ids),
            "decode_forwards": result.num_decode_forwards, "cache_forwards": result.num_cache_forwards,
            "seconds": round(seconds, 4), "forwards_per_s": round(result.forwards / seconds, 2),
            "tps": round(len(result.output_ids) / seconds, 2), "tpf": round(result.tpf, 3)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.bench decode", description=__doc__.split("\n")[0])
    parser.add_argument("--gen-lengths", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", default="bench/results/decode-cpu.json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = random_model()
    prompt = torch.randint(0, model.config.vocab_size - 2, (args.prompt_length,),
                           generator=torch.Generator().manual_seed(1)).tolist()
    run_one(model, prompt, 32, True)  # warm-up
    runs = []
    for gen, cache in tqdm([(g, c) for g in args.gen_lengths for c in (True, False)], desc="decode bench"):
        runs.append(run_one(model, prompt, gen, cache))
        tqdm.write(_line(runs[-1]))
    speedup = {g: _ratio(runs, g) for g in args.gen_lengths}
    report = {"date": date.today().isoformat(), "device": "cpu", "cpu": platform.processor() or platform.machine(),
              "threads": torch.get_num_threads(), "model": MINI_PROPORTIONS, "prompt_length": args.prompt_length,
              "runs": runs, "cache_speedup": speedup}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for g, s in speedup.items():
        print(f"gen_length {g}: cached run {s:.2f}x faster than uncached")
    print(f"wrote {args.out}")
    return 0


def _ratio(runs: list[dict], gen: int) -> float:
    by = {r["cache"]: r["seconds"] for r in runs if r["gen_length"] == gen}
    return round(by[False] / by[True], 2)


def _line(r: dict) -> str:
    return (f"gen {r['gen_length']:4d} cache {'on ' if r['cache'] else 'off'}: {r['forwards_per_s']:7.1f} forwards/s, "
            f"{r['tps']:7.1f} tokens/s, {r['decode_forwards']} decode + {r['cache_forwards']} cache forwards, "
            f"{r['seconds']:.2f} s")
