"""What a model needs in int8 and in bf16 on a CPU, from its config alone, and what the loader says at each size.

    python -m llada.bench int8 --sizing --shape mini --version 2.2   # LLaDA2.2-mini's published sizes
    python -m llada.bench int8 --sizing --model DIR                  # any model directory's config.json

Nothing is loaded or written but the JSON: the bytes come from `llada.weights.memory.weight_bytes` (exact for
what the loaders hold: tests/test_bench_int8.py checks it against a loaded model), the verdicts from
`memory.does_not_fit` and `memory.auto_quantize`, the functions the CLI and the app refuse and choose with.
For each machine size in `ROOMS_GIB` (memory available to the process, not installed): whether bf16 fits,
whether int8 fits, the quantization a CPU load picks on its own, and the refusal's own words where neither
fits; then the same for this machine now. "min_room_gib" is the weights plus `memory.HEADROOM`, the least
available memory each load accepts (the KV cache and activations of a long decode come on top).
"""

from __future__ import annotations

import argparse

import torch

from ..config import ModelConfig
from ..weights import memory

GIB = float(1 << 30)
ROOMS_GIB = (8, 12, 16, 24, 32, 48, 64)  # memory available to the process: laptops to workstations


def model_config(args: argparse.Namespace) -> tuple[ModelConfig, str]:
    """The config to size and where it came from: `--model`'s config.json, else the replica config of
    `--shape` and `--version` (`llada.weights.replica`: the published config with that shape's sizes)."""
    if args.model:
        from pathlib import Path

        from ..weights.checkpoint import read_config

        return read_config(Path(args.model))[0], f"{args.model}/config.json"
    from ..weights.replica import replica_config

    raw = replica_config(args.shape, args.version)
    return ModelConfig.from_dict(raw, source=f"replica {args.shape} {args.version}"), \
        f"llada.weights.replica.replica_config({args.shape!r}, {args.version!r})"


def verdicts(cfg: ModelConfig, room: int) -> dict:
    """At `room` bytes available: does bf16 fit, does int8 fit, what a CPU load picks, the refusal if any."""
    bf16 = memory.does_not_fit(cfg, torch.bfloat16, "cpu", room=room)
    int8 = memory.does_not_fit(cfg, torch.bfloat16, "cpu", "int8", room=room)
    picked = memory.auto_quantize(cfg, "cpu", room=room)
    return {"room_gib": round(room / GIB, 2), "bf16_fits": bf16 is None, "int8_fits": int8 is None,
            "cpu_load_picks": picked or ("bf16" if bf16 is None else None),
            "refusal": int8 if bf16 and int8 else None}


def sizing(cfg: ModelConfig) -> dict:
    """Bytes held in each form, the least room each load accepts, and the verdicts at every size of ROOMS_GIB."""
    bf16 = memory.weight_bytes(cfg, torch.bfloat16)
    int8 = memory.weight_bytes(cfg, torch.bfloat16, "int8")
    weights, rows = memory.int8_rows(cfg)
    parts = cfg.parameter_counts()
    now = memory.available_bytes("cpu")
    return {"parameters": sum(parts.values()), "parameters_by_part": parts,
            "int8_quantized_weights": weights, "int8_scale_rows": rows,
            "bf16_bytes": bf16, "int8_bytes": int8, "int8_over_bf16": round(int8 / bf16, 3),
            "bf16_gib": round(bf16 / GIB, 2), "int8_gib": round(int8 / GIB, 2),
            "min_room_gib": {"bf16": round((bf16 + memory.HEADROOM) / GIB, 2),
                             "int8": round((int8 + memory.HEADROOM) / GIB, 2)},
            "at_room": [verdicts(cfg, int(g * GIB)) for g in ROOMS_GIB],
            "this_machine_now": None if now is None else verdicts(cfg, now)}


def run(args: argparse.Namespace, argv: list[str]) -> int:
    import sys

    from .int8_probe import where
    from .timing import write_report

    cfg, source = model_config(args)
    report = {"bench": "int8-sizing", "command": "python -m llada.bench int8 " + " ".join(argv), **where(),
              "config": source, **sizing(cfg)}
    name = f"{args.shape}-{args.version}" if not args.model else args.model.rstrip("/").split("/")[-1]
    out = write_report(report, args.out, f"bench/results/int8-sizing-{name}.json")
    picks = ", ".join(f"{v['room_gib']:g} GiB: {v['cpu_load_picks'] or 'refused'}" for v in report["at_room"])
    print(f"[int8] {source}: bf16 {report['bf16_gib']} GiB, int8 {report['int8_gib']} GiB "
          f"({report['int8_over_bf16']}x); a CPU load picks {picks}; wrote {out}", file=sys.stderr)
    return 0
