"""The training part of a lease: the Python-writing model trained on the GPU from data built beforehand.

    python -m llada.bench.lease_train OUT.json [--dry-run]

The corpus, tokenizer and rows are built on a CPU before the lease and packed small (`lease_data`):

    python -m llada.train --preset code --dry-run --device cpu --out runs/lease-data
    python -m llada.bench.lease_data pack runs/lease-data runs/lease-carry

`runs/lease-carry` travels with the lease call (git ignores `runs/`; the call names it in `carry`), and
this part unpacks it into the scratch folder first. The part trains `--preset code` reshaped by `SHAPE`
into OUT's folder `train/`
(sharded bf16 safetensors, tokenizer, presets.json, loss.csv, training.json; the lease packs it into
`lease-model.tar.NN` chunks that come back), for as long as the lease leaves it: the part's deadline
(`LEASE_PART_DEADLINE`, seconds since the epoch) less `SETUP_S` for importing, loading and saving.
Eager, not compiled: a compile's first minute would be a third of the training.

`--dry-run` trains `--preset tiny` on the CPU for a few steps from a corpus built on the spot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARRIED = ROOT / "runs" / "lease-carry"
SETUP_S = 85.0  # import, CUDA start, rows to the GPU, the model built, saving at the end
# ~15 M parameters (~30 MB of bf16 shards: two returned files), small enough to decode briskly on 2 CPU cores
SHAPE = ["--layers", "6", "--experts", "16"]


def command(train_dir: Path, data: Path | None, minutes: float, dry_run: bool) -> list[str]:
    base = [sys.executable, "-m", "llada.train", "--no-eval", "--out", str(train_dir), "--checkpoint-minutes", "0"]
    if dry_run:
        return base + ["--preset", "tiny", "--device", "cpu", "--steps", "3", "--minutes", f"{minutes:.2f}"]
    return base + ["--preset", "code", "--data-from", str(data), "--device", "cuda", "--compile", "off",
                   "--minutes", f"{minutes:.2f}", *SHAPE]


def figures(summary: dict) -> list[dict]:
    from .lease_engine import figure

    seconds = max(summary.get("seconds", 0.0), 1e-9)
    return [figure("training: tokens trained", f"{summary['tokens']:,} in {seconds:.0f} s "
                   f"({summary['tokens'] / seconds:,.0f} tokens/s)", "> 8.9 M (the shipped model's)", "-",
                   summary["tokens"] > 8.9e6),
            figure("training: parameters (active)", f"{summary['parameters']:,} ({summary['active_parameters']:,})",
                   "shards back in <= 4 files", "16 B (mini)"),
            figure("training: loss first -> last tenth",
                   json.dumps({k: [summary["first_loss"][k], summary["final_loss"][k]] for k in summary["final_loss"]}),
                   "falls", "-")]


def main(argv: list[str]) -> int:
    out_json, dry_run = Path(argv[0]), "--dry-run" in argv
    train_dir = out_json.parent / "train"
    deadline = float(os.environ.get("LEASE_PART_DEADLINE", time.time() + 300))
    data = None
    if not dry_run:
        from .lease_data import PACKED, unpack

        if not (CARRIED / PACKED).exists():
            raise SystemExit(f"{CARRIED} holds no packed data: build and pack it before the lease (this module's "
                             "docstring) and carry runs/lease-carry")
        data = unpack(CARRIED, out_json.parent / "data")
    minutes = (deadline - time.time() - (20.0 if dry_run else SETUP_S)) / 60.0
    if minutes < 0.5:
        raise SystemExit(f"only {minutes * 60:.0f} s of training would fit; the part needs at least 30")
    argv_train = command(train_dir, data, minutes, dry_run)
    print("training:", " ".join(argv_train[1:]), flush=True)
    begun = time.monotonic()
    done = subprocess.run(argv_train, cwd=ROOT)
    record = {"command": " ".join(argv_train[1:]), "returncode": done.returncode,
              "wall_s": round(time.monotonic() - begun, 1)}
    summary_path = train_dir / "training.json"
    if done.returncode == 0 and summary_path.exists():
        summary = json.loads(summary_path.read_text())
        record |= {"figures": figures(summary), "steps": summary["steps"], "seconds": summary["seconds"],
                   "prep_seconds": summary["prep_seconds"], "tokens": summary["tokens"], "device": summary["device"]}
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
