"""`python -m llada.bench int8 --int8-only`: the int8 model alone, from a replica written straight in int8.

    python -m llada.bench int8 --shape mini --int8-only --workdir runs/int8
    python -m llada.bench int8 --shape mini --int8-only --version 2.2 --workdir runs/int8

The bf16 LLaDA2.1-mini (30.3 GiB of weights) fits no 32 GB machine, so there is no default load to compare
with; this mode measures what a CPU user of the mini gets. The replica (`llada.weights.replica --format
int8`: random weights, real shapes, drawn from row pools) is written once to `--workdir`, never holding
the bf16 model.
Before the load, the parent waits until `MemAvailable` covers the int8 weights plus `ROOM_MARGIN` (polled
every 30 s for up to 15 min, saying why it waits), then one child process that does nothing else measures:

* load: seconds, peak RSS (VmHWM), the bytes its weights hold against the bf16 checkpoint's bytes computed
  from config.json (target <= 0.6x), and how far the load's peak rose above the held bytes against the
  largest shard (target: at most one shard);
* forward: a `--block`-token block over a `--prefix`-token KV cache of random keys and values
  (`filled_cache`: no prefill) through the decode loop's `forward_rows`, seconds per forward; the routed
  experts that forward touched (counted, not assumed), hence the bytes it read; this machine's
  copy bandwidth (a 512 MiB torch copy, the same process) and the floor they give;
* decode: S mode (`llada.presets`) from a 16-token prompt, `--gen-length` tokens, stopped after
  `--decode-seconds`: forwards, seconds, tokens committed, tokens/s, and the decode's peak RSS. Random
  weights are never confident, so S commits about one token per forward here: tokens/s is a floor;
  a trained model's is its tokens-per-forward / seconds-per-forward.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

GIB = float(1 << 30)
ROOM_MARGIN = 3.75 * GIB  # beyond the int8 weights: ~1 GiB for the run itself (1k-token prefill activations,
#   the KV cache, the copy-bandwidth buffers), the rest for the page cache and the machine's other processes
POLL_S, PATIENCE_S = 30, 15 * 60
POOL_ROWS = 8192  # the replica's matrices are row runs of pools this tall (`replica.Draws`): minutes, not an hour


def int8_replica(shape: str, workdir: Path, version: str = "2.1") -> Path:
    """The int8 replica of `shape` (LLaDA`version`) in `workdir`, written once (the tokenizer is written last:
    present = complete)."""
    from ..weights.replica import write_replica

    out = workdir / f"llada{version}-{shape}-int8-replica"
    if not (out / "tokenizer.json").exists():
        print(f"[int8] writing a LLaDA{version} {shape} replica straight in int8 to {out}", file=sys.stderr)
        write_replica(out, shape, format="int8", progress=True, pool_rows=POOL_ROWS, version=version)
    return out


def needed_bytes(root: Path) -> int:
    """MemAvailable the load waits for: the int8 weights (sized from config.json) plus ROOM_MARGIN."""
    from ..weights import memory
    from ..weights.checkpoint import read_config

    return int(memory.weight_bytes(read_config(root)[0], torch.bfloat16, "int8") + ROOM_MARGIN)


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def wait_for_room(need: int, read=mem_available, sleep=time.sleep, poll_s: float = POLL_S,
                  patience_s: float = PATIENCE_S) -> tuple[int, float, str | None]:
    """(MemAvailable seen last, seconds waited, None) once it reaches `need`; after `patience_s` the reason why not."""
    waited = 0.0
    while True:
        room = read()
        if room >= need:
            return room, waited, None
        why = f"MemAvailable {room / GIB:.1f} GiB < {need / GIB:.1f} GiB needed (int8 weights + margin)"
        if waited >= patience_s:
            return room, waited, f"{why} after waiting {waited:.0f} s"
        print(f"[int8] waiting: {why}; looking again in {poll_s:.0f} s", file=sys.stderr)
        sleep(poll_s)
        waited += poll_s


def run(args, argv: list[str]) -> int:
    """The parent: the replica, the wait for room, one child, the report."""
    from .int8_probe import where
    from .timing import write_report

    root = Path(args.model) if args.model else int8_replica(args.shape, Path(args.workdir), args.version)
    report = {"bench": "int8-only", "command": "python -m llada.bench int8 " + " ".join(argv), **where(),
              "model": str(root), "shape": None if args.model else args.shape, "prefix": args.prefix,
              "block": args.block, "gen_length": args.gen_length}
    need = int(args.min_available_gib * GIB) if args.min_available_gib else needed_bytes(root)
    room, waited, why = wait_for_room(need)
    report["room"] = {"needed_bytes": need, "mem_available_bytes": room, "waited_seconds": waited}
    report["int8"] = {"skipped": why} if why else _child(args, root)
    report |= targets(report["int8"])
    name = (args.shape if args.version == "2.1" else f"{args.shape}-{args.version}") if not args.model else root.name
    out = write_report(report, args.out, f"bench/results/int8-only-{name}.json")
    print(summary(report) + f"; wrote {out}", file=sys.stderr)
    return 0


def _child(args, root: Path) -> dict:
    """The child's last JSON line; a child that stopped early (killed, out of memory) reports what it had."""
    import subprocess

    cmd = [sys.executable, "-m", "llada.bench", "int8", "--child", "int8-only", "--model", str(root), "--prefix",
           str(args.prefix), "--block", str(args.block), "--iters", str(args.iters), "--gen-length",
           str(args.gen_length), "--decode-seconds", str(args.decode_seconds)]
    cmd += ["--threads", str(args.threads)] if args.threads else []
    print(f"[int8] int8-only: {' '.join(cmd[1:])}", file=sys.stderr)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    return out if not done.returncode else out | {"failed": f"exit status {done.returncode} (figures: the stages done)"}


def measure(args) -> dict:
    """In the child: load the int8 directory as it is stored, then the forward and the S decode. After each
    stage the figures so far go to stdout as one JSON line: a run stopped midway still reports them."""
    from ..weights import memory
    from ..weights.checkpoint import load_model, read_config, shard_files
    from .int8_probe import forward_seconds, held_bytes, peak_rss, reset_peak, rss

    root = Path(args.model)
    cfg = read_config(root)[0]
    before, start = rss(), time.perf_counter()
    model = load_model(root)
    load_s = time.perf_counter() - start
    r = {"quantize": "int8", "load_seconds": round(load_s, 2), "rss_before_load_bytes": before,
         "peak_rss_load_bytes": peak_rss(), "weights_bytes_held": held_bytes(model),
         "bf16_checkpoint_bytes": memory.weight_bytes(cfg, torch.bfloat16),
         "largest_shard_bytes": max(f.stat().st_size for f in shard_files(root)), "threads": torch.get_num_threads()}
    _emit(r, f"loaded in {load_s:.0f} s, peak RSS {r['peak_rss_load_bytes'] / GIB:.2f} GiB")
    reset_peak()
    cache, block = filled_cache(model, args.prefix, args.block)
    cpu = time.process_time()
    r["seconds_per_forward"] = forward_seconds(model, cache, block, args.prefix, args.iters)
    r["cpu_seconds_per_forward"] = round((time.process_time() - cpu) / (args.iters + 1), 2)  # warm-up included:
    #   the CPU time this process got, all threads; on a busy machine wall time is this spread over its share
    r |= _bytes_read(model, cache, block, args.prefix)
    r["peak_rss_decode_bytes"] = forward_peak = peak_rss()  # the copy buffers below are not the decode's
    r |= _floor(r)
    _emit(r, f"seconds per forward {r['seconds_per_forward']}, floor {r['bandwidth_floor_seconds']} s")
    del cache
    reset_peak()
    r["decode_S"] = _decode_s(model, root, args.gen_length, args.decode_seconds)
    r["peak_rss_decode_bytes"] = max(forward_peak, peak_rss())
    _emit(r, f"S decode {r['decode_S']}")
    return r


def _floor(r: dict) -> dict:
    """This machine's copy bandwidth (a 512 MiB torch copy) and the seconds the forward's bytes need at it."""
    from .timing import copy_gb_per_s

    copy = copy_gb_per_s(torch.device("cpu"), 512 << 20, 5)
    return {"copy_gb_per_s": round(copy, 2),
            "bandwidth_floor_seconds": float(f"{r['forward_bytes_read'] / (copy * 1e9):.3g}"),
            "bandwidth_floor_all_weights_seconds": float(f"{r['all_weights_bytes_read'] / (copy * 1e9):.3g}")}


def _emit(r: dict, text: str) -> None:
    print(json.dumps(r), flush=True)
    _say(text)


def _say(text: str) -> None:
    print(f"[int8] {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def filled_cache(model, prefix: int, block: int):
    """A KV cache holding `prefix` positions of random keys and values (what a forward over the block reads
    and attends to, as after a prefill) and the block's ids: the 1k-token prefill itself, minutes of compute
    on a slow CPU, changes nothing that the timed forward does."""
    from .int8_probe import random_ids

    cache = model.new_cache(prefix + block)
    gen = torch.Generator().manual_seed(0)
    for t in (cache.k, cache.v):
        t[..., :prefix, :].copy_(torch.randn(t[..., :prefix, :].shape, generator=gen))
    cache.commit(prefix)
    return cache, random_ids(model.config.vocab_size, block, seed=0)


def _bytes_read(model, cache, ids: torch.Tensor, prefix: int) -> dict:
    """Bytes one forward of the block reads: every weight but the embeddings' unread rows and the routed
    experts no token chose (counted in that forward), plus the KV cache."""
    from ..fast.int8 import Int8Experts
    from ..model import RowInput
    from .int8_probe import held_bytes

    touched, expert_bytes, hooks = [], 0, []
    for m in model.modules():
        if isinstance(m, Int8Experts):
            E = m.w13.shape[0]
            expert_bytes += sum(t.numel() * t.element_size() for t in m.buffers())
            hooks.append(m.register_forward_pre_hook(lambda mod, a, E=E: touched.append((a[1].unique().numel(), E))))
    with torch.inference_mode():
        model.forward_rows([RowInput(ids, start=prefix, cache=cache)])
    for h in hooks:
        h.remove()
    share = sum(n for n, _ in touched) / max(sum(E for _, E in touched), 1)  # experts touched / experts
    kv = 2 * cache.k[:, :, :, :prefix + len(ids)].numel() * cache.k.element_size()
    emb = model.word_embeddings.weight
    everything = held_bytes(model) - emb.numel() * emb.element_size() + kv
    return {"experts_touched_share": round(share, 4), "all_weights_bytes_read": everything,
            "forward_bytes_read": int(everything - (1 - share) * expert_bytes)}


def _decode_s(model, root: Path, gen_length: int, budget_s: float) -> dict:
    """S mode from a 16-token prompt (block 32, or gen_length if shorter), stopped before the first forward
    after `budget_s` seconds: forwards, seconds, tokens committed (not mask) and tokens/s."""
    from ..decide import levenshtein_of
    from ..decode import decode
    from ..pipeline import special_id
    from ..presets import resolve
    from ..trace import Trace
    from ..weights.checkpoint import read_config
    from ..weights.tokenizer import load_tokenizer
    from .int8_probe import random_ids

    raw, tokenizer = read_config(root)[1], load_tokenizer(root)
    mask_id, eos_id = (special_id(kind, None, root, raw, tokenizer, raw["vocab_size"]) for kind in ("mask", "EOS"))
    cfg = resolve("S", gen_length=gen_length, block_length=min(32, gen_length))
    prompt = random_ids(raw["vocab_size"], 16, seed=2, avoid=(mask_id, eos_id)).tolist()
    start = time.perf_counter()
    stream = decode(model, prompt, cfg, mask_id, eos_id, may_continue=lambda n: time.perf_counter() - start < budget_s)
    trace = Trace(prompt_ids=prompt, settings=cfg, mask_id=mask_id, eos_id=eos_id)
    for _ in trace.follow(stream):
        pass
    trace, seconds = trace.finish(), time.perf_counter() - start
    tokens = sum(t != mask_id for t in trace.output_ids)
    rule = "levenshtein" if levenshtein_of(model.config, cfg, mask_id) else "joint"  # LLaDA2.2 decodes by its own
    return {"rule": rule, "threshold": cfg.threshold, "editing_threshold": cfg.editing_threshold,
            "block_length": cfg.block_length,
            "gen_length": gen_length, "budget_seconds": budget_s, "tokens": tokens, "forwards": trace.forwards,
            "seconds": round(seconds, 2), "seconds_per_forward": round(seconds / max(trace.forwards, 1), 3),
            "tokens_per_s": round(tokens / seconds, 3), "tpf": round(tokens / max(trace.forwards, 1), 3)}


def targets(r: dict) -> dict:
    """The issue's targets, measured: held / bf16 checkpoint (<= 0.6) and the load's rise above held (<= 1 shard)."""
    if "weights_bytes_held" not in r:
        return {}
    rise = r["peak_rss_load_bytes"] - r["rss_before_load_bytes"] - r["weights_bytes_held"]
    return {"int8_held_over_bf16_checkpoint": round(r["weights_bytes_held"] / r["bf16_checkpoint_bytes"], 3),
            "load_peak_above_held_bytes": rise, "load_peak_above_held_over_largest_shard":
                round(rise / r["largest_shard_bytes"], 3)}


def summary(r: dict) -> str:
    q = r["int8"]
    if "weights_bytes_held" not in q:
        return f"[int8] {q}"
    parts = [f"load {q['load_seconds']:.0f} s, held {q['weights_bytes_held'] / GIB:.2f} GiB "
             f"({r['int8_held_over_bf16_checkpoint']}x bf16), peak RSS load {q['peak_rss_load_bytes'] / GIB:.2f} GiB"]
    if "seconds_per_forward" in q:
        parts.append(f"{min(q['seconds_per_forward']):.2f} s/forward (floor {q['bandwidth_floor_seconds']} s at "
                     f"{q['copy_gb_per_s']} GB/s), peak RSS decode {q['peak_rss_decode_bytes'] / GIB:.2f} GiB")
    if "decode_S" in q:
        parts.append(f"S: {q['decode_S']['tokens_per_s']} tokens/s over {q['decode_S']['forwards']} forwards")
    return "[int8] " + "; ".join(parts + [q.get("failed", "")]) + f"; load average {r['load_average']}"
