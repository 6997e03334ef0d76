"""A run's step trace: what the playground stores, replays, charts and exports.

A `Trace` holds the prompt, the settings, the display text of every token id it mentions and one
compact dict per forward (see docs/trace-schema.md). Token sequences are not stored per step: the
sequence after decode step k is the initial one (prompt + masks) with the changes of steps 1..k applied,
so a trace stays small and any step can be rebuilt (`Trace.view`).

`Recorder` turns the engine's `StepRecord`s into a Trace while the run goes on. It times the engine
only (the time spent inside the decode generator), so TPS does not count rendering.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

from llada.decode import DecodeConfig, StepRecord, output_ids

SCHEMA = "llada-trace/1"
P_DIGITS = 4  # confidences are rounded in the trace: enough for display, keeps exports small


@dataclass
class Trace:
    model: str
    prompt: str
    prompt_ids: list[int]
    settings: dict
    mask_id: int
    eos_id: int
    length: int  # positions of the sequence (prompt + generation, padded to whole blocks)
    texts: dict[int, str] = field(default_factory=dict)  # token id -> display text
    records: list[dict] = field(default_factory=list)  # one per forward, decode and cache
    result: dict | None = None  # filled when the run ends (see `finish`)
    steps_index: list[int] = field(default_factory=list)  # records index of decode step k+1

    @property
    def prompt_length(self) -> int:
        return len(self.prompt_ids)

    @property
    def block_length(self) -> int:
        return int(self.settings["block_length"])

    @property
    def gen_length(self) -> int:
        return int(self.settings["gen_length"])

    @property
    def steps(self) -> int:
        """Decode steps recorded so far (cache forwards are not steps)."""
        return len(self.steps_index)

    def step_record(self, step: int) -> dict | None:
        """The decode record of step `step` (1-based); None for step 0 (before any forward)."""
        return self.records[self.steps_index[step - 1]] if step >= 1 else None

    def add(self, record: dict) -> None:
        if record["kind"] == "decode":
            self.steps_index.append(len(self.records))
        self.records.append(record)

    def tokens_at(self, step: int) -> list[int]:
        """The whole sequence after decode step `step` (0 = prompt followed by masks)."""
        tokens = self.prompt_ids + [self.mask_id] * (self.length - self.prompt_length)
        for index in self.steps_index[:step]:
            for pos, token, *_ in changes(self.records[index]):
                tokens[pos] = token
        return tokens

    def text(self, token: int) -> str:
        return self.texts.get(token, str(token))

    def to_dict(self) -> dict:
        out = {"schema": SCHEMA} | asdict(self)
        out["texts"] = {str(k): v for k, v in self.texts.items()}
        out["prompt_length"], out["block_length"] = self.prompt_length, self.block_length
        out.pop("steps_index")
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} trace (schema {data.get('schema')!r})")
        keys = ("model", "prompt", "prompt_ids", "settings", "mask_id", "eos_id", "length", "result")
        trace = cls(**{k: data.get(k) for k in keys})
        trace.texts = {int(k): v for k, v in data["texts"].items()}
        for record in data["records"]:
            trace.add(record)
        return trace

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))


def changes(record: dict) -> list[list]:
    """Every token a decode record wrote: [pos, token, p] drafts, [pos, token, old, p] edits and MBE edits."""
    if record["kind"] != "decode":
        return []
    return record["drafts"] + record["edits"] + record["mbe"]


def stats(trace: Trace) -> dict:
    """The run's numbers, as `GenerateResult.summary()` counts them (TPS over engine time)."""
    last = trace.records[-1] if trace.records else {}
    decode_forwards, cache_forwards = last.get("decode_forwards", 0), last.get("cache_forwards", 0)
    decodes = [trace.records[i] for i in trace.steps_index]
    tokens = len(final_ids(trace))
    seconds = last.get("t", 0.0)
    forwards = decode_forwards + cache_forwards
    return {"forwards": forwards, "decode_forwards": decode_forwards, "cache_forwards": cache_forwards,
            "tokens": tokens, "tpf": tokens / max(forwards, 1), "tps": tokens / seconds if seconds > 0 else 0.0,
            "seconds": seconds, "steps": len(decodes),
            "drafts": sum(len(r["drafts"]) for r in decodes), "edits": sum(len(r["edits"]) for r in decodes),
            "mbe_edits": sum(len(r["mbe"]) for r in decodes)}


def final_ids(trace: Trace) -> list[int]:
    return output_ids(trace.tokens_at(trace.steps), trace.prompt_length, trace.gen_length, trace.mask_id,
                      trace.eos_id)


def edit_events(trace: Trace) -> list[dict]:
    """Every T2T and MBE edit of the run, in order."""
    out = []
    for step, index in enumerate(trace.steps_index, start=1):
        record = trace.records[index]
        for kind, key in (("T2T", "edits"), ("MBE", "mbe")):
            for pos, token, old, p in record[key]:
                out.append({"step": step, "block": pos // trace.block_length, "pos": pos, "old": old,
                            "new": token, "p": p, "kind": kind})
    return out


class Recorder:
    """Builds a Trace from a running decode; `token_texts(ids)` names new token ids as they appear."""

    def __init__(self, trace: Trace, token_texts):
        self.trace, self.token_texts = trace, token_texts
        self.engine_seconds = 0.0
        self._name(trace.prompt_ids + [trace.mask_id, trace.eos_id])

    def drain(self, stream: Iterator[StepRecord]) -> Iterator[dict]:
        """Pull records from `stream`, timing only the engine; yields each stored record dict."""
        try:
            while True:
                t = time.perf_counter()
                try:
                    record = next(stream)
                except StopIteration:
                    return
                self.engine_seconds += time.perf_counter() - t
                yield self.add(record)
        finally:
            stream.close()  # a closed run (cancelled, tab gone) stops the engine too

    def add(self, record: StepRecord) -> dict:
        data = compact(record, self.engine_seconds)
        self._name([c[1] for c in changes(data)] + data.get("guesses", []))
        self.trace.add(data)
        return data

    def finish(self, decode_text, complete: bool = True) -> dict:
        ids = final_ids(self.trace)
        self.trace.result = {"output_ids": ids, "text": decode_text(ids), "complete": complete,
                             "stats": stats(self.trace)}
        return self.trace.result

    def _name(self, ids: list[int]) -> None:
        new = sorted({t for t in ids if t not in self.trace.texts})
        if new:
            self.trace.texts.update(zip(new, self.token_texts(new)))


def compact(record: StepRecord, engine_seconds: float) -> dict:
    """The trace dict of one StepRecord (see docs/trace-schema.md)."""
    base = {"kind": record.kind, "phase": record.phase, "step": record.step, "block": record.block,
            "window": list(record.window), "seconds": round(record.seconds, 6), "t": round(engine_seconds, 6),
            "decode_forwards": record.decode_forwards, "cache_forwards": record.cache_forwards,
            "output_length": record.output_length}
    if record.kind != "decode":
        return base
    p = lambda pos: round(record.p_at(pos), P_DIGITS)  # noqa: E731 - confidence at a position
    tok = record.tokens
    return base | {
        "block_step": record.block_step, "active": list(record.active), "threshold": record.threshold,
        "editing_threshold": record.editing_threshold,
        "drafts": [[q, tok[q], p(q)] for q in record.drafted],
        "edits": [[q, tok[q], record.previous[q], p(q)] for q in record.edited],
        "mbe": [[q, tok[q], record.previous[q], p(q)] for q in record.mbe_edited],
        "guesses": list(record.guesses), "confidence": [round(c, P_DIGITS) for c in record.confidence]}


def new_trace(pipe, prompt: str, prompt_ids: list[int], cfg: DecodeConfig, mode: str) -> Trace:
    """An empty trace for a run of `pipe` on `prompt_ids` with `cfg`."""
    B = cfg.block_length
    length = -(-(len(prompt_ids) + cfg.gen_length) // B) * B
    settings = asdict(cfg) | {"mode": mode}
    return Trace(model=pipe.name, prompt=prompt, prompt_ids=list(prompt_ids), settings=settings,
                 mask_id=pipe.mask_id, eos_id=pipe.eos_id, length=length)
