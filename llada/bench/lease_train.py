"""The training part of a lease: the embedded model v4 (`--preset lease`) trained on the GPU from data built
beforehand.

    python -m llada.bench.lease_train OUT.json [--dry-run]

The corpus, tokenizer and rows are built on a CPU before the lease, with the preset's own 4,096-token
vocabulary, and packed small (`lease_data`):

    python -m llada.train --preset lease --dry-run --device cpu --out runs/lease-data-v4
    python -m llada.bench.lease_data pack runs/lease-data-v4 runs/lease-carry

`runs/lease-carry` travels with the lease call (git ignores `runs/`; the call names it in `carry`), and
this part unpacks it into the scratch folder first; data built for another vocabulary (the first lease's
8,192) is refused, since the model would take the carried tokenizer's size. The part trains `PRESET`
(its shape is the preset's: 5.8 M parameters, 11.6 MB of bf16 shards) into OUT's folder `train/`
(sharded bf16 safetensors, tokenizer, presets.json, loss.csv, training.json; the lease packs it into
`lease-model.tar.NN` chunks that come back), for as long as the lease leaves it: the part's deadline
(`LEASE_PART_DEADLINE`, seconds since the epoch) less `SETUP_S` for importing, loading and saving.
Compiled (torch.compile per layer): the trainer continues eagerly when a compile raises; a run that
dies outright (status not 0, no model written) is run once more with `--compile off` for the time left.

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
PRESET = "lease"
# import, CUDA start, rows to the GPU, the model built, saving at the end: the first lease's train part
# spent 24.5 s beside its 310 s of training (eager); room for a compile's start and a retry's
SETUP_S = 50.0
RETRY_MIN_S = 60.0  # a run with --compile off is only started with this much time left


def command(train_dir: Path, data: Path | None, minutes: float, dry_run: bool, compile_: str = "on") -> list[str]:
    base = [sys.executable, "-m", "llada.train", "--no-eval", "--out", str(train_dir), "--checkpoint-minutes", "0"]
    if dry_run:
        return base + ["--preset", "tiny", "--device", "cpu", "--steps", "3", "--minutes", f"{minutes:.2f}"]
    return base + ["--preset", PRESET, "--data-from", str(data), "--device", "cuda", "--compile", compile_,
                   "--minutes", f"{minutes:.2f}"]


def check_vocabulary(data: Path) -> None:
    """Refuse carried data whose tokenizer is not the preset's size (built for another preset)."""
    from ..train.recipes import TRAINING_PRESETS

    want = TRAINING_PRESETS[PRESET].values["vocab_size"]
    got = json.loads((data / "tokenizer.json").read_text()).get("model", {}).get("vocab", {})
    if len(got) != want:
        raise SystemExit(f"the carried tokenizer has {len(got):,} tokens, --preset {PRESET} wants {want:,}: rebuild "
                         "the data with this module's two commands (its docstring) and carry runs/lease-carry")


def figures(summary: dict) -> list[dict]:
    from .lease_engine import figure

    seconds = max(summary.get("seconds", 0.0), 1e-9)
    return [figure("training: tokens trained", f"{summary['tokens']:,} in {seconds:.0f} s "
                   f"({summary['tokens'] / seconds:,.0f} tokens/s)", "> 8.9 M (the shipped model's)", "-",
                   summary["tokens"] > 8.9e6),
            figure("training: parameters (active)", f"{summary['parameters']:,} ({summary['active_parameters']:,})",
                   "<= ~6 M (bf16 shards <= ~12 MB: the embedded default)", "16 B (mini)",
                   summary["parameters"] <= 6.2e6),
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
        check_vocabulary(data)
    record = train_once(train_dir, data, _minutes(deadline, dry_run), dry_run, "auto" if dry_run else "on", {})
    if record["returncode"] != 0 and not dry_run and deadline - time.time() - SETUP_S >= RETRY_MIN_S:
        print("the compiled run failed; training again with --compile off", flush=True)
        record = train_once(train_dir, data, _minutes(deadline, dry_run), dry_run, "off", record)
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    return record["returncode"]


def _minutes(deadline: float, dry_run: bool) -> float:
    """Minutes of training that fit before the part's deadline, setup and saving kept aside."""
    minutes = (deadline - time.time() - (20.0 if dry_run else SETUP_S)) / 60.0
    if minutes < 0.5:
        raise SystemExit(f"only {minutes * 60:.0f} s of training would fit; the part needs at least 30")
    return minutes


def train_once(train_dir: Path, data: Path | None, minutes: float, dry_run: bool, compile_: str,
               record: dict) -> dict:
    """One training run for `minutes`; the record of it (a failed earlier run's kept under `failed`)."""
    argv_train = command(train_dir, data, minutes, dry_run, compile_)
    print("training:", " ".join(argv_train[1:]), flush=True)
    begun = time.monotonic()
    done = subprocess.run(argv_train, cwd=ROOT)
    earlier = {"failed": {k: record[k] for k in ("command", "returncode", "wall_s")}} if record else {}
    record = record | earlier | {"command": " ".join(argv_train[1:]), "returncode": done.returncode,
                                 "wall_s": round(time.monotonic() - begun, 1)}
    summary_path = train_dir / "training.json"
    if done.returncode == 0 and summary_path.exists():
        summary = json.loads(summary_path.read_text())
        record |= {"figures": figures(summary), "steps": summary["steps"], "seconds": summary["seconds"],
                   "prep_seconds": summary["prep_seconds"], "tokens": summary["tokens"], "device": summary["device"],
                   "compiled": summary["compiled"]}
    return record


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
