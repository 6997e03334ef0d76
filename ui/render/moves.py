"""What a LLaDA2.2 step moved, in the terms the canvas draws it.

A step of the Levenshtein rule records its drafts and edits at the positions *before* its moves, then
`moved_to` (where each position of the active block went; -1: deleted or pushed out), `inserts` and
`deletes` (llada/trace.py). The canvas shows the sequence *after* the step, so it needs the other way round:

* `at(pos)` — where the token a change wrote at `pos` sits after the moves (None: it left the block);
* `source[pos]` — the position (before the moves) of the token now at `pos`; a mask the moves opened has
  none, so it has no guess of the model to show;
* `inserted[pos]` — the mask a SPLIT opened at `pos` (drawn as `insert`, opening its gap);
* `gone[pos]` — the tokens DELETE removed just before `pos` (drawn struck out, their gap closing): each
  one sits after the token that was on its left, so before the cell right of where that token landed.

A step that moved nothing (every LLaDA2.1 step) has `NO_MOVES`: every position is its own source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llada.trace import Delete, Insert, StepRecord


@dataclass(frozen=True)
class Moves:
    landed: dict[int, int] = field(default_factory=dict)  # position before the moves -> after (-1: gone)
    source: dict[int, int] = field(default_factory=dict)  # position after the moves -> before
    inserted: dict[int, Insert] = field(default_factory=dict)  # position of an opened mask -> its SPLIT
    gone: dict[int, list[Delete]] = field(default_factory=dict)  # position -> the tokens deleted before it

    def at(self, pos: int) -> int | None:
        """Where the token at `pos` before the moves is after them (None: deleted or pushed out)."""
        to = self.landed.get(pos, pos)
        return None if to < 0 else to

    def source_of(self, pos: int) -> int | None:
        """The position before the moves of the token at `pos` (None: a mask the moves opened)."""
        return self.source.get(pos) if self.landed else pos


NO_MOVES = Moves()


def moves_of(record: StepRecord | None) -> Moves:
    """The moves of a decode step's record (NO_MOVES for step 0 and for a step that moved nothing)."""
    if record is None or not record.moved_to:
        return NO_MOVES
    a0, a1 = record.active
    landed = {a0 + j: to for j, to in enumerate(record.moved_to)}
    gone: dict[int, list[Delete]] = {}
    for d in sorted(record.deletes):
        left = max((landed[j] for j in range(a0, d.pos) if landed[j] >= 0), default=a0 - 1)
        gone.setdefault(min(left + 1, a1 - 1), []).append(d)
    return Moves(landed, {to: pos for pos, to in landed.items() if to >= 0},
                 {i.mask: i for i in record.inserts if i.mask >= 0}, gone)
