"""What one step of a decode records: the changes it made (`Change`: drafts, edits, MBE edits), LLaDA2.2's
moves (`Insert`, `Delete`, `moved_to`), the pokes written from outside after it (`Poke` as asked, `Poked` as
held), the model's guesses and confidences, as one `StepRecord`; `llada.trace.Trace` keeps a run's records
and rebuilds any step from them (the JSON of both is described in docs/trace-schema.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

P_DIGITS = 4  # confidences are rounded in JSON: enough to read, keeps exports small
KINDS = ("drafts", "edits", "mbe_edits")  # the three kinds of change, named alike everywhere
MOVES = ("inserts", "deletes")  # the two kinds of move (LLaDA2.2), counted beside them
POKE_KINDS = ("write", "delete", "insert")  # a token written (or a mask), and LLaDA2.2's two moves


class Change(NamedTuple):
    pos: int  # absolute position (0-based, prompt included)
    token: int  # the token written
    old: int  # the token it replaced (the mask id for a draft)
    p: float  # the confidence that passed the threshold


@dataclass(frozen=True)
class Poke:
    """An intervention between two forwards: after decode forward `step` (1 = after the first), at offset
    `pos` of the generated region (0 = the first generated position):

    * `write` — the token there becomes `token` (an id; the mask id turns the position back into a mask);
    * `delete` (LLaDA2.2 runs) — the token there is removed and the rest of its block closes the gap, a new
      mask padding the block's end, as the rule's DELETE does; `token` is the mask id;
    * `insert` (LLaDA2.2 runs) — a mask opens there, the block's later tokens move right and the last one
      leaves the block (fixed length), as the rule's SPLIT does; `token` is the mask id."""

    step: int
    pos: int
    token: int
    kind: str = "write"


def read_poke(spec, token_of: Callable[[str], int]) -> Poke:
    """A `Poke` from `STEP:POS:TOKEN` text (as `--poke` takes it) or an object {"step", "pos", "token"}.

    TOKEN is `delete` or `insert` (the moves of a LLaDA2.2 run), or what `token_of` reads
    (`llada.pipeline.Pipeline.poke_token`: a token's text, `#ID` or `mask`); an object may give the token as
    its id. ValueError naming what is wrong (the caller says which poke);
    whether the poke fits the run (step from 1, position in the generated region) is the run's check."""
    if isinstance(spec, str):
        parts = spec.split(":", 2)
        if len(parts) != 3:
            raise ValueError("expected STEP:POS:TOKEN, e.g. 3:0:mask")
        try:
            step, pos = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError("STEP and POS must be whole numbers") from None
        return _poke(step, pos, parts[2], token_of)
    if not isinstance(spec, dict) or set(spec) != {"step", "pos", "token"}:
        raise ValueError('expected "STEP:POS:TOKEN" text or an object with exactly step, pos and token')
    step, pos, token = spec["step"], spec["pos"], spec["token"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, pos)):
        raise ValueError("step and pos must be whole numbers")
    if isinstance(token, int) and not isinstance(token, bool):
        token = f"#{token}"  # an id: read as #ID, so an unknown one is refused alike
    if not isinstance(token, str):
        raise ValueError("token must be a token's text, #ID, mask or a token id")
    return _poke(step, pos, token, token_of)


def _poke(step: int, pos: int, token: str, token_of: Callable[[str], int]) -> Poke:
    if token in ("delete", "insert"):  # a move: the mask it opens is what enters the block
        return Poke(step, pos, token_of("mask"), token)
    return Poke(step, pos, token_of(token))


class Poked(NamedTuple):
    """A poke as the trace holds it, on the record of the forward it followed. For a move, `token` is the mask
    it opened (a delete's at its block's end, an insert's at `pos`) and `old` the token that left the block (a
    delete's removed token, an insert's last token, pushed out)."""

    pos: int  # absolute position (0-based, prompt included)
    token: int  # the token written
    old: int  # the token it replaced
    kind: str = "write"  # see `POKE_KINDS`

    def to_list(self) -> list:
        """JSON: [pos, token, old], with the kind appended for a move (a write reads as before moves existed)."""
        return [self.pos, self.token, self.old] + ([self.kind] if self.kind != "write" else [])

    def moved_to(self, block: tuple[int, int]) -> list[int]:
        """Where each position of `block` [a0, a1) (the block holding `pos`) goes (-1: gone), for a move."""
        a0, a1 = block
        if self.kind == "delete":
            return [i if i < self.pos else -1 if i == self.pos else i - 1 for i in range(a0, a1)]
        return [i if i < self.pos else i + 1 if i + 1 < a1 else -1 for i in range(a0, a1)]

    def apply(self, view: list[int], B: int) -> None:
        """This poke on `view` (the whole sequence), in place; blocks of B positions."""
        a1 = (self.pos // B + 1) * B
        if self.kind == "delete":
            view[self.pos:a1] = view[self.pos + 1:a1] + [self.token]
        elif self.kind == "insert":
            view[self.pos:a1] = [self.token] + view[self.pos:a1 - 1]
        else:
            view[self.pos] = self.token

    def undo(self, view: list[int], B: int) -> None:
        """`apply` undone on `view`, in place."""
        a1 = (self.pos // B + 1) * B
        if self.kind == "delete":
            view[self.pos:a1] = [self.old] + view[self.pos:a1 - 1]
        elif self.kind == "insert":
            view[self.pos:a1] = view[self.pos + 1:a1] + [self.old]
        else:
            view[self.pos] = self.old

    def replaced(self, view: list[int], B: int) -> int:
        """The token `view` holds where this poke's `old` comes from (before the poke is applied)."""
        return view[(self.pos // B + 1) * B - 1] if self.kind == "insert" else view[self.pos]


class Insert(NamedTuple):
    """A SPLIT: a mask opens before the token `pos` held; that token is restored after it."""

    pos: int  # where SPLIT was written (before the moves)
    mask: int  # where the inserted mask is after the moves; -1: pushed out of the block
    token: int  # the token restored after the mask (what `pos` held before the step)


class Delete(NamedTuple):
    """A DELETE: the token at `pos` is removed and the block's later tokens close the gap."""

    pos: int  # where DELETE was written (before the moves)
    token: int  # the token removed (what `pos` held before the step)


@dataclass
class StepRecord:
    """What one forward did. A decode forward drafts and edits; a cache forward only fills the KV cache."""

    kind: str  # "decode" or "cache"
    phase: str  # decode: "draft" (the active block had masks) or "verify"; cache: "prefill" or "refresh"
    step: int  # decode forwards so far, this one included (cache records: decode forwards before it)
    block: int  # the active block
    block_step: int  # decode forwards inside this block, this one included (0 for cache forwards)
    window: tuple[int, int]  # [start, end) scored by this forward (MBE blocks + active block)
    active: tuple[int, int]  # [start, end) of the active block
    drafts: list[Change] = field(default_factory=list)  # masks filled (M2T)
    edits: list[Change] = field(default_factory=list)  # tokens replaced in the active block (T2T)
    mbe_edits: list[Change] = field(default_factory=list)  # tokens replaced in earlier blocks (MBE)
    inserts: list[Insert] = field(default_factory=list)  # masks inserted by SPLIT (LLaDA2.2)
    deletes: list[Delete] = field(default_factory=list)  # tokens removed by DELETE (LLaDA2.2)
    moved_to: list[int] = field(default_factory=list)  # active position -> its position after the moves (-1
    # gone); empty when nothing moved
    pokes: list[Poked] = field(default_factory=list)  # written from outside after this forward (see `Poke`)
    guesses: list[int] = field(default_factory=list)  # the model's token at every window position
    confidence: list[float] = field(default_factory=list)  # its probability p, same order
    seconds: float = 0.0  # engine time of this forward and its decision (the consumer's time excluded)

    @property
    def changes(self) -> list[Change]:
        return self.drafts + self.edits + self.mbe_edits

    def p_at(self, pos: int) -> float:
        return self.confidence[pos - self.window[0]]

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "phase": self.phase, "step": self.step, "block": self.block,
               "block_step": self.block_step, "window": list(self.window), "active": list(self.active),
               "seconds": round(self.seconds, 6)}
        if self.kind == "decode":
            out |= {k: [[c.pos, c.token, c.old, round(c.p, P_DIGITS)] for c in getattr(self, k)] for k in KINDS}
            out |= {"inserts": [list(i) for i in self.inserts], "deletes": [list(d) for d in self.deletes],
                    "moved_to": self.moved_to}
            if self.pokes:
                out["pokes"] = [p.to_list() for p in self.pokes]
            out |= {"guesses": self.guesses, "confidence": [round(c, P_DIGITS) for c in self.confidence]}
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        changes = {k: [Change(*c) for c in d.get(k, [])] for k in KINDS}
        return cls(kind=d["kind"], phase=d["phase"], step=d["step"], block=d["block"], block_step=d["block_step"],
                   window=tuple(d["window"]), active=tuple(d["active"]), guesses=d.get("guesses", []),
                   confidence=d.get("confidence", []), seconds=d["seconds"], **changes,
                   inserts=[Insert(*i) for i in d.get("inserts", [])],
                   deletes=[Delete(*x) for x in d.get("deletes", [])], moved_to=list(d.get("moved_to", [])),
                   pokes=[Poked(*p) for p in d.get("pokes", [])])

    def move(self, view: list[int], mask_id: int) -> None:
        """Apply this step's moves to `view` (the sequence after its changes), in place."""
        if not self.moved_to:
            return
        a0, a1 = self.active
        block, view[a0:a1] = view[a0:a1], [mask_id] * (a1 - a0)
        for token, to in zip(block, self.moved_to):
            if to >= 0:
                view[to] = token
