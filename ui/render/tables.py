"""Tables and text of a run: the stats line, the comparison table and verdict, the edit log, a diff of two
outputs, and the note under an output that is empty or cut."""

from __future__ import annotations

import html

import difflib
import re
from html import escape

import pandas as pd

from llada.data.check import is_right
from llada.trace import Trace

from .canvas import text
from .narrate import visible

# what a reader compares first comes first: on a phone these columns are read without a sideways swipe
STATS_COLUMNS = ["run", "answer", "TPF", "forwards", "edits", "block", "tokens", "TPS", "drafts", "MBE edits",
                 "inserts", "deletes"]
EDIT_COLUMNS = ["step", "kind", "p", "old", "new", "position", "block"]
NO_RUN = ("No run yet: press Generate (or Ctrl+Enter in the prompt) or click an example; this line then counts "
          "forwards, tokens, TPF, TPS, drafts and edits.")


def stats_line(trace: Trace | None, live: bool = False, engine: str = "") -> str:
    """The run's numbers as one line of text (the `#stats` element), and the engine's sentence under it when
    given (`engine_sentence`)."""
    if trace is None:
        return NO_RUN
    if engine:
        return f"{stats_line(trace, live)}  \n<small>{html.escape(engine)}</small>"
    s = trace.stats()
    state = "running…" if live or trace.status == "running" else "done" if trace.status == "done" else (
        f"stopped at forward {s['forwards']}" + (f" ({trace.note})" if trace.note else ""))
    return (f"{state} · forwards {s['forwards']} ({s['decode_forwards']} decode + {s['cache_forwards']} cache) · "
            f"tokens {s['tokens']} · TPF {s['tpf']:.2f} · TPS {s['tps']:.1f} · drafts {s['drafts']} · "
            f"edits {s['edits']} · MBE edits {s['mbe_edits']}{_moves(s)}")


def _moves(stats: dict) -> str:
    """LLaDA2.2's inserts and deletes, once a run has made one (a 2.1 run never does: its line stays short)."""
    return f" · inserts {stats['inserts']} · deletes {stats['deletes']}" if stats["inserts"] or stats["deletes"] else ""


def engine_sentence(engine: dict, device: str = "") -> str:
    """Which MoE engine ran, in one short sentence for a visitor, from `EngineReport.to_dict()` (engine,
    requested, reason, fell_back, self_check); the reason's details stay in the API's stats and the log."""
    if engine.get("engine") == "fast":
        passed = engine.get("self_check") == "passed"
        checked = " (checked against the reference when the model loaded)" if passed else ""
        return f"Engine: the fast GPU kernels{checked}."
    if engine.get("fell_back") or engine.get("self_check") == "failed":
        why = " (the fast GPU kernels failed their check when the model loaded)"
    elif engine.get("requested") == "reference":
        why = ""
    elif device.startswith("cuda"):
        why = " (the fast GPU kernels do not run on this GPU)"
    else:
        why = " (the fast kernels need a GPU)"
    return f"Engine: the PyTorch reference{why}."


def correctness(trace: Trace) -> str:
    """'right' / 'wrong' for a checkable prompt (an arithmetic, sort, reverse or rename task), else '—'."""
    right = is_right(trace.prompt, trace.text)
    if right is None or trace.status == "running":
        return "—"
    return "right" if right else "wrong"


def stats_table(runs: list[tuple[str, Trace]]) -> pd.DataFrame:
    rows = []
    for label, trace in runs:
        s = trace.stats()
        rows.append([label, correctness(trace), round(s["tpf"], 3), s["forwards"], s["edits"], trace.block_length,
                     s["tokens"], round(s["tps"], 1), s["drafts"], s["mbe_edits"], s["inserts"], s["deletes"]])
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def verdict(fast: tuple[str, Trace], careful: tuple[str, Trace]) -> str:
    """One line on a comparison, e.g. 'S: 2.1× fewer forwards than Q (TPF 4.20 vs 2.00), same answer'."""
    (a, ta), (b, tb) = fast, careful
    if not ta.forwards or not tb.forwards:
        return ""
    ratio = tb.forwards / ta.forwards
    speed = (f"{ratio:.1f}× fewer forwards than {b}" if ratio >= 1.05 else
             f"{1 / ratio:.1f}× more forwards than {b}" if ratio <= 0.95 else f"as many forwards as {b}")
    right = {label: correctness(t) for label, t in (fast, careful)}
    if "—" in right.values():
        answer = "same output" if ta.text == tb.text else "different outputs"
    elif right[a] == right[b]:
        answer = "both right" if right[a] == "right" else "both wrong"
    else:
        answer = f"{a} {right[a]}, {b} {right[b]}"
    return f"{a}: {speed} (TPF {ta.tpf:.2f} vs {tb.tpf:.2f}), {answer}"


def output_note(trace: Trace | None, hint: str = "") -> str:
    """Why an output is empty, blank or cut, in a sentence, then `hint` (why a prompt may get no answer);
    '' when there is nothing to explain."""
    if trace is None or trace.status == "running":
        return ""
    return " ".join(part for part in (_output_why(trace), hint) if part)


def _output_why(trace: Trace) -> str:
    ids, eos = trace.output_ids, trace.eos_id
    if trace.status == "stopped":
        why = f" ({trace.note})" if trace.note else ""
        return f"Stopped at forward {trace.forwards}{why}: the output is what was written by then."
    if ids == [eos] or not ids:
        return ("The model's first token was the end of text: it had nothing to add to this prompt. Try one of "
                "the examples: they are in the formats the model was trained on.")
    if not (trace.text or "").strip():
        n = len([t for t in ids if t != eos])
        return (f"The output is only whitespace ({n} token{'s' * (n != 1)} of spaces or line breaks): the model "
                "found nothing it knows how to continue here.")
    if eos not in ids and len(ids) >= trace.gen_length:
        return (f"The output is cut at the generation length ({trace.gen_length} tokens) before the model ended "
                "it: raise the generation length to see more.")
    return ""


def edit_log(trace: Trace | None) -> pd.DataFrame:
    """Every edit of the run, in order: step, kind (T2T, MBE, LLaDA2.2's delete and insert, and poke), p, old → new,
    position (before the step's moves), block. A delete's new text is empty; an insert's is the mask it opened
    before the token that stays."""
    if trace is None:
        return pd.DataFrame(columns=EDIT_COLUMNS)
    B, rows = trace.block_length, []
    for k in range(1, trace.steps + 1):
        r = trace.step_record(k)
        rows += [[k, kind, round(c.p, 3), visible(text(trace, c.old)), visible(text(trace, c.token)), c.pos, c.pos // B]
                 for kind, changes in (("T2T", r.edits), ("MBE", r.mbe_edits)) for c in changes]
        rows += [[k, "delete", _p(r, d.pos), visible(text(trace, d.token)), "", d.pos, d.pos // B] for d in r.deletes]
        mask = text(trace, trace.mask_id)
        rows += [[k, "insert", _p(r, i.pos), visible(text(trace, i.token)), f"{mask} {visible(text(trace, i.token))}",
                  i.pos, i.pos // B] for i in r.inserts]
        rows += [_poke_row(trace, k, p) for p in r.pokes]  # from outside after step k (`llada.trace.Poke`)
    return pd.DataFrame(rows, columns=EDIT_COLUMNS)  # spaces and breaks shown


def _poke_row(trace: Trace, k: int, p) -> list:
    """A poke's row: a write as old → new; a poked delete as its removed token → nothing, a poked insert as the
    mask it opened (its old: the token it pushed out of the block) — kinds "poke", "poke delete", "poke insert"."""
    kind = "poke" if p.kind == "write" else f"poke {p.kind}"
    new = "" if p.kind == "delete" else visible(text(trace, p.token))
    return [k, kind, None, visible(text(trace, p.old)), new, p.pos, p.pos // trace.block_length]


def _p(record, pos: int) -> float | None:
    """The model's confidence at `pos` in a step's forward (the p of the DELETE or SPLIT it wrote there)."""
    return round(record.p_at(pos), 3) if record.window[0] <= pos < record.window[1] and record.confidence else None


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
