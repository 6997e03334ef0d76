"""Decode speed: forwards per second and tokens per second, KV cache on and off, each forward path.

A random model decodes the same prompt at each gen_length with the cache on and off, and with the
cache on along each forward path of the loop (`llada.decode`: "dynamic" slices the cache, "graph"
replays CUDA graphs of the static forward). Editing is off and τ_mask is 1.0, so every run drafts
one token per forward and all variants do the same number of forwards: time ratios are per-forward
cost ratios (a trained model drafts several tokens per forward; TPS = TPF x forwards/s).

    python -m llada.bench decode [--gen-lengths 64 512] [--out bench/results/decode-cpu.json]
    python -m llada.bench decode --shape llada2.1-mini --quantize fp8      # on a GPU: dynamic vs graph

The default model has LLaDA2.1-mini's proportions scaled down (hidden 256, 8 groups of 4 experts,
top-8, expert width hidden/4, GQA 4:1, partial rotary 0.5); `--shape llada2.1-mini` builds the real
sizes (random weights, bf16; FP8 routed experts with `--quantize fp8`), for a GPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

from ..config import ModelConfig
from ..decode import DecodeConfig, generate
from ..fast.engine import use_engine
from ..model import LLaDA2MoE
from ..fast.quantize import quantize_model_fp8
from .forward import SHAPES, random_model
from .timing import device_info, start, sync, write_report

MINI_PROPORTIONS = {"vocab_size": 8192, "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
                    "num_key_value_heads": 1, "head_dim": 64, "partial_rotary_factor": 0.5,
                    "intermediate_size": 640, "moe_intermediate_size": 64, "num_experts": 32,
                    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "num_shared_experts": 1,
                    "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "rope_theta": 600000.0,
                    "max_position_embeddings": 4096}


def build_model(shape: str, device: torch.device, quantize: str) -> tuple[LLaDA2MoE, dict]:
    sizes = MINI_PROPORTIONS if shape == "proportions" else SHAPES[shape] | {"max_position_embeddings": 4096}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = random_model(ModelConfig(**sizes), device, dtype)
    if quantize == "fp8":
        quantize_model_fp8(model)  # Triton kernels and fused routers on CUDA, the references on CPU
    use_engine(model, "auto", decode=None)  # the fused kernels on CUDA after their layer check (random weights)
    return model, sizes


def run_one(model: LLaDA2MoE, prompt: list[int], gen_length: int, use_cache: bool, forward: str,
            **settings) -> dict:
    """One decode of `gen_length` tokens on the `forward` path (DecodeConfig `settings` on top of this bench's)."""
    vocab = model.config.vocab_size
    cfg = DecodeConfig(**{"threshold": 1.0, "editing_threshold": None, "gen_length": gen_length, "block_length": 32,
                          "use_cache": use_cache} | settings)
    sync(model.device)
    start = time.perf_counter()
    result = generate(model, prompt, cfg, mask_id=vocab - 1, eos_id=vocab - 2, forward=forward)
    sync(model.device)
    seconds = time.perf_counter() - start
    return {"gen_length": gen_length, "cache": use_cache, "forward": forward, "tokens": len(result.output_ids),
            "decode_forwards": result.num_decode_forwards, "cache_forwards": result.num_cache_forwards,
            "seconds": round(seconds, 4), "forwards_per_s": round(result.forwards / seconds, 2),
            "tps": round(len(result.output_ids) / seconds, 2), "tpf": round(result.tpf, 3)}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench decode", description=__doc__.split("\n")[0])
    parser.add_argument("--gen-lengths", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--shape", choices=["proportions", "llada2.1-mini"], default="proportions")
    parser.add_argument("--quantize", choices=["none", "fp8"], default="none")
    parser.add_argument("--forward", nargs="+", default=None, choices=["dynamic", "static", "graph"],
                        help="cached forward paths to time (default: dynamic; dynamic and graph on CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/decode-<device>.json)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    device = start(args.threads)
    paths = args.forward or (["dynamic", "graph"] if device.type == "cuda" else ["dynamic"])
    model, sizes = build_model(args.shape, device, args.quantize)
    prompt = torch.randint(0, model.config.vocab_size - 2, (args.prompt_length,),
                           generator=torch.Generator().manual_seed(1)).tolist()
    for path in paths:
        run_one(model, prompt, 32, True, path)  # warm-up (Triton compiles, graphs are per run)
    plan = [(g, True, p) for g in args.gen_lengths for p in paths] + [(g, False, "dynamic") for g in args.gen_lengths]
    runs = []
    for gen, cache, path in tqdm(plan, desc="decode bench"):
        runs.append(run_one(model, prompt, gen, cache, path))
        tqdm.write(_line(runs[-1]))
    speedup = {g: _ratio(runs, g, paths[0]) for g in args.gen_lengths}
    report = device_info(device) | {
        "bench": "decode", "threads": torch.get_num_threads(), "shape": args.shape, "model": sizes,
        "dtype": str(model.dtype).removeprefix("torch."), "quantize": args.quantize,
        "prompt_length": args.prompt_length, "runs": runs, "cache_speedup": speedup}
    out = write_report(report, args.out, f"bench/results/decode-{device.type}.json")
    for g, s in speedup.items():
        print(f"gen_length {g}: cached run ({paths[0]}) {s:.2f}x faster than uncached")
    print(f"wrote {out}")
    return 0


def _ratio(runs: list[dict], gen: int, path: str) -> float:
    cached = next(r for r in runs if r["gen_length"] == gen and r["cache"] and r["forward"] == path)
    plain = next(r for r in runs if r["gen_length"] == gen and not r["cache"])
    return round(plain["seconds"] / cached["seconds"], 2)


def _line(r: dict) -> str:
    return (f"gen {r['gen_length']:4d} cache {'on ' if r['cache'] else 'off'} {r['forward']:7s}: "
            f"{r['forwards_per_s']:7.1f} forwards/s, {r['tps']:7.1f} tokens/s, {r['decode_forwards']} decode + "
            f"{r['cache_forwards']} cache forwards, {r['seconds']:.2f} s")
