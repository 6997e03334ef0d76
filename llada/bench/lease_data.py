"""The training data a lease carries: built rows made small enough to travel with the working tree.

    python -m llada.bench.lease_data pack SRC DEST [--max-mib 30]     (here, before the lease)
    python -m llada.bench.lease_data unpack DEST DATA                  (there: what `lease_train` does)

A lease takes at most 64 MiB of working tree, which the repository already fills to about 24 MiB, while
a built run's `rows.pt` (`llada.train.resume.save_rows`: int32 ids) is about 300 MiB. `pack` keeps every
held-out and function row and as many window rows as fit, as int16 ids (the vocabulary is under 32,768)
in one xz-compressed file `rows.xz` beside the tokenizer; `unpack` writes them back as a run's
`rows.pt` + tokenizer, which `python -m llada.train --data-from DATA` reads.
"""

from __future__ import annotations

import argparse
import io
import lzma
import shutil
import sys
from pathlib import Path

import torch

PACKED, TOKENIZER_FILES = "rows.xz", ("tokenizer.json", "tokenizer_config.json")
KEEP_FIRST = ("held_out", "functions")  # whole; the windows fill what is left


def _compressed_bytes(rows: dict, data: dict) -> bytes:
    buf = io.BytesIO()
    torch.save({"rows": rows, "data": data}, buf)
    return lzma.compress(buf.getvalue(), preset=6)


def _small(rows: dict, n: int | None = None) -> dict:
    out = dict(rows)
    out["ids"] = rows["ids"][:n].to(torch.int16)
    out["prompt_len"], out["answer_len"] = rows["prompt_len"][:n], rows["answer_len"][:n]
    return out


def pack(src: Path, dest: Path, max_mib: float) -> dict:
    """SRC's rows and tokenizer into DEST, rows.xz under max_mib; what was kept."""
    from ..train.resume import load_rows

    rows, data = load_rows(src)
    if max(int(r.ids.max()) for r in rows.values()) >= 2 ** 15:
        raise ValueError("ids do not fit int16: the vocabulary is 32,768 or larger")
    kept = {k: _small(vars(rows[k])) for k in KEEP_FIRST}
    probe = min(10_000, len(rows["windows"].ids))  # bytes a window row takes, compressed
    per_row = len(_compressed_bytes({"w": _small(vars(rows["windows"]), probe)}, {})) / probe
    room = max_mib * 2 ** 20 - len(_compressed_bytes(kept, data))
    n = max(0, min(len(rows["windows"].ids), int(0.95 * room / per_row)))
    kept["windows"] = _small(vars(rows["windows"]), n)
    blob = _compressed_bytes(kept, data | {"window_rows": n, "carried_window_rows_of": len(rows["windows"].ids)})
    if len(blob) > max_mib * 2 ** 20:
        raise ValueError(f"{len(blob) / 2**20:.1f} MiB packed, over --max-mib {max_mib}")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / PACKED).write_bytes(blob)
    for name in TOKENIZER_FILES:
        shutil.copyfile(src / name, dest / name)
    return {"window_rows": n, "of": len(rows["windows"].ids), "mib": round(len(blob) / 2 ** 20, 2)}


def unpack(dest: Path, data_dir: Path) -> Path:
    """DEST (what pack wrote) as a run directory DATA that `--data-from` reads."""
    from ..train.data import Rows
    from ..train.resume import save_rows

    saved = torch.load(io.BytesIO(lzma.decompress((dest / PACKED).read_bytes())), weights_only=False)
    rows = {k: Rows(**(v | {"ids": v["ids"].to(torch.int32)})) for k, v in saved["rows"].items()}
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(dest / name, data_dir / name)
    save_rows(data_dir, rows, saved["data"])
    return data_dir


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m llada.bench.lease_data", description=__doc__.split("\n")[0])
    ap.add_argument("verb", choices=["pack", "unpack"])
    ap.add_argument("src")
    ap.add_argument("dest")
    ap.add_argument("--max-mib", type=float, default=30.0)
    args = ap.parse_args(argv)
    if args.verb == "pack":
        print(pack(Path(args.src), Path(args.dest), args.max_mib))
    else:
        print(unpack(Path(args.src), Path(args.dest)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
