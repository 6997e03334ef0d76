"""The token canvas: one HTML element per position, in the state it has after a given step.

States (the `data-state` of each `.tok`, styled by assets/style.css):

* `prompt` — a prompt token; `mask` — still masked (drawn in the active block, counted beyond it);
* `draft` — filled from a mask at the shown step (M2T); `edit` — replaced at the shown step inside the
  active block (T2T), drawn as old → new; `mbe` — replaced at the shown step in an earlier block;
* `stable` — a generated token that did not change at the shown step.

Shading: `--p` is the confidence that wrote the token (CSS maps it to opacity). Every token text and
tooltip is HTML-escaped. The renderer is pure: a Trace and a step in, an HTML string out.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from llada.trace import Trace

TAIL_SHOWN = 2  # positions drawn after the output's end (the rest, EOS padding or undecoded, is counted)
STATES = ("prompt", "mask", "draft", "edit", "mbe", "stable")
LEGEND = (("prompt", "prompt"), ("mask", "mask"), ("draft", "draft (M2T, this step)"),
          ("edit", "edit (T2T, this step)"), ("mbe", "MBE edit (earlier block)"), ("stable", "stable"))


@dataclass
class Cell:
    pos: int
    block: int
    state: str
    token: int
    p: float | None = None  # confidence that wrote the token (this step, or when it was last written)
    prev: int | None = None  # the token an edit replaced
    tip: str = ""
    ghost: int | None = None  # the model's guess for a mask at this step
    hidden: bool = False  # a mask beyond the active block
    cut: bool = False  # after the output's end (past gen_length or the first EOS)
    tail: bool = False  # far enough past the end to be counted rather than drawn


WRITE_NAMES = {"drafts": "draft", "edits": "edit", "mbe_edits": "MBE edit"}
STATE_OF = {"drafts": "draft", "edits": "edit", "mbe_edits": "mbe"}


def text(trace: Trace, token: int | None) -> str:
    """The display text of a token id (its id when the trace has no name for it)."""
    return trace.texts.get(token, str(token))


def _fmt_tau(value) -> str:
    return "off" if value is None else f"{value:.2f}"


def _tip(trace: Trace, cell: Cell, record, step: int) -> str:
    q = f'#{cell.pos} "{text(trace, cell.token)}"'
    if cell.state == "prompt":
        return f"{q} · prompt"
    if cell.state == "mask":
        if cell.ghost is None:
            return f"#{cell.pos} mask"
        return f'#{cell.pos} mask · model\'s guess "{text(trace, cell.ghost)}" p={record.p_at(cell.pos):.2f}'
    if cell.state == "draft":
        tau = trace.settings.threshold
        rule = f"> τ_mask {tau:.2f}" if cell.p > tau else f"≤ τ_mask {tau:.2f}: the most confident mask"
        return f"{q} · drafted at step {record.step} · p={cell.p:.2f} {rule}"
    if cell.state in ("edit", "mbe"):
        how = "T2T edit" if cell.state == "edit" else f"MBE edit of block {cell.block}"
        return (f'{q} replaced "{text(trace, cell.prev)}" at step {record.step} · {how} · '
                f"p={cell.p:.2f} > τ_edit {_fmt_tau(trace.settings.editing_threshold)}")
    k, kind, p = trace.last_write(cell.pos, step)
    return f"{q} · written at step {k} ({WRITE_NAMES[kind]}, p={p:.2f})"


def cells(trace: Trace, step: int, ghost: bool = False) -> list[Cell]:
    """Every position of the sequence after decode step `step` (0 = before the first forward)."""
    step = max(0, min(step, trace.steps))
    tokens = trace.tokens_at(step)
    record = trace.step_record(step)
    B = trace.block_length
    first = trace.prompt_length // B
    active = range(*record.active) if record else range(first * B, (first + 1) * B)
    now = {c.pos: (STATE_OF[kind], c) for kind in STATE_OF for c in (getattr(record, kind) if record else [])}
    end = _output_end(trace, tokens)
    out = []
    for pos, token in enumerate(tokens):
        cell = Cell(pos=pos, block=pos // B, state="stable", token=token, cut=pos >= end,
                    tail=pos >= end + TAIL_SHOWN and pos not in active)  # the active block is always drawn
        if pos < trace.prompt_length:
            cell.state = "prompt"
        elif pos in now:
            cell.state, change = now[pos]
            cell.p, cell.prev = change.p, None if cell.state == "draft" else change.old
        elif token == trace.mask_id:
            cell.state, cell.hidden = "mask", pos not in active
            if ghost and record and not cell.hidden:
                cell.ghost = record.guesses[pos - record.window[0]]
        else:
            cell.p = trace.last_write(pos, step)[2]
        cell.tip = _tip(trace, cell, record, step)
        out.append(cell)
    return out


def _output_end(trace: Trace, tokens: list[int]) -> int:
    """First position after the output: past gen_length, or just after the first generated EOS."""
    end = trace.prompt_length + trace.gen_length
    for pos in range(trace.prompt_length, end):
        if tokens[pos] == trace.eos_id:
            return pos + 1
    return end


def _token_html(trace: Trace, token: int, cls: str) -> str:
    special = token in (trace.mask_id, trace.eos_id)
    return f'<span class="{cls}{" sp" if special else ""}">{escape(text(trace, token))}</span>'


def cell_html(trace: Trace, cell: Cell) -> str:
    classes = "tok" + " far" * cell.hidden + " cut" * cell.cut + " tail" * cell.tail
    attrs = [f'class="{classes}"', f'data-pos="{cell.pos}"',
             f'data-block="{cell.block}"', f'data-state="{cell.state}"', f'title="{escape(cell.tip)}"']
    if cell.p is not None:
        attrs.append(f'style="--p:{cell.p:.3f}"')
        if cell.state in ("draft", "edit", "mbe"):
            attrs.append(f'data-p="{cell.p:.4f}"')
    if cell.prev is not None:
        attrs.append(f'data-prev="{escape(text(trace, cell.prev))}"')
    if cell.state == "mask":
        inner = _token_html(trace, cell.ghost, "ghost") if cell.ghost is not None else ""
    elif cell.prev is not None:
        arrow = '<span class="arrow">→</span>'
        inner = _token_html(trace, cell.prev, "old") + arrow + _token_html(trace, cell.token, "new")
    else:
        inner = _token_html(trace, cell.token, "txt")
    return f"<span {' '.join(attrs)}>{inner}</span>"


def _blocks_html(trace: Trace, all_cells: list[Cell], active_block: int) -> str:
    parts, B = [], trace.block_length
    for b in range(0, trace.length // B):
        group = all_cells[b * B:(b + 1) * B]
        unseen = all(c.hidden or c.tail for c in group)
        cls = "blk active" if b == active_block else "blk far" if unseen else "blk"
        body = "".join(cell_html(trace, c) for c in group)
        parts.append(f'<span class="{cls}" data-block="{b}"><span class="bnd" data-b="{b}" title="block {b} starts '
                     f'at position {b * B}"></span>{body}</span>')
    return "".join(parts) + _counts_html(all_cells)


def _counts_html(all_cells: list[Cell]) -> str:
    """What is counted instead of drawn: masks of later blocks, and the positions past the output."""
    hidden = [c for c in all_cells if c.hidden and not c.tail]
    tail = [c for c in all_cells if c.tail]
    notes = []
    if hidden:
        n_blocks = len({c.block for c in hidden})
        notes.append(f'+ {len(hidden)} masks in {n_blocks} later block{"s" if n_blocks > 1 else ""}')
    if tail:
        notes.append(f"+ {len(tail)} positions past the end of the output (EOS padding or never decoded)")
    return "".join(f'<span class="more">{n}</span>' for n in notes)


def header_html(trace: Trace, step: int) -> str:
    record = trace.step_record(step)
    s = trace.settings
    where = (f"step {step}/{trace.steps} · block {record.block} · {record.phase}" if record
             else f"step 0/{trace.steps} · prompt and masks")
    mbe = f"on (window {s.mbe_window})" if s.mbe else "off"
    taus = (f"mode {escape(trace.mode)} · τ_mask {s.threshold:.2f} · "
            f"τ_edit {_fmt_tau(s.editing_threshold)} · MBE {mbe} · block {s.block_length}")
    return f'<div class="canvas-head"><span class="where">{where}</span><span class="taus">{taus}</span></div>'


def legend_html() -> str:
    items = "".join(f'<span class="key" data-state="{state}"><span class="txt">{label}</span></span>'
                    for state, label in LEGEND)
    return (f'<div class="legend">{items}<span class="hint">shade = confidence p · hover a token for '
            f"details · | n = block n starts</span></div>")


def render(trace: Trace | None, step: int, ghost: bool = False, elem_id: str = "canvas",
           legend: bool = True) -> str:
    """The canvas HTML of `trace` after decode step `step`; an empty canvas when there is no trace."""
    if trace is None:
        return (f'<div id="{elem_id}" class="canvas empty" data-step="0" data-steps="0">'
                f'<p class="hint">Type a prompt and press Generate: the canvas shows every position as the '
                f"model drafts and edits it.</p></div>")
    step = max(0, min(step, trace.steps))
    all_cells = cells(trace, step, ghost)
    record = trace.step_record(step)
    active = record.block if record else trace.prompt_length // trace.block_length
    body = _blocks_html(trace, all_cells, active)
    return (f'<div id="{elem_id}" class="canvas" data-step="{step}" data-steps="{trace.steps}">'
            f'{header_html(trace, step)}{legend_html() if legend else ""}<div class="seq">{body}</div></div>')
