"""Reports of Score | TPF sweeps (`llada.eval.sweep`): one row per point, CSV, JSON and a readable table."""

from __future__ import annotations

import csv
import io

from .sweep_grid import Point, SweepSpec, pareto_front

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
