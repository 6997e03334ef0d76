"""One record of a decoding run: the engine's step records, and the Trace that replays them.

The decoder yields a `StepRecord` per forward holding only what that forward changed (`Change`s) and
what the model guessed over the window it scored; no record carries the sequence. A `Trace` is the
prompt, the settings and those records, and it keeps the run's state up to date as records arrive:
the current tokens, the counters (forwards, drafts, edits, MBE edits, seconds) and the output. Any
earlier step is rebuilt incrementally from the nearest one (`tokens_at`), applying or undoing changes.

One Trace serves everything: the CLI's JSON (`summary`), the playground's canvas, stats, charts and
partial text, the exports and the Learn recordings (`to_dict`, schema `llada-trace/3`, described in
docs/trace-schema.md; `llada-trace/2`, without inserts and deletes, still reads).

A LLaDA2.2 step (the Levenshtein rule) also moves tokens inside its active block: its `drafts` and `edits`
sit at the positions before the moves, then `moved_to` says where each active position's token went (-1:
deleted or pushed out; masks fill the rest), and `inserts` / `deletes` say why. Applying a step is its
changes, then its moves; undoing it restores the block as it was before the moves, then undoes the changes.

A poke (`Poke`: someone changed the text between two forwards, `llada.loop`) rides on the record of the
forward it follows, as `pokes` (`Poked`: position, token written, token replaced, and for LLaDA2.2 runs the
kind: a write, or a delete or insert that moves the rest of its block): applying a step is its changes, its
moves, then its pokes; undoing it undoes the pokes first, last first. The field is optional in
the JSON (written only when a step has pokes), so a trace without pokes reads and writes as before.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterator

from .config import DecodeConfig, padded_length
# a step's records live in llada/records.py; the names stay importable from here, where traces are read
from .records import KINDS, MOVES, P_DIGITS, Change, Delete, Insert, Poke, Poked, StepRecord  # noqa: F401

SCHEMA = "llada-trace/3"  # /3 adds inserts, deletes, moved_to to decode records and stop_ids to the trace
READABLE = ("llada-trace/2", SCHEMA)
def output_ids(tokens: list[int], prompt_length: int, gen_length: int, mask_id: int, eos_id: int,
               stop_ids: tuple[int, ...] = ()) -> list[int]:
    """The generated tokens, cut after the first EOS or stop id (inclusive) and before the first mask."""
    gen = tokens[prompt_length:prompt_length + gen_length]
    end = len(gen)
    if mask_id in gen:
        end = gen.index(mask_id)
    stops = {eos_id, *stop_ids}
    return next((gen[:i + 1] for i, t in enumerate(gen[:end]) if t in stops), gen[:end])


@dataclass
class Trace:
    """A run: prompt, settings and step records, with its current state kept up to date by `add`."""

    prompt_ids: list[int]
    settings: DecodeConfig
    mask_id: int
    eos_id: int
    model: str = ""  # the model's name
    prompt: str = ""  # the prompt's text, when it had one
    mode: str = ""  # the mode that chose the settings (S, Q, M2T, Custom, ...)
    texts: dict[int, str] = field(default_factory=dict)  # token id -> display text (see `name_tokens`)
    partial: dict[int, str] = field(default_factory=dict)  # token id -> its bytes (hex), for split characters
    records: list[StepRecord] = field(default_factory=list)
    status: str = "running"  # "running", "done" or "stopped"
    note: str = ""  # why a run stopped early, or what is worth knowing about it
    text: str | None = None  # the output's text, set by `finish` when a tokenizer is at hand
    stop_ids: tuple[int, ...] = ()  # ids that end the output besides eos_id (LLaDA2.2: <|role_end|>)

    def __post_init__(self) -> None:
        self.prompt_ids, self.stop_ids = list(self.prompt_ids), tuple(self.stop_ids)
        self.length = padded_length(len(self.prompt_ids), self.settings.gen_length, self.settings.block_length)
        self.tokens = self.prompt_ids + [self.mask_id] * (self.length - len(self.prompt_ids))  # current state
        self.steps_index: list[int] = []  # records index of decode step k+1
        self.elapsed: list[float] = []  # engine seconds after each record
        self.output_lengths: list[int] = []  # output tokens after each record
        self.counts = dict.fromkeys(("decode", "cache", *KINDS, *MOVES, "pokes"), 0)
        self._before_moves: dict[int, list[int]] = {}  # step -> its active block before its moves (to undo them)
        # pos -> [(since step, (step, kind, p) of the write its token came from, or None)] in order: a token
        # that moves (LLaDA2.2) takes its write along, a mask opened by a move has none
        self._writes: dict[int, list[tuple[int, tuple[int, str, float] | None]]] = {}
        self._cursor = (0, tuple(self.tokens))  # (step, tokens) of the last tokens_at: one value, swapped whole
        self._named = 0  # records already seen by name_tokens
        records, self.records = self.records, []
        for record in records:
            self.add(record)

    # ---- growing ---------------------------------------------------------------------------------------

    def add(self, record: StepRecord) -> None:
        """Append a record and apply its changes (ValueError when a change does not fit the sequence)."""
        for c in record.changes:
            if not self.prompt_length <= c.pos < self.length or self.tokens[c.pos] != c.old:
                raise ValueError(f"record of step {record.step} changes position {c.pos} from {c.old}, "
                                 f"but the trace holds {self.tokens[c.pos] if c.pos < self.length else 'nothing'}")
        moves = record.moved_to or record.inserts or record.deletes  # LLaDA2.2 only: a 2.1 record has none
        if moves:
            self._check_moves(record)
        for kind in KINDS:
            for c in getattr(record, kind):
                self.tokens[c.pos] = c.token
                self._writes.setdefault(c.pos, []).append((record.step, (record.step, kind, c.p)))
            self.counts[kind] += len(getattr(record, kind))
        if record.moved_to:
            self._before_moves[record.step] = self.tokens[record.active[0]:record.active[1]]
            record.move(self.tokens, self.mask_id)
            self._move_writes(record.step, record.active, record.moved_to)
        for kind in MOVES if moves else ():
            self.counts[kind] += len(getattr(record, kind))
        if record.pokes:
            self._add_pokes(record)
        self.counts[record.kind] += 1
        if record.kind == "decode":
            self.steps_index.append(len(self.records))
        self.records.append(record)
        self.elapsed.append((self.elapsed[-1] if self.elapsed else 0.0) + record.seconds)
        self.output_lengths.append(len(self.output_ids))

    def _add_pokes(self, record: StepRecord) -> None:
        """Apply a record's pokes (after its changes and moves); ValueError when one does not fit. A poked write
        is the last write of its position; a poked move takes each token's write along (`_move_writes`), and
        the mask it opens counts as the poke's write."""
        B = self.block_length
        for p in record.pokes:
            held = p.replaced(self.tokens, B) if self.prompt_length <= p.pos < self.length else "nothing"
            if held != p.old:
                raise ValueError(f"poke after step {record.step} changes position {p.pos} from {p.old}, "
                                 f"but the trace holds {held}")
            p.apply(self.tokens, B)
            opened = p.pos
            if p.kind != "write":
                block = (p.pos // B * B, (p.pos // B + 1) * B)
                self._move_writes(record.step, block, p.moved_to(block))
                opened = block[1] - 1 if p.kind == "delete" else p.pos
            self._writes.setdefault(opened, []).append((record.step, (record.step, "pokes", 1.0)))
        self.counts["pokes"] += len(record.pokes)

    def _check_moves(self, record: StepRecord) -> None:
        """ValueError when a record's moves do not fit its active block."""
        a0, a1 = record.active
        gone = [to for to in record.moved_to if to >= 0]
        if record.moved_to and (len(record.moved_to) != a1 - a0 or len(set(gone)) != len(gone)
                                or not all(a0 <= to < a1 for to in gone)):
            raise ValueError(f"record of step {record.step} moves its block {record.active} to {record.moved_to}")
        moves = [m.pos for m in (*record.inserts, *record.deletes)]
        if moves and (not record.moved_to or not all(max(a0, self.prompt_length) <= pos < a1 for pos in moves)):
            raise ValueError(f"record of step {record.step} inserts or deletes at {moves}, outside its block's "
                             f"generated positions or without moved_to")

    def _move_writes(self, step: int, block: tuple[int, int], moved_to: list[int]) -> None:
        """After moves in `block` (at `step`: where each position went, `moved_to`), each of its positions
        answers `last_write` with the write of the token that landed there (None for a mask the moves opened)."""
        a0, a1 = block
        last = {pos: self.last_write(pos, step) for pos in range(a0, a1)}
        landed = {to: last[a0 + j] for j, to in enumerate(moved_to) if to >= 0}
        for pos in range(a0, a1):
            if landed.get(pos) != last[pos]:
                self._writes.setdefault(pos, []).append((step, landed.get(pos)))

    def follow(self, stream: Iterator[StepRecord]) -> Iterator[StepRecord]:
        """Add every record of `stream` as it comes and pass it on; closing this closes the stream."""
        try:
            for record in stream:
                self.add(record)
                yield record
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def finish(self, status: str = "done", note: str = "", text: str | None = None) -> "Trace":
        if status not in ("done", "stopped"):
            raise ValueError(f"status must be 'done' or 'stopped', got {status!r}")
        self.status, self.note, self.text = status, note, text
        return self

    def name_tokens(self, token_texts, token_bytes=None) -> None:
        """Give a display text to every token id the trace mentions that has none (`token_texts(ids)`).

        Tokens that hold part of a character ('\ufffd' alone) also keep their bytes (`token_bytes(ids)`),
        so that a viewer can join the character across neighbouring tokens."""
        ids = set(self.prompt_ids) | {self.mask_id, self.eos_id} if self._named == 0 else set()
        for record in self.records[self._named:]:
            ids.update(c.token for c in record.changes)
            ids.update(p.token for p in record.pokes)
            ids.update(record.guesses)
        self._named = len(self.records)
        new = sorted(t for t in ids if t not in self.texts)
        if not new:
            return
        self.texts.update(zip(new, token_texts(new)))
        split = [t for t in new if "\ufffd" in self.texts[t]]
        if split and token_bytes is not None:
            self.partial.update((t, b.hex()) for t, b in zip(split, token_bytes(split)) if b is not None)

    # ---- the run's numbers -----------------------------------------------------------------------------

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)

    @property
    def block_length(self) -> int:
        return self.settings.block_length

    @property
    def gen_length(self) -> int:
        return self.settings.gen_length

    @property
    def steps(self) -> int:
        """Decode steps so far (cache forwards are not steps)."""
        return self.counts["decode"]

    @property
    def num_decode_forwards(self) -> int:
        return self.counts["decode"]

    @property
    def num_cache_forwards(self) -> int:
        return self.counts["cache"]

    @property
    def forwards(self) -> int:
        return self.counts["decode"] + self.counts["cache"]

    @property
    def drafts(self) -> int:
        return self.counts["drafts"]

    @property
    def edits(self) -> int:
        return self.counts["edits"]

    @property
    def mbe_edits(self) -> int:
        return self.counts["mbe_edits"]

    @property
    def inserts(self) -> int:
        return self.counts["inserts"]

    @property
    def deletes(self) -> int:
        return self.counts["deletes"]

    @property
    def pokes(self) -> list[tuple[int, Poked]]:
        """Every poke of the run, in order: (the step it followed, the poke)."""
        return [(self.records[i].step, p) for i in self.steps_index for p in self.records[i].pokes]

    def poke_list(self) -> list[dict]:
        """The pokes as JSON objects: {step (the step it followed), pos (offset in the generated region), old, new},
        and `kind` for a move ("delete" or "insert": `old` is the token that left the block, `new` the mask)."""
        return [{"step": step, "pos": p.pos - self.prompt_length, "old": p.old, "new": p.token}
                | ({"kind": p.kind} if p.kind != "write" else {}) for step, p in self.pokes]

    @property
    def seconds(self) -> float:
        return self.elapsed[-1] if self.elapsed else 0.0

    @property
    def output_ids(self) -> list[int]:
        return output_ids(self.tokens, self.prompt_length, self.gen_length, self.mask_id, self.eos_id, self.stop_ids)

    @property
    def tpf(self) -> float:
        """Output tokens per forward, cache forwards included."""
        return len(self.output_ids) / max(self.forwards, 1)

    @property
    def tps(self) -> float:
        """Output tokens per second of engine time (prefill included, the consumer's time excluded)."""
        return len(self.output_ids) / self.seconds if self.seconds > 0 else 0.0

    def stats(self) -> dict:
        return {"forwards": self.forwards, "decode_forwards": self.num_decode_forwards,
                "cache_forwards": self.num_cache_forwards, "tokens": len(self.output_ids), "tpf": self.tpf,
                "tps": self.tps, "seconds": self.seconds, "steps": self.steps, "drafts": self.drafts,
                "edits": self.edits, "mbe_edits": self.mbe_edits, "inserts": self.inserts, "deletes": self.deletes}

    def summary(self) -> dict:
        """The command line's JSON (UI_CONTRACT): output, forwards, block states, TPF, TPS, changes."""
        return {"output_ids": self.output_ids, "num_decode_forwards": self.num_decode_forwards,
                "num_cache_forwards": self.num_cache_forwards,
                "block_states_before_each_forward": self.block_states_before_each_forward(),
                "tpf": self.tpf, "tps": self.tps, "drafts": self.drafts, "edits": self.edits,
                "mbe_edits": self.mbe_edits, "inserts": self.inserts, "deletes": self.deletes}

    # ---- replay ----------------------------------------------------------------------------------------

    def step_record(self, step: int) -> StepRecord | None:
        """The record of decode step `step` (1-based); None for step 0 (before any forward)."""
        return self.records[self.steps_index[step - 1]] if step >= 1 else None

    def tokens_at(self, step: int) -> list[int]:
        """The whole sequence after decode step `step` (0 = prompt followed by masks); a fresh list.

        Walks from the last step asked for, on a copy: the cursor is read once and replaced whole, so
        threads that scrub, replay and export one trace at once each get the right frame."""
        step = max(0, min(step, self.steps))
        if step == self.steps:
            return list(self.tokens)
        view_step, frozen = self._cursor
        view = list(frozen)
        while view_step < step:  # forward: apply the next step's changes, then its moves
            view_step += 1
            self._apply(view, self.step_record(view_step))
        while view_step > step:  # backward: undo this step's moves, then its changes, last first
            record = self.step_record(view_step)
            for p in reversed(record.pokes):
                p.undo(view, self.block_length)
            if record.moved_to:
                view[record.active[0]:record.active[1]] = self._before_moves[record.step]
            for c in reversed(record.changes):
                view[c.pos] = c.old
            view_step -= 1
        self._cursor = (step, tuple(view))
        return view

    def last_write(self, pos: int, step: int) -> tuple[int, str, float] | None:
        """(step, kind, p) of the change that wrote the token at `pos` after decode step `step` (the token may
        have moved there since, LLaDA2.2); None when no change wrote it."""
        writes = self._writes.get(pos, [])
        i = bisect.bisect_right(writes, step, key=lambda entry: entry[0])
        return writes[i - 1][1] if i else None

    def block_states_before_each_forward(self) -> list[list[int]]:
        """The active block's tokens before every decode forward (the reference's trace of a run)."""
        view = self.prompt_ids + [self.mask_id] * (self.length - self.prompt_length)
        out = []
        for index in self.steps_index:
            record = self.records[index]
            out.append(view[record.active[0]:record.active[1]])
            self._apply(view, record)
        return out

    def _apply(self, view: list[int], record: StepRecord) -> None:
        """A decode step on `view`: its changes, then its moves."""
        for c in record.changes:
            view[c.pos] = c.token
        record.move(view, self.mask_id)
        for p in record.pokes:
            p.apply(view, self.block_length)

    def edit_events(self) -> list[tuple[int, str, Change]]:
        """Every T2T and MBE edit of the run, in order: (step, kind, change)."""
        out = []
        for index in self.steps_index:
            record = self.records[index]
            out += [(record.step, kind, c) for kind in ("edits", "mbe_edits") for c in getattr(record, kind)]
        return out

    # ---- JSON ------------------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "model": self.model, "prompt": self.prompt, "prompt_ids": self.prompt_ids,
                "mode": self.mode, "settings": self.settings.to_dict(), "mask_id": self.mask_id,
                "eos_id": self.eos_id, "stop_ids": list(self.stop_ids), "length": self.length,
                "texts": {str(k): v for k, v in self.texts.items()},
                "partial": {str(k): v for k, v in self.partial.items()},
                "records": [r.to_dict() for r in self.records],
                "result": {"status": self.status, "note": self.note, "output_ids": self.output_ids,
                           "text": self.text, "stats": self.stats()}}

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        if data.get("schema") not in READABLE:
            raise ValueError(f"not a {' or '.join(READABLE)} trace (schema {data.get('schema')!r})")
        result = data.get("result") or {}
        return cls(prompt_ids=data["prompt_ids"], settings=DecodeConfig(**data["settings"]),
                   mask_id=data["mask_id"], eos_id=data["eos_id"], stop_ids=tuple(data.get("stop_ids", ())),
                   model=data.get("model", ""),
                   prompt=data.get("prompt", ""), mode=data.get("mode", ""),
                   texts={int(k): v for k, v in data.get("texts", {}).items()},
                   partial={int(k): v for k, v in data.get("partial", {}).items()},
                   records=[StepRecord.from_dict(r) for r in data["records"]],
                   status=result.get("status", "running"), note=result.get("note", ""), text=result.get("text"))
