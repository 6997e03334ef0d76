"""One decode forward of a LLaDA2.1-mini-shaped model: a 32-token block over a 1,024-token cached prefix.

The model is built from a `ModelConfig` with random weights (routing is then near uniform, the
bandwidth-heavy case), optionally with FP8 routed experts (`llada.quantize`). The prefix is written
into the KV cache once; the timed call is `model(block, start=prefix, cache=cache)`, the call the
decoder makes at every step. TPS at a given TPF is TPF / forward time, shown next to the 1586.93 TPS
the LLaDA2.1 report gives for mini (batch and hardware unstated).

    python -m llada.bench forward --shape llada2.1-mini --random-weights [--quantize fp8] [--cuda-graph]

On a machine without CUDA it runs a smoke-size model and says so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import torch

from ..config import ModelConfig
from ..kernels import IMPLS, resolve_impl
from ..model import LLaDA2MoE, block_causal_mask
from ..quantize import quantize_model_fp8
from .kernels import _device_name, sync, timeit

PAPER_TPS = 1586.93  # LLaDA2.1-mini peak, HumanEval+, TPF 12.32
TPFS = (5.34, 12.32)  # S-mode average and the HumanEval+ peak
SHAPES = {
    "llada2.1-mini": dict(vocab_size=157184, hidden_size=2048, num_hidden_layers=20, num_attention_heads=16,
                          num_key_value_heads=4, head_dim=128, partial_rotary_factor=0.5, rope_theta=600000.0,
                          intermediate_size=5120, moe_intermediate_size=512, num_experts=256,
                          num_experts_per_tok=8, n_group=8, topk_group=4, num_shared_experts=1,
                          first_k_dense_replace=1, routed_scaling_factor=2.5),
    "smoke": dict(vocab_size=257, hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24, partial_rotary_factor=0.5, rope_theta=600000.0,
                  intermediate_size=160, moe_intermediate_size=40, num_experts=16, num_experts_per_tok=4,
                  n_group=4, topk_group=2, num_shared_experts=1, first_k_dense_replace=1,
                  routed_scaling_factor=2.5),
}


def random_model(cfg: ModelConfig, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LLaDA2MoE:
    """Allocate on `device` directly (no CPU copy of 16B parameters) and fill with fresh weights."""
    with torch.device("meta"):
        model = LLaDA2MoE(cfg)
    model = model.to_empty(device=device).to(dtype).eval().requires_grad_(False)
    return model.init_weights(seed=seed)


def prefill(model: LLaDA2MoE, prefix: int, block: int, generator: torch.Generator):
    """A cache holding `prefix` random tokens under the block-causal mask, and the next block's ids."""
    vocab, device = model.config.vocab_size, model.device
    ids = torch.randint(0, vocab, (1, prefix + block), device=device, generator=generator)
    cache = model.new_cache(prefix + block)
    with torch.inference_mode():
        model(ids[:, :prefix], mask=block_causal_mask(torch.arange(prefix, device=device) // block), cache=cache)
    cache.commit(prefix)
    return cache, ids[:, prefix:]


def graphed(step, device: torch.device):
    """Capture `step` in a CUDA graph (after warm-up on a side stream); returns its replay."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench forward", description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=[s for s in SHAPES if s != "smoke"], default="llada2.1-mini")
    parser.add_argument("--random-weights", action="store_true", help="random weights (the only source here)")
    parser.add_argument("--quantize", choices=["fp8", "none"], default="fp8", help="routed experts in FP8")
    parser.add_argument("--impl", choices=IMPLS, default="auto")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--prefix", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--cuda-graph", action="store_true", help="time a CUDA-graph replay of the step")
    parser.add_argument("--smoke", action="store_true", help="small model (automatic without CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/forward-<device>.json)")
    args = parser.parse_args(argv)
    if not args.random_weights:
        parser.error("only --random-weights is supported: the bench builds the model from its config")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    smoke = args.smoke or device.type != "cuda"
    shape_name, prefix = ("smoke", min(args.prefix, 64)) if smoke else (args.shape, args.prefix)
    iters = args.iters or (2 if smoke else 20)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    cfg = ModelConfig(**SHAPES[shape_name], max_position_embeddings=max(4096, prefix + args.block))
    print(f"[forward] building {shape_name} ({dtype}) on {device.type}", file=sys.stderr)
    model = random_model(cfg, device, dtype)
    if args.quantize == "fp8":
        args.impl = resolve_impl(args.impl, model.word_embeddings.weight)
        print(f"[forward] quantizing routed experts to fp8 ({args.impl} kernels)", file=sys.stderr)
        quantize_model_fp8(model, impl=args.impl)
    cache, block = prefill(model, prefix, args.block, torch.Generator(device=device).manual_seed(0))
    print(f"[forward] prefix {prefix} cached; timing {iters} forwards of {args.block} tokens", file=sys.stderr)
    seconds = _time_step(model, cache, block, prefix, device, args.cuda_graph, iters)
    report = _report(args, device, smoke, shape_name, prefix, iters, dtype, seconds)
    out = Path(args.out or f"bench/results/forward-{device.type}{'-smoke' if smoke else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[forward] {seconds * 1e3:.3f} ms per forward; TPS at TPF {TPFS}: "
          f"{[round(r, 1) for r in report['tps_at_tpf'].values()]} (report: {PAPER_TPS}); wrote {out}",
          file=sys.stderr)
    return 0


def _time_step(model, cache, block, prefix, device, cuda_graph: bool, iters: int) -> float:
    def step():
        with torch.inference_mode():
            return model(block, start=prefix, cache=cache)  # the block sees the cache and itself

    if cuda_graph:
        step = graphed(step, device)
    sync(device)
    return timeit(step, device, iters)


def _report(args, device, smoke, shape_name, prefix, iters, dtype, seconds) -> dict:
    return {"bench": "forward", "date": date.today().isoformat(), "device": _device_name(device),
            "smoke": smoke, "shape": shape_name, "config": SHAPES[shape_name],
            "dtype": str(dtype).removeprefix("torch."),
            "quantize": args.quantize, "impl": args.impl, "cuda_graph": args.cuda_graph, "block": args.block,
            "prefix": prefix, "iters": iters, "forward_ms": seconds * 1e3,
            "tps_at_tpf": {str(t): t / seconds for t in TPFS}, "report_tps": PAPER_TPS,
            "torch": torch.__version__}
