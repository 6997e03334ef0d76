"""Tables and text of a run: the stats line, the comparison table, the edit log and a diff of two outputs."""

from __future__ import annotations

import difflib
import re
from html import escape

import pandas as pd

from llada.trace import Trace

from .canvas import text

STATS_COLUMNS = ["run", "forwards", "tokens", "TPF", "TPS", "drafts", "edits", "MBE edits"]
EDIT_COLUMNS = ["step", "block", "position", "old", "new", "p", "kind"]


def stats_line(trace: Trace | None, live: bool = False) -> str:
    """The run's numbers as one line of text (the `#stats` element)."""
    if trace is None:
        return "No run yet."
    s = trace.stats()
    state = "running…" if live or trace.status == "running" else "done" if trace.status == "done" else (
        f"stopped at forward {s['forwards']}" + (f" ({trace.note})" if trace.note else ""))
    return (f"{state} · forwards {s['forwards']} ({s['decode_forwards']} decode + {s['cache_forwards']} cache) · "
            f"tokens {s['tokens']} · TPF {s['tpf']:.2f} · TPS {s['tps']:.1f} · drafts {s['drafts']} · "
            f"edits {s['edits']} · MBE edits {s['mbe_edits']}")


def stats_table(runs: list[tuple[str, Trace]]) -> pd.DataFrame:
    rows = []
    for label, trace in runs:
        s = trace.stats()
        rows.append([label, s["forwards"], s["tokens"], round(s["tpf"], 3), round(s["tps"], 1), s["drafts"],
                     s["edits"], s["mbe_edits"]])
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def edit_log(trace: Trace | None) -> pd.DataFrame:
    """Every edit of the run: step, block, position, old → new, p, T2T or MBE."""
    if trace is None:
        return pd.DataFrame(columns=EDIT_COLUMNS)
    kinds = {"edits": "T2T", "mbe_edits": "MBE"}
    rows = [[step, c.pos // trace.block_length, c.pos, text(trace, c.old), text(trace, c.token), round(c.p, 3),
             kinds[kind]] for step, kind, c in trace.edit_events()]
    return pd.DataFrame(rows, columns=EDIT_COLUMNS)


def _words(text: str) -> list[str]:
    return re.findall(r"\s+|\w+|[^\w\s]", text)


def diff_html(a: str, b: str, label_a: str = "S", label_b: str = "Q") -> str:
    """Word-level diff of two outputs: <del> only in `a`, <ins> only in `b`, all text escaped."""
    wa, wb = _words(a), _words(b)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(escape("".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(f"<del>{escape(''.join(wa[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins>{escape(''.join(wb[j1:j2]))}</ins>")
    same = "identical outputs" if a == b else f"<del>only in {label_a}</del> <ins>only in {label_b}</ins>"
    return f'<div class="diff"><div class="diff-key">{same}</div><pre>{"".join(out)}</pre></div>'
