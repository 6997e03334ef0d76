"""Sizing on paper: LLaDA2.1-flash and 2.2-flash across GPUs with expert parallel, beside one GPU in FP8.

    python -m llada.dist.size                 # the table (docs/distributed.md shows it)
    python -m llada.dist.size --tokens 64 --json

For each layout: one rank's weights (`llada.weights.memory.weight_bytes(..., world=W)`, exact arithmetic on
the config), whether they fit the GPU with the loader's headroom (else the loader's own refusal, with the
numbers), the bytes each forward all-reduces, and two times that bound a forward of T tokens from below:

* **talk**: one all-reduce of a (T, H) fp32 buffer per MoE layer (`llada.dist.experts`). A ring all-reduce
  sends and receives 2(W-1)/W of the buffer on every rank; each call also pays a fixed latency, which at these
  sizes (512 KiB for a 32-token block of a 4096-wide model) costs more than the bytes.
* **read**: the expert weights a rank reads from its memory: with T tokens of K experts each, routed
  uniformly, a layer touches E(1 - (1 - K/E)^T) distinct experts; a rank reads its 1/W of them.

The bandwidths and the latency are assumptions (named below, stated in the output), not measurements: the
point is the ratio, that at 32-token blocks the all-reduces cost far less than reading the experts.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import torch

from ..config import ModelConfig
from ..weights.memory import GIB, does_not_fit, weight_bytes
from ..weights.replica import replica_config

GPU_GIB = {"H100": 79.6, "H200": 140.4}  # memory CUDA reports for an H100 SXM 80 GB and an H200 141 GB
HBM_GBPS = {"H100": 3350.0, "H200": 4800.0}  # datasheet HBM bandwidth, GB/s
NVLINK_GBPS = 360.0  # assumed all-reduce bus bandwidth on NVLink 4 (450 GB/s a direction, ~80% reached)
ALLREDUCE_LATENCY_US = 20.0  # assumed fixed cost of one small NCCL all-reduce within a node
LAYOUTS = (("H200", 1, "fp8"), ("H100", 1, "fp8"), ("H200", 2, None), ("H100", 4, None), ("H200", 2, "fp8"),
           ("H100", 4, "fp8"))  # (gpu, ranks, quantize): one GPU in FP8 first, for comparison


@dataclass(frozen=True)
class Layout:
    """One model on `ranks` GPUs of one kind, and what a forward of `tokens` tokens costs it on paper."""

    model: str
    gpu: str
    ranks: int
    weights: str  # "bf16" or "fp8" (routed experts in fp8, the rest bf16)
    gib_per_rank: float
    fits: bool
    refusal: str | None  # the loader's sentence when a rank's weights do not fit
    allreduce_mib: float  # fp32 bytes all-reduced per forward, summed over the MoE layers
    talk_ms: float
    read_ms: float


def layout(name: str, cfg: ModelConfig, gpu: str, ranks: int, quantize: str | None, tokens: int) -> Layout:
    need = weight_bytes(cfg, torch.bfloat16, quantize, world=ranks)
    why = does_not_fit(cfg, torch.bfloat16, "cpu", quantize, room=int(GPU_GIB[gpu] * GIB), world=ranks)
    moe_layers = cfg.num_hidden_layers - cfg.first_k_dense_replace
    buffer = tokens * cfg.hidden_size * 4  # (T, H) fp32
    talk = 0.0 if ranks == 1 else moe_layers * (ALLREDUCE_LATENCY_US * 1e-6 + 2 * (ranks - 1) / ranks * buffer /
                                                (NVLINK_GBPS * 1e9))
    E, K = cfg.num_experts, cfg.num_experts_per_tok
    touched = E * (1 - (1 - K / E) ** tokens) / E  # the share of a layer's experts a forward reads
    experts = cfg.parameter_counts()["routed_experts"] * (1 if quantize else 2)  # bytes: fp8 or bf16
    read = experts * touched / ranks / (HBM_GBPS[gpu] * 1e9)
    return Layout(name, gpu, ranks, quantize or "bf16", round(need / GIB, 1), why is None,
                  why and why.replace(" but cpu has ", f" but an {gpu} has "),
                  round(0 if ranks == 1 else moe_layers * buffer / 2**20, 1), round(talk * 1e3, 2),
                  round(read * 1e3, 1))


def table(tokens: int) -> list[Layout]:
    models = {f"LLaDA{v}-flash": ModelConfig.from_dict(replica_config("flash", version=v)) for v in ("2.1", "2.2")}
    return [layout(name, cfg, gpu, ranks, q, tokens) for name, cfg in models.items() for gpu, ranks, q in LAYOUTS]


def markdown(rows: list[Layout], tokens: int) -> str:
    head = "| model | GPUs | weights | GiB per rank | fits | all-reduced per forward | talk | read experts |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.ranks}x {r.gpu} | {r.weights} | {r.gib_per_rank} | "
                     f"{'yes' if r.fits else 'no'} | {r.allreduce_mib} MiB | {r.talk_ms} ms | {r.read_ms} ms |")
    refusals = sorted({f"{r.ranks}x {r.gpu} {r.weights}: {r.refusal}" for r in rows if r.refusal})
    return "\n".join([f"a forward of {tokens} tokens; assumed: all-reduce {NVLINK_GBPS:g} GB/s on NVLink + "
                      f"{ALLREDUCE_LATENCY_US:g} us a call, HBM " +
                      ", ".join(f"{g} {b:g} GB/s" for g, b in HBM_GBPS.items()), "", *lines, "",
                      *(f"refused: {line}" for line in refusals)])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m llada.dist.size", description="flash models across GPUs, on paper")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per forward (default: one 32-token block)")
    ap.add_argument("--json", action="store_true", help="one JSON object per layout")
    args = ap.parse_args(argv)
    if args.tokens < 1:
        ap.error("--tokens must be at least 1")
    rows = table(args.tokens)
    print("\n".join(json.dumps(asdict(r)) for r in rows) if args.json else markdown(rows, args.tokens))


if __name__ == "__main__":
    main()
