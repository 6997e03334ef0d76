"""One decode forward of a LLaDA2.1-mini-shaped model: a 32-token block over a 1,024-token cached prefix.

The model is built from a `ModelConfig` with random weights (routing is then near uniform: ~163 of
256 experts touched per layer at 32 tokens, the bandwidth-heavy case), its routed experts in FP8
(`llada.fast.quantize`: on CUDA the Triton kernels and the fused router). The prefix is written into the
KV cache once; the timed call is the decode loop's own cached forward, `llada.fast.graphs.StepGraphs`:
the static-shape forward recorded as a CUDA graph (`graph_ms`), and the same forward eagerly
(`eager_ms`, the dynamic path the loop takes without graphs). TPS at a given TPF is TPF / forward
time, shown next to the 1586.93 TPS the LLaDA2.1 report gives for mini (batch and hardware unstated).

Bytes per forward: every weight the forward reads once (attention, dense and shared MLPs, router,
norms, lm_head, embedding rows ~0), the routed experts the block's routing touches (measured from
the router on this input), and the KV cache read; GB/s over the graph time is reported as a share
of the measured copy bandwidth. The roofline at 4.3 TB/s is ~2.6 ms; the target is 3.9 ms on an H200.

    python -m llada.bench forward --shape llada2.1-mini --random-weights [--quantize fp8|none]

Without CUDA it runs a smoke-size model (static forward, no graph) and says so in the JSON.
"""

from __future__ import annotations

import argparse
import sys

import torch

from ..config import ModelConfig
from ..fast.engine import ENGINES, use_engine
from ..fast.graphs import StepGraphs
from ..fast.kernels import IMPLS, resolve_impl
from ..fast.kernels.launch import count_launches
from ..model import LLaDA2MoE, block_causal_mask
from ..fast.quantize import FP8Experts, quantize_model_fp8
from .timing import copy_gb_per_s, device_info, start, time_ms, write_report

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
    """Allocate on `device` directly, already in `dtype`, and fill with fresh weights.

    The module is laid out on `meta` (no memory), cast there, then allocated once: the mini's 16B parameters
    take 32 GB in bf16 and never pass through fp32 (64 GB) or the CPU."""
    with torch.device("meta"):
        model = LLaDA2MoE(cfg).to(dtype)
    model = model.to_empty(device=device).eval().requires_grad_(False)
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


def forward_bytes(model: LLaDA2MoE, block_ids: torch.Tensor, cache, prefix: int) -> dict:
    """Bytes one cached forward reads: non-expert weights, touched experts (measured), KV cache."""
    routed = _routed_expert_tensors(model)
    expert_params = sum(t.numel() * t.element_size() for t in routed.values())
    other = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                if "word_embeddings" not in n and p.data_ptr() not in routed)
    touched = _touched_fraction(model, block_ids, prefix, cache)
    kv = 2 * cache.k[:, :, :, :prefix + block_ids.shape[1]].numel() * cache.k.element_size()
    return {"non_expert_weights": other, "routed_experts_touched": int(expert_params * touched),
            "kv_cache": kv, "experts_touched_per_layer": round(touched * model.config.num_experts, 1),
            "total": other + int(expert_params * touched) + kv}


def _routed_expert_tensors(model: LLaDA2MoE) -> dict[int, torch.Tensor]:
    """Every MoE layer's routed-expert weights by address, whatever holds them: bf16 parameters (`Experts`,
    the fast engine's `FusedExperts`) or FP8 buffers with their scales (`FP8Experts`); not the shared expert."""
    out = {}
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "experts" or isinstance(module, FP8Experts):
            for t in [*module.parameters(), *module.buffers()]:
                out[t.data_ptr()] = t
    return out


def _touched_fraction(model: LLaDA2MoE, block_ids, prefix: int, cache) -> float:
    """Mean share of experts the block's routing touches per MoE layer (hooks on the routers)."""
    seen = []
    E = model.config.num_experts  # the fast engine's routers add the shared expert's column, id E: not counted
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, out: seen.append(out[0].unique().lt(E).sum().item()))
             for layer in model.layers if hasattr(layer.mlp, "gate")]
    with torch.inference_mode():
        model(block_ids, start=prefix, cache=cache)
    for h in hooks:
        h.remove()
    return sum(seen) / max(len(seen), 1) / model.config.num_experts


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench forward", description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=[s for s in SHAPES if s != "smoke"], default="llada2.1-mini")
    parser.add_argument("--random-weights", action="store_true", help="random weights (the only source here)")
    parser.add_argument("--quantize", choices=["fp8", "none"], default="fp8", help="routed experts in FP8")
    parser.add_argument("--impl", choices=IMPLS, default="auto")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="MoE kernels (llada.fast.engine): auto = fast on CUDA after its self-check")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--prefix", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=None, help="timed calls on CPU")
    parser.add_argument("--smoke", action="store_true", help="small model (automatic without CUDA)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/forward-<device>.json)")
    args = parser.parse_args(argv)
    if not args.random_weights:
        parser.error("only --random-weights is supported: the bench builds the model from its config")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    device = start(args.threads)
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
    engine = use_engine(model, "fast" if args.engine == "auto" and args.impl == "triton" else args.engine,
                        decode=None)  # random weights: near-uniform logits tie everywhere; the layer check stays
    print(f"[forward] {engine.line()}", file=sys.stderr)
    cache, block = prefill(model, prefix, args.block, torch.Generator(device=device).manual_seed(0))
    print(f"[forward] prefix {prefix} cached; timing forwards of {args.block} tokens", file=sys.stderr)
    report = device_info(device) | _measure(model, cache, block, prefix, args.block, device, iters)
    report |= {"bench": "forward", "smoke": smoke, "shape": shape_name, "config": SHAPES[shape_name],
               "dtype": str(dtype).removeprefix("torch."), "quantize": args.quantize, "impl": args.impl,
               "block": args.block, "prefix": prefix, "report_tps": PAPER_TPS, "engine": vars(engine),
               "tps_at_tpf": {str(t): t / (report["forward_ms"] / 1e3) for t in TPFS}}
    out = write_report(report, args.out, f"bench/results/forward-{device.type}{'-smoke' if smoke else ''}.json")
    print(f"[forward] {report['forward_ms']:.3f} ms per forward ({report['path']}); TPS at TPF {TPFS}: "
          f"{[round(r, 1) for r in report['tps_at_tpf'].values()]} (report: {PAPER_TPS}); wrote {out}",
          file=sys.stderr)
    return 0


def _measure(model, cache, block, prefix: int, B: int, device, iters: int) -> dict:
    lo, hi = prefix, prefix + block.shape[1]
    graphs = StepGraphs(model, cache, B, capture=device.type == "cuda")
    with torch.inference_mode():
        with count_launches() as count:  # one eager forward: how many kernels the graph replaces
            model(block, start=prefix, cache=cache)
        step = lambda: graphs(block, lo, hi, prefix // B)  # noqa: E731  (the decode loop's call)
        for _ in range(2 if device.type == "cuda" else 1):  # warm-up, then the recording on CUDA
            step()
        warm = int(device.type == "cuda")  # on the CPU both paths have just run once: no second warm-up
        static_ms = time_ms(step, device, iters, warmup=warm)
        eager_ms = time_ms(lambda: model(block, start=prefix, cache=cache), device, iters, warmup=warm)
    nbytes = forward_bytes(model, block, cache, prefix)
    copy = copy_gb_per_s(device, (8 if device.type != "cuda" else 1024) << 20, iters)
    return {"path": "cuda graph" if graphs.replays else "static forward, eager", "forward_ms": static_ms,
            "eager_ms": eager_ms, "launches_per_forward": count.total, "host_syncs_per_forward": len(count.syncs),
            "bytes": nbytes, "gb_per_s": nbytes["total"] / (static_ms / 1e3) / 1e9, "copy_gb_per_s": copy,
            "share_of_copy": nbytes["total"] / (static_ms / 1e3) / 1e9 / copy,
            "roofline_ms_at_copy": nbytes["total"] / (copy * 1e9) * 1e3}
