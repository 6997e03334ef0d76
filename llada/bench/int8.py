"""Int8 weights on the CPU against today's default CPU load: memory held, peak RSS, forward time, agreement.

    python -m llada.bench int8 --shape load            # the ~2.2 GB replica (vocabulary 30% of it)
    python -m llada.bench int8 --shape mini            # full-size LLaDA2.1-mini (~32 GB bf16 replica on disk)
    python -m llada.bench int8 --shape mini --int8-only  # the int8 mini alone, its replica written in int8
                                                       # (llada.bench.int8_only: ~16 GB on disk, ~20 GB free RAM)
    python -m llada.bench int8 --shape load --version 2.2  # a LLaDA2.2 replica (its decode: the Levenshtein rule)
    python -m llada.bench int8 --sizing --shape mini --version 2.2  # the sizing alone, from the config

A replica of `--shape` (`llada.weights.replica`, random weights, the real format) is written once to
`--workdir`, or `--model DIR` is used. Each variant is measured in a fresh child process that does nothing
else: "default" is `load_model(DIR)` as the CLI and the app load on a CPU today (fp32 up to 1B parameters,
the checkpoint's bf16 above), "int8" is `load_model(DIR, quantize="int8")` (`llada.fast.int8`). A child
reports the load's time and peak RSS (VmHWM), the bytes its weights hold, then the peak RSS while it runs
the decode loop's own call (`forward_rows`, one row: a `--block`-token block over a `--prefix`-token KV
cache), its median seconds per forward, and the memory-bandwidth floor (bytes the forward reads: every
weight but the embeddings' unread rows, plus the KV cache, divided by this machine's measured copy
bandwidth). A variant that does not fit this machine is skipped, with the sizing's reason.

Agreement (`--agree`, both models in one process: only where both fit): the two forwards timed again, taking
turns (a busy machine's noise then hits both alike); per position, whether the int8
model's top-1 is the default model's, over the prefix + block forward; and both greedy decodes of a short
prompt, with the first output position where they differ. Random weights make near-ties common, so this
is a floor for a trained model's agreement. JSON: bench/results/int8-<shape>.json, with the command, the
commit, the machine and its load average beside every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .int8_probe import forward_seconds, held_bytes, interleaved, load_now, peak_rss, random_ids, reset_peak, rss, where

GIB = float(1 << 30)
VARIANTS = {"default": None, "int8": "int8"}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llada.bench int8", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a bf16 model directory (default: a replica of --shape)")
    parser.add_argument("--shape", default="load", help="replica shape: tiny, load (~2.2 GB) or mini (~32 GB)")
    parser.add_argument("--workdir", default="/tmp/llada-replicas", help="where replicas are written and reused")
    parser.add_argument("--prefix", type=int, default=1024, help="tokens in the KV cache")
    parser.add_argument("--block", type=int, default=32, help="tokens per forward")
    parser.add_argument("--iters", type=int, default=3, help="timed forwards per variant")
    parser.add_argument("--agree", action="store_true", help="also measure top-1 agreement (both models at once)")
    parser.add_argument("--gen-length", type=int, default=32, help="tokens of each decode (--agree, --int8-only)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/int8-<shape>.json)")
    parser.add_argument("--int8-only", action="store_true",
                        help="only the int8 model, from a replica written straight in int8 (llada.bench.int8_only)")
    parser.add_argument("--min-available-gib", type=float, default=None,
                        help="--int8-only: MemAvailable to wait for before the load (default: int8 weights + 3.75)")
    parser.add_argument("--decode-seconds", type=float, default=600,
                        help="--int8-only: the S decode stops before its first forward after this many seconds")
    parser.add_argument("--version", default="2.1", choices=("2.1", "2.2"), help="replica version (2.2: LLaDA2.2)")
    parser.add_argument("--sizing", action="store_true",
                        help="only the sizing from the config: bytes in int8 and bf16, verdicts per machine size "
                             "(llada.bench.int8_sizing; nothing loaded)")
    parser.add_argument("--child", choices=[*VARIANTS, "agree", "int8-only"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    from .timing import start, write_report

    args = parse(argv)
    start(args.threads)
    if args.sizing:
        from . import int8_sizing

        return int8_sizing.run(args, argv)
    if args.child == "int8-only" or (args.int8_only and not args.child):
        from . import int8_only

        if args.child:
            int8_only.measure(args)  # one JSON line per stage on stdout
            return 0
        return int8_only.run(args, argv)
    if args.child:
        print(json.dumps(agreement(args) if args.child == "agree" else measure(args, VARIANTS[args.child])))
        return 0
    from .load import replica

    root = Path(args.model) if args.model else replica(args.shape, Path(args.workdir), args.version)
    report = {"bench": "int8", "command": "python -m llada.bench int8 " + " ".join(argv), **where(),
              "model": str(root), "shape": None if args.model else args.shape, "prefix": args.prefix,
              "block": args.block, "checkpoint_bytes": sum(f.stat().st_size for f in root.glob("*.safetensors"))}
    for name, quantize in VARIANTS.items():
        why = _does_not_fit(root, quantize)
        report[name] = {"skipped": why} if why else _child(args, root, name)
    if args.agree:
        why = _does_not_fit(root, "both")
        report["agreement"] = {"skipped": why} if why else _child(args, root, "agree")
    report |= _ratios(report)
    name = (args.shape if args.version == "2.1" else f"{args.shape}-{args.version}") if not args.model else root.name
    out = write_report(report, args.out, f"bench/results/int8-{name}.json")
    print(summary(report) + f"; wrote {out}", file=sys.stderr)
    return 0


def _does_not_fit(root: Path, quantize: str | None) -> str | None:
    """Why the variant ("both": the two at once) does not fit this machine now (sizing from config.json)."""
    from ..weights import memory
    from ..weights.checkpoint import read_config

    cfg, _ = read_config(root)
    need = {"default": memory.weight_bytes(cfg, memory.default_dtype(cfg, "cpu")),
            "int8": memory.weight_bytes(cfg, torch.bfloat16, "int8")}
    total = need["default"] + need["int8"] if quantize == "both" else need["int8" if quantize else "default"]
    room = memory.available_bytes("cpu")
    if room is None or total + 2 * memory.HEADROOM <= room:
        return None
    return f"needs {total / GIB:.1f} GiB (+2 GiB headroom for the KV cache and activations), {room / GIB:.1f} GiB free"


def _child(args, root: Path, name: str) -> dict:
    cmd = [sys.executable, "-m", "llada.bench", "int8", "--child", name, "--model", str(root), "--prefix",
           str(args.prefix), "--block", str(args.block), "--iters", str(args.iters), "--gen-length",
           str(args.gen_length)] + (["--threads", str(args.threads)] if args.threads else [])
    print(f"[int8] {name}: {' '.join(cmd[1:])}", file=sys.stderr)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, check=False)
    if done.returncode:
        return {"failed": f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args, quantize: str | None) -> dict:
    """In a child: load one variant, then time the decode loop's cached forward; memory at each stage."""
    from ..weights.checkpoint import load_model
    from .timing import copy_gb_per_s

    before, load_start = rss(), load_now()
    start = time.perf_counter()
    model = load_model(args.model, quantize=quantize)
    load_s = time.perf_counter() - start
    load_peak = peak_rss()
    reset_peak()
    cache, block = _prefill(model, args.prefix, args.block)
    seconds = forward_seconds(model, cache, block, args.prefix, args.iters)
    decode_peak = peak_rss()  # before the copy-bandwidth buffers below
    held = held_bytes(model)
    kv = 2 * cache.k[:, :, :, :args.prefix + args.block].numel() * cache.k.element_size()
    read = held - model.word_embeddings.weight.numel() * model.dtype.itemsize + kv  # embeddings: 32 rows read
    copy = copy_gb_per_s(torch.device("cpu"), 256 << 20, 5)
    return {"dtype": str(model.dtype).removeprefix("torch."), "quantize": quantize, "load_seconds": round(load_s, 2),
            "rss_before_load_bytes": before, "peak_rss_load_bytes": load_peak, "peak_rss_decode_bytes": decode_peak,
            "weights_bytes_held": held, "seconds_per_forward": seconds, "forward_bytes_read": read,
            "copy_gb_per_s": round(copy, 2),
            "bandwidth_floor_seconds": float(f"{read / (copy * 1e9):.3g}"),  # 3 significant digits: tiny models too
            "threads": torch.get_num_threads(), "load_average": {"start": load_start, "end": load_now()}}


def _prefill(model, prefix: int, block: int):
    """A KV cache holding `prefix` random tokens (block-causal, no logits computed) and the next block's ids."""
    from ..model import block_causal_mask

    ids = random_ids(model.config.vocab_size, prefix + block, seed=0)[None]  # (1, prefix + block)
    cache = model.new_cache(prefix + block)
    with torch.inference_mode():
        model(ids[:, :prefix], mask=block_causal_mask(torch.arange(prefix) // block), cache=cache, hidden_only=True)
    cache.commit(prefix)
    return cache, ids[0, prefix:]


def agreement(args) -> dict:
    """In a child: both variants loaded; per-position top-1 agreement and where greedy decodes first differ
    (each decode follows the checkpoint's rule: LLaDA2.2's Levenshtein rule on a 2.2 model)."""
    from ..config import DecodeConfig
    from ..decide import levenshtein_of
    from ..decode import generate
    from ..model import block_causal_mask
    from ..pipeline import special_id
    from ..weights.checkpoint import load_model, read_config
    from ..weights.tokenizer import load_tokenizer

    load_start = load_now()
    root = Path(args.model)
    raw, tokenizer = read_config(root)[1], load_tokenizer(root)
    mask_id, eos_id = (special_id(kind, None, root, raw, tokenizer, raw["vocab_size"]) for kind in ("mask", "EOS"))
    ref, quant = load_model(root), load_model(root, quantize="int8")
    (c1, block), (c2, _) = _prefill(ref, args.prefix, args.block), _prefill(quant, args.prefix, args.block)
    default_s, int8_s = interleaved([(ref, c1), (quant, c2)], block, args.prefix, args.iters)
    del c1, c2
    T = args.prefix + args.block
    ids = random_ids(ref.config.vocab_size, T, seed=1, avoid=(mask_id, eos_id))[None]  # (1, T)
    mask = block_causal_mask(torch.arange(T) // args.block)
    with torch.inference_mode():
        same = (ref(ids, mask=mask).argmax(-1) == quant(ids, mask=mask).argmax(-1))[0]  # (T,)
    cfg = DecodeConfig(gen_length=args.gen_length, block_length=min(args.block, args.gen_length), threshold=0.9)
    prompt = ids[0, :16].tolist()
    outs = [generate(m, prompt, cfg, mask_id, eos_id).output_ids for m in (ref, quant)]
    first = next((i for i, (a, b) in enumerate(zip(*outs)) if a != b), None)
    return {"interleaved_seconds_per_forward": {"default": default_s, "int8": int8_s},
            "positions": T, "top1_agreement": round(same.float().mean().item(), 4),
            "top1_agreement_block": round(same[-args.block:].float().mean().item(), 4),
            "decode_rule": "levenshtein" if levenshtein_of(ref.config, cfg, mask_id) else "joint",
            "decode_tokens": len(outs[0]), "decode_first_difference": first,
            "decode_agreement": round(sum(a == b for a, b in zip(*outs)) / max(len(outs[0]), 1), 4),
            "load_average": {"start": load_start, "end": load_now()}}


def _ratios(report: dict) -> dict:
    """int8 over default: held bytes against the checkpoint, and the forward's median seconds (fresh processes
    one after the other, then the same process taking turns: the fairer comparison on a busy machine)."""
    d, q, out = report.get("default", {}), report.get("int8", {}), {}
    if "weights_bytes_held" in q:
        out["int8_held_over_bf16_checkpoint"] = round(q["weights_bytes_held"] / report["checkpoint_bytes"], 3)
    if "seconds_per_forward" in d and "seconds_per_forward" in q:
        out["int8_forward_over_default"] = _median_ratio(q["seconds_per_forward"], d["seconds_per_forward"])
    both = report.get("agreement", {}).get("interleaved_seconds_per_forward")
    if both:
        out["int8_forward_over_default_interleaved"] = _median_ratio(both["int8"], both["default"])
    return out


def _median_ratio(a: list[float], b: list[float]) -> float:
    return round(statistics.median(a) / statistics.median(b), 3)


def summary(r: dict) -> str:
    parts = []
    for name in VARIANTS:
        v = r.get(name, {})
        if "seconds_per_forward" in v:
            median = statistics.median(v["seconds_per_forward"])
            parts.append(f"{name} ({v['dtype']}): median {median:.2f} s/forward, held "
                         f"{v['weights_bytes_held'] / GIB:.2f} GiB, peak RSS load {v['peak_rss_load_bytes'] / GIB:.2f} "
                         f"/ decode {v['peak_rss_decode_bytes'] / GIB:.2f} GiB")
        else:
            parts.append(f"{name}: {v}")
    if "agreement" in r:
        parts.append(f"top-1 agreement {r['agreement'].get('top1_agreement')}")
    return "[int8] " + "; ".join(parts) + f"; held/bf16 checkpoint {r.get('int8_held_over_bf16_checkpoint')}"
