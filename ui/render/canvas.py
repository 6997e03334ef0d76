"""The token canvas: one HTML element per position, in the state it has after a given step.

States (the `data-state` of each `.tok`, styled by assets/style.css):

* `prompt` — a prompt token; `mask` — still masked (drawn in the active block, counted beyond it);
* `draft` — filled from a mask at the shown step (M2T); `edit` — replaced at the shown step inside the
  active block (T2T), drawn as old → new; `mbe` — replaced at the shown step in an earlier block;
* `stable` — a generated token that did not change at the shown step;
* `insert` — a mask a SPLIT opened at the shown step (LLaDA2.2): its gap opens, the text after it moved right;
* `poke` — written from outside after the shown step (`llada.trace.Poke`), drawn as old → new; a cell poked
  at an earlier step keeps its state and carries the class `poked`, so a repair by the model shows;
* `delete` — not a position: a token DELETE removed at the shown step (LLaDA2.2), drawn struck out (a
  `.gone` element, no `.tok`) just before the cell that took its place, its gap then closing.

A LLaDA2.2 step records its changes at the positions before its moves; the canvas draws them where their
tokens landed (ui/render/moves.py).

What keeps a long run readable: masks of later blocks and the tail past the output are counted, not
drawn; a run of EOS after the output collapses into its first EOS (`×N`); a long prompt is folded
to its two ends; spaces and newlines show as faint glyphs; a character split across byte-level
tokens is joined and shown on the token where it starts. The active block carries `act`.

Two ways out, both pure (a Trace and steps in, strings out):

* `render(trace, step)` — the whole canvas;
* `patch(trace, since, step)` — only what differs between two steps: the cells whose drawing changed,
  the header, the counts and the classes of the blocks involved. The live view and the exported replay
  apply patches in the browser (assets/canvas.js), so a frame costs O(changes), not O(sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from llada.presets import tau_text
from llada.trace import Change, Delete, Poked, StepRecord, Trace

from .moves import NO_MOVES, Moves, moves_of
from .tips import guess, text, tip

TAIL_SHOWN = 2  # positions drawn after the output's end (the rest is counted)
PROMPT_ENDS = 24  # a prompt longer than 3x this shows its first and last PROMPT_ENDS tokens
STATES = ("prompt", "mask", "draft", "edit", "mbe", "stable", "insert", "delete", "poke")
STATE_OF = {"drafts": "draft", "edits": "edit", "mbe_edits": "mbe"}
LEGEND = (("prompt", "prompt"), ("mask", "mask"), ("draft", "draft (M2T, this step)"),
          ("edit", "edit (T2T, this step)"), ("mbe", "MBE edit (earlier block)"), ("stable", "stable"),
          ("insert", "inserted mask (SPLIT, 2.2)"), ("delete", "deleted (DELETE, 2.2)"),
          ("poke", "poked (after this step)"))
GLYPHS = {" ": "·", "\t": "⇥", "\n": "↵\n"}  # whitespace made visible; a newline still breaks the line



@dataclass
class View:
    """Everything needed to draw any position of a trace after one step."""

    trace: Trace
    step: int
    tokens: list[int]
    record: StepRecord | None
    active: int  # the active block
    end: int  # first position after the output
    ghost: bool
    now: dict[int, tuple[str, Change]] = field(default_factory=dict)  # pos -> (state, change) at this step
    joined: dict[int, str] = field(default_factory=dict)  # pos -> text of a split character's run
    moves: Moves = NO_MOVES  # what the shown step moved (LLaDA2.2)
    poked: dict[int, int] = field(default_factory=dict)  # pos -> the step of its last poke up to the shown step
    poked_gone: dict[int, list[Poked]] = field(default_factory=dict)  # pos -> tokens a poke deleted just before it

    @property
    def B(self) -> int:
        return self.trace.block_length


def view(trace: Trace, step: int, ghost: bool = False) -> View:
    step = max(0, min(step, trace.steps))
    tokens, record = trace.tokens_at(step), trace.step_record(step)
    active = record.block if record else trace.prompt_length // trace.block_length
    moves = moves_of(record)
    now = {moves.at(c.pos): (STATE_OF[k], c) for k in STATE_OF for c in (getattr(record, k) if record else [])}
    now.pop(None, None)  # a token written, then pushed out of its block by a SPLIT
    now, poked_gone = _poked_now(now, record.pokes if record else [], trace.block_length)
    poked = {p.pos: k for k, p in trace.pokes if k <= step}  # pokes come in step order: the last one stays
    return View(trace, step, tokens, record, active, output_end(trace, tokens), ghost, now, moves=moves,
                poked=poked, poked_gone=poked_gone)


def _poked_now(now: dict, pokes: list[Poked], B: int) -> tuple[dict, dict[int, list[Poked]]]:
    """The shown step's states with its pokes on top, in order: a write is a `poke` cell (old → new); a poked
    move (LLaDA2.2) shifts the step's marks in its block, then an insert's opened mask is a `poke` cell and a
    delete's removed token is drawn struck out, in the poke's colour, before the cell now at its position."""
    gone: dict[int, list[Poked]] = {}
    for p in pokes:
        if p.kind != "write":
            a0 = p.pos // B * B
            to = p.moved_to((a0, a0 + B))
            now = {(to[pos - a0] if a0 <= pos < a0 + B else pos): v for pos, v in now.items()}
            now.pop(-1, None)
            gone = {(to[pos - a0] if a0 <= pos < a0 + B else pos): v for pos, v in gone.items()}
            gone.pop(-1, None)
        if p.kind == "delete":
            gone.setdefault(p.pos, []).append(p)
        else:
            now[p.pos] = ("poke", Change(p.pos, p.token, -1 if p.kind == "insert" else p.old, 1.0))  # -1: opened
    return now, gone


def output_end(trace: Trace, tokens: list[int]) -> int:
    """First position after the output: past gen_length, or just after the first generated EOS."""
    end = trace.prompt_length + trace.gen_length
    try:
        return tokens.index(trace.eos_id, trace.prompt_length, end) + 1
    except ValueError:
        return end


# ---- one cell ---------------------------------------------------------------------------------------

def _state(v: View, pos: int) -> str:
    if pos < v.trace.prompt_length:
        return "prompt"
    if pos in v.now:
        return v.now[pos][0]
    if pos in v.moves.inserted:
        return "insert"
    return "mask" if v.tokens[pos] == v.trace.mask_id else "stable"


def _folded(v: View, pos: int) -> bool:
    P = v.trace.prompt_length
    return P > 3 * PROMPT_ENDS and PROMPT_ENDS <= pos < P - PROMPT_ENDS


def _in_eos_run(v: View, pos: int) -> bool:
    """An EOS after the output's own EOS that follows another EOS: collapsed into the run's first (whose
    `×N` counts them, whatever state they are in)."""
    eos = v.trace.eos_id
    return pos >= v.end and v.tokens[pos] == eos and pos - 1 >= v.end - 1 and v.tokens[pos - 1] == eos


def _hidden(v: View, pos: int, state: str) -> str:
    """Why a cell is not drawn ('' when it is): far, tail, run or fold."""
    block = pos // v.B
    if state in ("mask", "insert") and block > v.active:
        return "far"
    if pos >= v.end + TAIL_SHOWN and block != v.active:
        return "tail"
    if _folded(v, pos):
        return "fold"
    return "run" if _in_eos_run(v, pos) else ""


def _run_length(v: View, pos: int) -> int:
    """For the first EOS of a collapsed run: how many drawn EOS it stands for (1 when it is no run head)."""
    n = 1
    while pos + n < len(v.tokens) and _hidden(v, pos + n, "stable") == "run":
        n += 1
    return n


def _joined_text(v: View, pos: int) -> str | None:
    """The text of a position inside a run of split-character tokens: characters that start in its bytes."""
    partial = v.trace.partial
    if v.tokens[pos] not in partial:
        return None
    if pos not in v.joined:
        lo, hi = pos, pos + 1
        while lo > 0 and v.tokens[lo - 1] in partial:
            lo -= 1
        while hi < len(v.tokens) and v.tokens[hi] in partial:
            hi += 1
        v.joined.update(_split_characters([bytes.fromhex(partial[t]) for t in v.tokens[lo:hi]], lo))
    return v.joined[pos]


def _split_characters(chunks: list[bytes], first: int) -> dict[int, str]:
    """Decode the chunks' bytes together; each character goes to the chunk holding its first byte."""
    owner = [i for i, chunk in enumerate(chunks) for _ in chunk]  # byte -> chunk
    data = b"".join(chunks)
    out, i = {first + k: "" for k in range(len(chunks))}, 0
    while i < len(data):
        size = next((n for n in (1, 2, 3, 4) if _decodes(data[i:i + n])), 1)
        out[first + owner[i]] += data[i:i + size].decode("utf-8", errors="replace")
        i += size
    return out


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _visible(s: str) -> str:
    """Escaped text with whitespace drawn as faint glyphs."""
    return "".join(f'<span class="ws">{GLYPHS[ch]}</span>' if ch in GLYPHS else escape(ch) for ch in s)


def _token_html(v: View, token: int, cls: str, pos: int | None = None) -> str:
    trace = v.trace
    special = token in (trace.mask_id, trace.eos_id)
    shown = _joined_text(v, pos) if pos is not None else None
    body = escape(text(trace, token)) if special else _visible(text(trace, token) if shown is None else shown)
    return f'<span class="{cls}{" sp" if special else ""}">{body}</span>'


def _p_of(v: View, pos: int, state: str) -> float | None:
    if state in ("draft", "edit", "mbe"):
        return v.now[pos][1].p
    if state == "stable":
        write = v.trace.last_write(pos, v.step)
        return write[2] if write else None
    return None


def cell_html(v: View, pos: int) -> str:
    """The `.tok` element of one position."""
    trace, token = v.trace, v.tokens[pos]
    state = _state(v, pos)
    hidden, p = _hidden(v, pos, state), _p_of(v, pos, state)
    classes = ["tok"] + ([hidden] if hidden else []) + (["cut"] if pos >= v.end else [])
    classes += ["poked"] if pos in v.poked else []
    tip_text = tip(v, pos, state, p)
    attrs = [f'class="{" ".join(classes)}"', f'data-pos="{pos}"', f'data-block="{pos // v.B}"',
             f'data-state="{state}"', f'title="{escape(tip_text)}"']
    if p is not None:
        attrs.append(f'style="--p:{p:.3f}"')
        if state in ("draft", "edit", "mbe"):
            attrs.append(f'data-p="{p:.4f}"')
    change = v.now.get(pos, (None, None))[1]
    if state in ("edit", "mbe") or state == "poke" and change.old >= 0:
        attrs.append(f'data-prev="{escape(text(trace, change.old))}"')
        inner = (_token_html(v, change.old, "old") + '<span class="arrow">→</span>'
                 + _token_html(v, token, "new", pos))
    elif state in ("mask", "insert") or state == "poke":  # a poke's opened mask: no guess, the forward never saw it
        guessed = guess(v, pos) if state != "poke" else None
        inner = _token_html(v, guessed, "ghost") if guessed is not None else ""
    else:
        inner = _token_html(v, token, "txt", pos)
    if token == trace.eos_id and not hidden and (run := _run_length(v, pos)) > 1:
        attrs.append(f'data-run="{run}"')
    gone = "".join(gone_html(v, d) for d in v.moves.gone.get(pos, ()))
    gone += "".join(poked_gone_html(v, p) for p in v.poked_gone.get(pos, ()))
    return gone + f"<span {' '.join(attrs)}>{inner}</span>"


def gone_html(v: View, d: Delete) -> str:
    """A token DELETE removed at the shown step: struck out where it stood, its gap closing (assets/style.css)."""
    tip = (f'"{text(v.trace, d.token)}" deleted at step {v.step} (DELETE written at #{d.pos}); '
           f"the tokens after it moved left")
    return (f'<span class="gone" data-state="delete" data-was="{d.pos}" title="{escape(tip)}">'
            f'{_token_html(v, d.token, "old")}</span>')


def poked_gone_html(v: View, p: Poked) -> str:
    """A token a poke deleted after the shown step (LLaDA2.2): struck out in the poke's colour, its gap closing."""
    tip = f'"{text(v.trace, p.old)}" deleted by a poke after step {v.step}; the tokens after it moved left'
    return (f'<span class="gone" data-state="poke" data-was="{p.pos}" title="{escape(tip)}">'
            f'{_token_html(v, p.old, "old")}</span>')


# ---- the parts around the cells ---------------------------------------------------------------------

def block_class(v: View, b: int) -> str:
    B, mask = v.B, v.trace.mask_id
    cells = v.tokens[b * B:(b + 1) * B]
    unseen = b > v.active and (cells.count(mask) == len(cells) or b * B >= v.end + TAIL_SHOWN)
    return "blk act" if b == v.active else "blk far" if unseen else "blk"


def step_label(v: View) -> str:
    """What the shown step did, in words."""
    r = v.record
    if r is None:
        return f"step 0/{v.trace.steps} · the prompt and its masks, before the first forward"
    did = [f"{n} {word}" for n, word in ((len(r.drafts), "drafted"), (len(r.edits), "edited (T2T)"),
                                          (len(r.mbe_edits), "edited in earlier blocks (MBE)"),
                                          (len(r.deletes), "deleted (DELETE)"),
                                          (len(r.inserts), "inserted (SPLIT)"), (len(r.pokes), "poked after it"))
           if n]
    what = ", ".join(did) if did else "checked the block: no change, the block is done"
    return f"step {v.step}/{v.trace.steps} · block {r.block} · {what}"


def header_html(v: View) -> str:
    s = v.trace.settings
    mbe = f"on (window {s.mbe_window})" if s.mbe else "off"
    tau_edit = tau_text(s.editing_threshold, ".2f")
    taus = (f"mode {escape(v.trace.mode)} · τ_mask {s.threshold:.2f} · τ_edit {tau_edit}"
            f" · MBE {mbe} · block {s.block_length}")
    return f'<span class="where">{escape(step_label(v))}</span><span class="taus">{taus}</span>'


def counts_html(v: View) -> str:
    """What is counted instead of drawn: masks of later blocks while a run (or its replay) can still reach
    them, and the positions past the output (a finished run's masks after its end among them)."""
    B, tokens, mask = v.B, v.tokens, v.trace.mask_id
    later = (v.active + 1) * B
    ended = _ended(v)  # a finished run at its last step: masks left after the output are no longer to come
    hidden = 0 if ended else tokens[later:].count(mask)
    notes = []
    if hidden:
        n_blocks = sum(1 for b in range(v.active + 1, len(tokens) // B) if mask in tokens[b * B:(b + 1) * B])
        notes.append(f'+ {hidden} masks in {n_blocks} later block{"s" if n_blocks > 1 else ""}{_never(v)}')
    start = v.end + TAIL_SHOWN  # tail: from here on, outside the active block, masks of later blocks aside
    tail = max(0, len(tokens) - start) - max(0, min(later, len(tokens)) - max(start, v.active * B))
    tail -= 0 if ended else tokens[max(start, later):].count(mask)
    if tail > 0:
        why = " (never decoded: the text ended before them)" if ended else " (EOS padding or never decoded)"
        notes.append(f"+ {tail} positions past the end of the output{why}")
    return "".join(f'<span class="more">{n}</span>' for n in notes)


def _ended(v: View) -> bool:
    return v.step >= v.trace.steps and v.trace.status == "done"


def _never(v: View) -> str:
    """Why masks left at the end of a stopped run stay masks ('' while the run, or its replay, can reach them)."""
    if v.step < v.trace.steps or v.trace.status != "stopped":
        return ""
    return " (never decoded: the run stopped early)"


def legend_html() -> str:
    items = "".join(f'<span class="key" data-state="{state}"><span class="txt">{label}</span></span>'
                    for state, label in LEGEND)
    return (f'<div class="legend">{items}<span class="key act-key">active block</span><span class="hint">'
            f"shade = confidence p · tap a token for details · | n = block n starts</span></div>")


def _fold_html(trace: Trace, elem_id: str) -> str:
    P = trace.prompt_length
    if P <= 3 * PROMPT_ENDS:
        return ""
    box = f"{elem_id}-fold"
    return (f'<input type="checkbox" class="fold-toggle" id="{box}"><label class="fold-label" for="{box}">'
            f"{P - 2 * PROMPT_ENDS} prompt tokens folded: show them</label>")


EMPTY_HINT = "Type a prompt and press Generate: the canvas shows every position as the model drafts and edits it."
SEQ_LABEL = "the tokens: tap one, or use the arrow keys here, to read its details"


def render(trace: Trace | None, step: int, ghost: bool = False, elem_id: str = "canvas",
           legend: bool = True, hint: str = EMPTY_HINT) -> str:
    """The canvas HTML of `trace` after decode step `step`; with no trace, an empty canvas saying `hint`."""
    if trace is None:
        return (f'<div id="{elem_id}" class="canvas empty" data-step="0" data-steps="0">'
                f'<p class="hint">{escape(hint)}</p></div>')
    v = view(trace, step, ghost)
    blocks = []
    for b in range(trace.length // v.B):
        cells = "".join(cell_html(v, pos) for pos in range(b * v.B, (b + 1) * v.B))
        blocks.append(f'<span class="{block_class(v, b)}" data-block="{b}"><span class="bnd" data-b="{b}" '
                      f'title="block {b} starts at position {b * v.B}"></span>{cells}</span>')
    return (f'<div id="{elem_id}" class="canvas" data-step="{v.step}" data-steps="{trace.steps}" '
            f'data-base="{v.step}" data-block-length="{v.B}"><div class="canvas-head">{header_html(v)}</div>'
            f'{legend_html() if legend else ""}{_fold_html(trace, elem_id)}'
            f'<div class="seq" tabindex="0" aria-label="{SEQ_LABEL}">{"".join(blocks)}</div>'
            f'<div class="counts">{counts_html(v)}</div></div>')


# ---- patches ----------------------------------------------------------------------------------------

def changed_positions(trace: Trace, a: View, b: View) -> set[int]:
    """Positions whose cell may be drawn differently after step b.step than after step a.step (a < b)."""
    B, L = a.B, trace.length
    out, blocks = set(), {a.active, b.active}
    for k in range(max(a.step, 1), b.step + 1):
        record = trace.step_record(k)
        out.update(c.pos for c in record.changes)
        out.update(p.pos for p in record.pokes)
        blocks.add(record.block)
    for blk in blocks:
        out.update(range(blk * B, min((blk + 1) * B, L)))
    lo, hi = min(a.end, b.end) - 1, max(a.end, b.end) + TAIL_SHOWN + 1
    out.update(range(max(lo, 0), min(hi, L)))
    for pos in list(out):
        out.update(_neighbours(b, pos))
    return out


def _neighbours(v: View, pos: int) -> range:
    """The EOS run or split-character run around `pos`: their cells depend on each other."""
    special = {v.trace.eos_id} | set(v.trace.partial)
    lo, hi = pos, pos + 1
    while lo > 0 and v.tokens[lo - 1] in special:
        lo -= 1
    while hi < len(v.tokens) and v.tokens[hi] in special:
        hi += 1
    return range(lo, hi)


def patch(trace: Trace, since: int, step: int, ghost: bool = False) -> dict:
    """The difference between the canvas after `since` and after `step` (since <= step), as JSON-ready data:
    {"base", "step", "steps", "head", "counts", "blocks": [[b, class]], "cells": [[pos, html]]}."""
    a, b = view(trace, since, ghost), view(trace, step, ghost)
    positions = sorted(changed_positions(trace, a, b))
    touched = sorted({pos // b.B for pos in positions} | {a.active, b.active})
    return {"base": since, "step": b.step, "steps": trace.steps, "head": header_html(b), "counts": counts_html(b),
            "blocks": [[blk, block_class(b, blk)] for blk in touched],
            "cells": [[pos, cell_html(b, pos)] for pos in positions]}


def next_edit_step(trace: Trace | None, step) -> int | None:
    """The first step after `step` that edited something (T2T, MBE, or a LLaDA2.2 insert or delete); None when
    there is none."""
    if trace is None:
        return None
    for k in range(int(step or 0) + 1, trace.steps + 1):
        record = trace.step_record(k)
        if record.edits or record.mbe_edits or record.inserts or record.deletes:
            return k
    return None
