"""Narration of a recorded run: one line per step that says what happened and why, from the trace alone.

    narrate(trace, 0)  # "Step 0: the prompt (8 tokens) is followed by 24 masks in block 0 ..."
    narrate(trace, 1)  # "Step 1 (block 0): 24 masks passed τ_mask 0.05 and were drafted together: ..."
    narrate(trace, 2)  # "Step 2 (block 0): position 10 changed '2' → '3' (p 0.91 > τ_edit 0.00): ..."

Like the canvas (ui/render/canvas.py), narration is a pure function of a trace and a step: nothing is written
per recording. What it can say comes from the records: which masks passed τ_mask (or that none did and
the most confident one was taken), which written tokens changed and with what p against τ_edit, when
each edited token had been written and how many tokens around it were written since (the context the
model did not have then), MBE edits of finished blocks, verification steps, blocks closed by
`max_post_steps`, cache forwards, LLaDA2.2's moves (a DELETE closing a gap, a SPLIT opening one), pokes
written from outside after a step, and why the run stopped.
"""

from __future__ import annotations

from llada.presets import tau_text
from llada.trace import Change, StepRecord, Trace

WHITESPACE = {" ": "·", "\t": "⇥", "\n": "↵"}  # whitespace made visible, as the canvas draws it
SHOWN_CHARS = 90  # drafted text quoted per step (longer text is cut)
SHOWN_EDITS = 3  # edits described per step (the rest are counted)


def token_text(trace: Trace, token: int) -> str:
    """A token as narration quotes it: whitespace made visible as on the canvas, EOS and mask by name."""
    if token == trace.eos_id:
        return "EOS"
    if token == trace.mask_id:
        return "mask"
    return f"'{visible(trace.texts.get(token, str(token)))}'"


def visible(text: str) -> str:
    return "".join(WHITESPACE.get(ch, ch) for ch in text)


def p_text(p: float, threshold: float | None) -> str:
    """p with two digits, or more where two would read as equal to the threshold it passed."""
    digits = 2
    while threshold is not None and digits < 4 and f"{p:.{digits}f}" == f"{threshold:.{digits}f}":
        digits += 1
    return f"{p:.{digits}f}"


def narrate(trace: Trace, step: int) -> str:
    """What decode step `step` did and why (step 0: the setup and the rules in force)."""
    if step <= 0:
        return opening(trace)
    if step > trace.steps:
        return finished(trace)
    record = trace.step_record(step)
    parts = [p for p in (drafted(trace, record), *edited(trace, record), moved(trace, record)) if p]
    parts += [ending(trace, record), poked(trace, record)]
    head = f"Step {step} (block {record.block}): "
    return head + "; ".join(p for p in parts if p) + "."


def story(trace: Trace) -> list[str]:
    """Every step's line, step 0 included."""
    return [narrate(trace, k) for k in range(trace.steps + 1)]


# ---- the parts of a line --------------------------------------------------------------------------------

def opening(trace: Trace) -> str:
    s = trace.settings
    first = trace.prompt_length // s.block_length
    masks = (first + 1) * s.block_length - trace.prompt_length
    tau_mask, tau_edit = tau_text(s.threshold, ".2f"), tau_text(s.editing_threshold, ".2f")
    edit = ("editing (T2T) is off, so a written token never changes" if s.editing_threshold is None else
            f"a written token is edited when the model's new guess for it has p > τ_edit {tau_edit}")
    blocks = "finished block stays" if s.mbe_window == 1 else f"{s.mbe_window} finished blocks stay"
    mbe = f"; with MBE the last {blocks} in the forward and can still be edited" if s.mbe else ""
    where = (f"the prompt ({trace.prompt_length} tokens) ends in block {first} (blocks of {s.block_length}), "
             f"whose other {masks} position{'s are masks' if masks != 1 else ' is a mask'}")
    prefill = cache_forwards_after(trace, None)
    first_forward = f" Before step 1, {prefill}." if prefill else ""
    return (f"Step 0: {where}. Rules of this run: a mask is drafted when p > τ_mask {tau_mask}; {edit}{mbe}."
            + first_forward)


def finished(trace: Trace) -> str:
    return f"Done: this run finished at step {trace.steps} ({trace.forwards} forwards)."


def token_list(trace: Trace, changes: list[Change]) -> str:
    """The drafted text in position order: runs of neighbouring positions joined, gaps shown as '…', a
    trailing run of EOS counted, long text cut."""
    changes = sorted(changes, key=lambda c: c.pos)
    eos = 0
    while changes and changes[-1].token == trace.eos_id:
        changes.pop()
        eos += 1
    runs: list[list[Change]] = []
    for c in changes:
        if runs and c.pos == runs[-1][-1].pos + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    pieces = ["".join("⟨EOS⟩" if c.token == trace.eos_id else visible(trace.texts.get(c.token, str(c.token)))
                      for c in run) for run in runs]
    shown = " … ".join(f"'{p}'" for p in pieces)
    if len(shown) > SHOWN_CHARS:
        shown = shown[:SHOWN_CHARS - 1] + "…"
    if eos:
        shown += (" and " if shown else "") + ("EOS" if eos == 1 else f"{eos} × EOS")
    return shown


def drafted(trace: Trace, r: StepRecord) -> str:
    """The M2T part: how many masks were filled, which rule filled them."""
    if not r.drafts:
        return ""
    t = tau_text(trace.settings.threshold, ".2f")
    passed = [c for c in r.drafts if c.p > trace.settings.threshold]
    if not passed:
        c = r.drafts[0]
        return (f"no mask passed τ_mask {t}, so only the most confident one was drafted: "
                f"{token_text(trace, c.token)} at position {c.pos} (p {c.p:.2f})")
    left = trace.tokens_at(r.step)[r.active[0]:r.active[1]].count(trace.mask_id)
    low = min(c.p for c in r.drafts)
    if len(r.drafts) == 1:
        what = (f"1 mask passed τ_mask {t} and was drafted: {token_list(trace, r.drafts)} "
                f"(p {p_text(low, trace.settings.threshold)})")
    else:
        what = (f"{len(r.drafts)} masks passed τ_mask {t} and were drafted together in this one forward: "
                f"{token_list(trace, r.drafts)} (lowest p {p_text(low, trace.settings.threshold)})")
    return what + (f"; {left} mask{'s' if left != 1 else ''} left in the block" if left else "")


def edited(trace: Trace, r: StepRecord) -> list[str]:
    """The T2T and MBE parts: each edit with its p against τ_edit and what the model saw since."""
    events = [("mbe_edits", c) for c in r.mbe_edits] + [("edits", c) for c in r.edits]  # MBE first: rarer
    out = [edit_line(trace, r, kind, c) for kind, c in events[:SHOWN_EDITS]]
    if len(events) > SHOWN_EDITS:
        out.append(f"and {len(events) - SHOWN_EDITS} more edits with p > τ_edit")
    return out


def edit_line(trace: Trace, r: StepRecord, kind: str, c: Change) -> str:
    tau_edit = tau_text(trace.settings.editing_threshold, ".2f")
    what = (f"position {c.pos} changed {token_text(trace, c.old)} → {token_text(trace, c.token)} "
            f"(p {p_text(c.p, trace.settings.editing_threshold)} > τ_edit {tau_edit})")
    if kind == "mbe_edits":
        b = c.pos // trace.block_length
        what = f"MBE: in the finished block {b} (kept in the forward while block {r.block} decodes), {what}"
    return what + ": " + reason(trace, r, c)


def reason(trace: Trace, r: StepRecord, c: Change) -> str:
    """Why the model changed its mind: what it had not seen when it wrote the old token."""
    write = trace.last_write(c.pos, r.step - 1)
    if write is None:
        return "the model's guess for it changed"
    step, kind, p = write
    how = f"{'drafted' if kind == 'drafts' else 'last edited'} at step {step} (p {p:.2f})" if kind != "pokes" \
        else f"poked after step {step}"
    seen = sum(1 for k in range(step, r.step) for x in trace.step_record(k).changes
               if x.pos != c.pos and r.window[0] <= x.pos < r.window[1])
    if not seen:
        whose = "the poked" if kind == "pokes" else "its own"
        return f"{how}; now the model reads {whose} token in place"
    others = "1 other token of the window was" if seen == 1 else f"{seen} other tokens of the window were"
    return f"{how} before {others} written; now the model sees {'it' if seen == 1 else 'them'}"


def moved(trace: Trace, r: StepRecord) -> str:
    """LLaDA2.2's moves: each DELETE (the token removed, the later tokens close the gap) and each SPLIT (a mask
    opened before the token the position held, which moves one place right)."""
    parts = [f"DELETE removed {token_text(trace, d.token)} at position {d.pos} and the tokens after it moved "
             "one place left" for d in r.deletes]
    parts += [f"SPLIT opened a mask at position {i.mask} before {token_text(trace, i.token)}, which moved one place "
              "right" if i.mask >= 0 else f"SPLIT at position {i.pos} opened a mask past the block's end"
              for i in r.inserts]
    return "; ".join(parts)


def poked(trace: Trace, r: StepRecord) -> str:
    """The pokes written from outside after this step: what changed, and what the next forward does with it."""
    if not r.pokes:
        return ""
    what = ", ".join(f"position {p.pos} {token_text(trace, p.old)} → {token_text(trace, p.token)}" for p in r.pokes)
    nxt = trace.step_record(r.step + 1) if r.step < trace.steps else None
    block = r.pokes[0].pos // trace.block_length
    after = (f"block {block} is open again and the next forward reads the damage" if nxt is not None
             and nxt.active[0] <= r.pokes[0].pos < nxt.active[1] else "the next forward reads the changed text")
    return f"then, from outside the model, a poke: {what}; {after}"


def ending(trace: Trace, r: StepRecord) -> str:
    """How the step leaves its block and the run: verified, closed by max_post_steps, stopped, cache forwards."""
    last_of_block = is_last_of_block(trace, r)
    parts = []
    if r.phase == "verify" and not r.changes:
        parts.append(f"no masks left and nothing to edit: block {r.block} is verified and final")
    elif last_of_block and not trace.tokens_at(r.step)[r.active[0]:r.active[1]].count(trace.mask_id):
        parts.append(f"block {r.block} reached max_post_steps ({trace.settings.max_post_steps}) mask-free steps "
                     "and is closed")
    elif r.phase == "verify":
        parts.append("no masks were left, so this forward only checked the written tokens")
    cache = cache_forwards_after(trace, r)
    if cache:
        parts.append("then " + cache)
    if r.step == trace.steps and trace.status == "done":
        parts.append(stop_reason(trace))
    return "; ".join(parts)


def is_last_of_block(trace: Trace, r: StepRecord) -> bool:
    nxt = trace.step_record(r.step + 1) if r.step < trace.steps else None
    return nxt is None or nxt.block != r.block


def cache_forwards_after(trace: Trace, r: StepRecord | None) -> str:
    """The cache forwards between this step (None: the start) and the next, in words ('' when none)."""
    index = trace.steps_index[r.step - 1] + 1 if r else 0
    end = trace.steps_index[r.step] if r and r.step < trace.steps else (
        trace.steps_index[0] if r is None and trace.steps else len(trace.records))
    cache = [rec for rec in trace.records[index:end] if rec.kind == "cache"]
    if not cache:
        return ""
    B = trace.block_length
    blocks = sorted({b for rec in cache for b in range(rec.window[0] // B, -(-rec.window[1] // B))})
    names = f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {blocks[0]}–{blocks[-1]}"
    n = len(cache)
    return f"{n} cache forward{'s' if n > 1 else ''} stored the keys and values of {names} for the KV cache"


def stop_reason(trace: Trace) -> str:
    last_block = trace.length // trace.block_length - 1
    if trace.settings.eos_early_stop and trace.step_record(trace.steps).block < last_block:
        return "the text so far ends in EOS, so the run stops here (EOS early stop)"
    return "the last block is done, and with it the run"
