"""Reports and the command line of Score | TPF sweeps (`llada.eval.sweep`): rows, CSV, JSON, a table.

    python -m llada.eval.sweep --model assets/model --n 10                # a readable table
    python -m llada.eval.sweep --model assets/model --n 10 --csv          # or --json; progress on stderr
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys

from .sweep import GEN_LENGTH, PRESETS, TASKS, TAU_MASKS, Point, SweepSpec, pareto_front, sweep

# ---- output --------------------------------------------------------------------------------------------

def rows(points: list[Point]) -> list[dict]:
    """One flat row per point (the CSV's columns), `front` marking the Pareto front of its MBE series."""
    fronts = {key for series in (False, True)
              for key in (p.cell.key for p in pareto_front([q for q in points if q.cell.mbe == series]))}
    out = []
    for p in points:
        row = {"preset": p.cell.preset, "tau_mask": p.cell.tau_mask,
               "tau_edit": "off" if p.cell.tau_edit is None else p.cell.tau_edit, "mbe": p.cell.mbe,
               "block_length": p.cell.block_length, "accuracy": round(p.accuracy, 4), "tpf": round(p.tpf, 4),
               "tps": round(p.tps, 1), "edits_per_100": round(p.edits_per_100, 2), "items": p.items,
               "cut": p.cut, "front": p.cell.key in fronts}
        row |= {f"{task}_accuracy": round(v["accuracy"], 4) for task, v in p.tasks.items()}
        out.append(row)
    return out


def to_csv(points: list[Point]) -> str:
    table = rows(points)
    if not table:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def to_json(pipe, spec: SweepSpec, points: list[Point]) -> dict:
    return {"model": pipe.name, **spec.items_key(), "points": rows(points)}


def format_table(points: list[Point]) -> str:
    head = "| preset | τ_mask | τ_edit | MBE | block | accuracy | TPF | TPS | edits/100 | cut | front |"
    lines = [head, "|" + "---|" * 11]
    for r in rows(points):
        lines.append(f"| {r['preset']} | {r['tau_mask']:g} | {r['tau_edit']} | {'on' if r['mbe'] else 'off'} | "
                     f"{r['block_length']} | {100 * r['accuracy']:.1f} | {r['tpf']:.2f} | {r['tps']:.0f} | "
                     f"{r['edits_per_100']:.1f} | {r['cut']} | {'★' if r['front'] else ''} |")
    return "\n".join(lines)


# ---- command line --------------------------------------------------------------------------------------

def _floats(text: str, name: str, allow_off: bool = False) -> tuple:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if allow_off and part.lower() == "off":
            out.append(None)
            continue
        try:
            out.append(float(part))
        except ValueError:
            raise ValueError(f"--{name}: {part!r} is not a number{' or off' if allow_off else ''}") from None
    return tuple(out)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, SweepSpec]:
    ap = argparse.ArgumentParser(prog="python -m llada.eval.sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="assets/model", help="model directory")
    ap.add_argument("--tau-mask", default=",".join(f"{v:g}" for v in TAU_MASKS), help="comma list of τ_mask")
    ap.add_argument("--tau-edit", default="off,0,0.5,0.9", help="comma list of τ_edit (off: editing off)")
    ap.add_argument("--mbe", default="off,on", help="MBE series: off, on or off,on")
    ap.add_argument("--presets", default=",".join(PRESETS), help="the model's presets to mark ('' for none)")
    ap.add_argument("--tasks", default=",".join(TASKS), help=f"comma list of {', '.join(TASKS)}")
    ap.add_argument("--n", type=int, default=10, help="items per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("eval", "train"), default="eval")
    ap.add_argument("--block-length", type=int, default=None, help="the grid's block length (default: S's)")
    ap.add_argument("--gen-length", type=int, default=GEN_LENGTH)
    ap.add_argument("--cache-dir", default=None, help="where finished points are kept (default: "
                                                      "~/.cache/llada-playground/explorer)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write cached points")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--csv", action="store_true", help="print CSV")
    args = ap.parse_args(argv)
    try:
        mbe = tuple({"off": False, "on": True}[m.strip()] for m in args.mbe.split(",") if m.strip())
        spec = SweepSpec(_floats(args.tau_mask, "tau-mask"), _floats(args.tau_edit, "tau-edit", True), mbe,
                         tuple(p for p in args.presets.split(",") if p), tuple(args.tasks.split(",")), args.n,
                         args.seed, args.split, args.block_length, args.gen_length)
    except KeyError as err:
        ap.error(f"--mbe: {err.args[0]!r} is not off or on")
    except ValueError as err:
        ap.error(str(err))
    return args, spec


def main(argv: list[str] | None = None) -> None:
    import torch
    from tqdm import tqdm

    from ..pipeline import Pipeline
    from .sweep_cache import SweepCache

    args, spec = parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = Pipeline.load(args.model)
    cache = None if args.no_cache else SweepCache(args.cache_dir)
    bar = tqdm(desc="sweep", unit="decode", file=sys.stderr)
    try:
        for progress in sweep(pipe, spec, cache):
            bar.total = progress.total
            bar.update(progress.done - bar.n)
            if progress.point is not None:
                bar.set_postfix_str(f"{progress.point.cell.key} acc {progress.point.accuracy:.2f} "
                                    f"TPF {progress.point.tpf:.2f}")
    except ValueError as err:
        sys.exit(f"error: {err}")
    bar.close()
    points = list(progress.points)
    print(f"sweep of {pipe.name}: {len(points)} points ({progress.cached} from the cache) in "
          f"{progress.seconds:.1f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(pipe, spec, points), indent=2))
    elif args.csv:
        print(to_csv(points), end="")
    else:
        print(format_table(points))


if __name__ == "__main__":
    main()
