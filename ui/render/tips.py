"""The words on a canvas cell: its tooltip (what it is, which step wrote it, with what confidence, against
which threshold; a poke and its repair; the tokens deleted just before it) and the model's guess in a mask.

Pure functions of `v`, a `ui.render.canvas.View` (a trace at one step; not imported here, since the canvas
imports this module): the canvas calls them for each cell it draws.
"""

from __future__ import annotations

from llada.presets import tau_text
from llada.trace import Trace

WRITE_NAMES = {"drafts": "draft", "edits": "edit", "mbe_edits": "MBE edit"}


def text(trace: Trace, token: int | None) -> str:
    """The display text of a token id on its own (its id when the trace has no name for it)."""
    return trace.texts.get(token, str(token))



def guess(v, pos: int) -> int | None:
    """The model's guess shown in a mask of the active block (ghost on): the forward's at the position the
    mask had before the moves; a mask the moves opened was not seen by the forward, so it has none."""
    if not (v.ghost and v.record and pos // v.B == v.active):
        return None
    seen = v.moves.source_of(pos)
    return None if seen is None else v.record.guesses[seen - v.record.window[0]]


def _poke_note(v, pos: int, state: str) -> str:
    """A cell poked at an earlier step whose token the model wrote since: the repair, in words."""
    if pos not in v.poked or state == "poke":
        return ""
    write = v.trace.last_write(pos, v.step)
    if write is None or write[1] == "pokes":
        return ""  # the poke's token still stands (the tip says so)
    return f" · poked after step {v.poked[pos]}, then rewritten by the model"


def _gone_note(v, pos: int) -> str:
    """A cell's word on the tokens deleted just before it (a phone taps the cell: the struck-out sliver is thin)."""
    gone = [repr(text(v.trace, d.token)) for d in v.moves.gone.get(pos, ())]
    return f" · deleted just before it at this step: {', '.join(gone)}" if gone else ""


def _tip(v, pos: int, state: str, p: float | None) -> str:
    trace, token = v.trace, v.tokens[pos]
    q = f'#{pos} "{text(trace, token)}"'
    if state == "prompt":
        return f"{q} · prompt"
    if state == "insert":
        i = v.moves.inserted[pos]
        return (f'#{pos} mask inserted at step {v.step} (SPLIT written at #{i.pos}): '
                f'"{text(trace, i.token)}" and the tokens after it moved right')
    if state == "mask":
        if (guessed := guess(v, pos)) is None:
            return f"#{pos} mask"
        p_guess = v.record.p_at(v.moves.source_of(pos))
        return f'#{pos} mask · model\'s guess "{text(trace, guessed)}" p={p_guess:.2f}'
    if state == "poke" and v.now[pos][1].old < 0:
        return f"#{pos} mask inserted by a poke after step {v.step}; the tokens after it moved right"
    if state == "poke":
        return f'{q} · poked after step {v.step} · it was "{text(trace, v.now[pos][1].old)}"'
    if state == "draft":
        tau = trace.settings.threshold
        rule = f"> τ_mask {tau:.2f}" if p > tau else f"≤ τ_mask {tau:.2f}: the most confident mask"
        return f"{q} · drafted at step {v.step} · p={p:.2f} {rule}"
    if state in ("edit", "mbe"):
        how = "T2T edit" if state == "edit" else f"MBE edit of block {pos // v.B}"
        return (f'{q} replaced "{text(trace, v.now[pos][1].old)}" at step {v.step} · {how} · '
                f"p={p:.2f} > τ_edit {tau_text(trace.settings.editing_threshold, '.2f')}")
    write = trace.last_write(pos, v.step)
    if write is None:  # no change wrote it: a token the moves brought here is always a written one
        return f"{q} · generated"
    k, kind, wp = write
    if kind == "pokes":  # written from outside the run between two forwards (`llada.trace.Poke`)
        return f"{q} · poked after step {k}"
    return f"{q} · written at step {k} ({WRITE_NAMES[kind]}, p={wp:.2f})"



def tip(v, pos: int, state: str, p: float | None) -> str:
    """A cell's whole tooltip: what it is, then the poke's repair and the deletions before it, if any."""
    return _tip(v, pos, state, p) + _poke_note(v, pos, state) + _gone_note(v, pos)
