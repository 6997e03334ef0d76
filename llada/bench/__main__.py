"""`python -m llada.bench NAME [options]`: run one benchmark.

NAME is one of decode, batch, split, stream, versus, kernels, forward, load, int8, int8-rows, int8-configs,
gpu-check, lease, train, indel, repair.
"""

from __future__ import annotations

import importlib
import sys

BENCHES = {"decode": "decode speed with the KV cache on and off",
           "batch": "batched decoding: aggregate tokens/s and row latency per batch size",
           "split": "a row-batched forward's time: matrix products against everything else, per batch size",
           "stream": "one run at a time on held-out code, as a playground visitor gets it: tokens/s",
           "versus": "a workload (eval, explorer, single) at this checkout against an earlier commit, interleaved",
           "kernels": "FP8 fused-MoE layer time and bandwidth",
           "forward": "one LLaDA2.1-mini-shaped forward",
           "load": "loading a real-format checkpoint (time, peak memory), then S / Q decode speed",
           "int8": "int8 weights on the CPU vs the default load: bytes held, peak RSS, s/forward, top-1 agreement",
           "gpu-check": "on a GPU: self-check, compiled kernel tests, tuner, benchmarks, expected vs measured",
           "lease": "a short GPU lease in one command: preflight, then capped parts, a few files back",
           "train": "training step speed on the CPU: tokens/s and GFLOP/s beside a plain matmul",
           "int8-rows": "one int8 expert's products against bf16 per row count: where the kernels cross",
           "int8-configs": "the int8 forward's steps before and after sharing x's digits, against the default load",
           "indel": "a LLaDA2.2-format model on the tasks: accuracy, TPF, runs with inserts and deletes",
           "repair": "one corrupted token of a finished answer: how often T2T (and MBE) edits it back"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print("usage: python -m llada.bench {" + ",".join(BENCHES) + "} [options]\n", file=sys.stderr)
        for name, what in BENCHES.items():
            print(f"  {name:9s} {what}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"llada.bench.{argv[0].replace('-', '_')}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
