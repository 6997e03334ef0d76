"""Requests of the playground: checked inputs, the decode settings they mean, and live runs.

`check_request` refuses bad input with an `InputError` that names the field and the allowed values
(shown in `#error`, or as a Gradio error over the API): types are strict (a boolean is a boolean, a
prompt is a string), numbers finite, and a prompt needs visible characters and valid Unicode.
`start` turns a request into a `LiveRun`: the engine's Trace and the iterator of its records (the
engine runs as the iterator is pulled), bounded by a `Budget` of forwards and wall time; a run that
reaches it stops with its partial trace kept. `interleave` steps several runs forward by forward, so
S and Q share one timeline. `active_runs()` counts the runs whose engine is still open.

Settings follow the engine's one rule (`llada.presets`): a named mode sets the thresholds, a threshold
given explicitly overrides it; Custom is the model's S mode with the sliders' thresholds.
"""

from __future__ import annotations

import math
import threading
import time
import unicodedata
import weakref
from dataclasses import dataclass
from typing import Iterator

from llada.budget import Budget
from llada.config import DecodeConfig
from llada.trace import StepRecord, Trace

MODES = ("S", "Q", "M2T only", "Custom")
ENGINE_MODE = {"S": "S", "Q": "Q", "M2T only": "M2T", "M2T": "M2T", "Custom": "S"}  # UI label -> preset
LIMITS = {"block_length": (4, 128), "gen_length": (8, 1024), "max_post_steps": (0, 64), "mbe_window": (1, 4),
          "temperature": (0.0, 2.0), "seed": (0, 2**31 - 1)}
MAX_PROMPT_CHARS = 8000
PRESET_KEYS = ("threshold", "editing_threshold", "max_post_steps", "block_length")
INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp", "Cs")  # control, format (zero-width), separators, surrogates


class InputError(ValueError):
    """An input the playground refuses; the message says what is allowed."""


BUDGET = Budget()  # what one request may cost (tests and deployments replace it; read at each request)
_LIVE: "weakref.WeakSet[LiveRun]" = weakref.WeakSet()  # runs whose engine is still open
_LIVE_LOCK = threading.Lock()


def active_runs() -> int:
    """How many runs still hold an open engine (all sessions)."""
    with _LIVE_LOCK:
        return sum(1 for run in _LIVE if run.open)


@dataclass(frozen=True)
class Request:
    prompt: str
    mode: str = "S"
    tau_mask: float | None = None  # None = the mode's value
    tau_edit: float | None = None  # None = the mode's value
    edit: bool = True  # False switches editing (T2T) off
    mbe: bool = False
    mbe_window: int = 1
    block_length: int | None = None  # None = the mode's value
    gen_length: int = 128
    max_post_steps: int | None = None  # None = the mode's value
    temperature: float = 0.0
    seed: int | None = None


def _number(name: str, value, low: float, high: float, integer: bool = False) -> float | int:
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be {kind} between {low:g} and {high:g}, got {_shown(value)}")
    if not math.isfinite(value):
        raise InputError(f"{name} must be a finite number between {low:g} and {high:g}, got {value!r}")
    if integer and value != int(value):
        raise InputError(f"{name} must be a whole number between {low:g} and {high:g}, got {value!r}")
    if not low <= value <= high:
        raise InputError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return int(value) if integer else float(value)


def _optional(name: str, value, low: float, high: float, integer: bool = False):
    return None if value is None else _number(name, value, low, high, integer)


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be true or false, got {_shown(value)}")
    return value


def _shown(value) -> str:
    """A short description of a refused value (its type, and the value when short)."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def check_prompt(prompt) -> str:
    """The prompt, or InputError: a string of valid Unicode with at least one visible character."""
    if not isinstance(prompt, str):
        raise InputError(f"prompt must be text (a string), got {_shown(prompt)}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt is too long ({len(prompt)} characters; at most {MAX_PROMPT_CHARS})")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in prompt):
        raise InputError("the prompt holds an unpaired surrogate (U+D800 to U+DFFF): send valid Unicode text")
    if not prompt.strip() or all(unicodedata.category(ch) in INVISIBLE for ch in prompt):
        raise InputError("the prompt is empty (it has no visible characters): type something for the model "
                         "to continue")
    return prompt


def check_request(prompt, mode="S", tau_mask=None, tau_edit=None, edit=True, mbe=False, mbe_window=1,
                  block_length=None, gen_length=128, max_post_steps=None, temperature=0.0, seed=None) -> Request:
    """A validated Request, or InputError naming the first bad input and what is allowed."""
    prompt = check_prompt(prompt)
    if not isinstance(mode, str) or mode not in ENGINE_MODE:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {_shown(mode)}")
    return Request(prompt=prompt, mode=mode, tau_mask=_optional("tau_mask", tau_mask, 0.0, 1.0),
                   tau_edit=_optional("tau_edit", tau_edit, 0.0, 1.0), edit=_flag("edit", edit),
                   mbe=_flag("mbe", mbe),
                   mbe_window=_number("mbe_window", mbe_window, *LIMITS["mbe_window"], integer=True),
                   block_length=_optional("block_length", block_length, *LIMITS["block_length"], integer=True),
                   gen_length=_number("gen_length", gen_length, *LIMITS["gen_length"], integer=True),
                   max_post_steps=_optional("max_post_steps", max_post_steps, *LIMITS["max_post_steps"], True),
                   temperature=_number("temperature", temperature, *LIMITS["temperature"]),
                   seed=_optional("seed", seed, *LIMITS["seed"], integer=True))


def preset_values(presets: dict[str, dict], mode: str) -> dict:
    """The values in force for a UI mode of a model (its presets.json over the official ones)."""
    if mode == "Custom":
        return {}
    from llada.presets import resolve

    cfg = resolve(ENGINE_MODE[mode], presets)
    return {key: getattr(cfg, key) for key in PRESET_KEYS}


def decode_config(pipe, req: Request) -> DecodeConfig:
    """The DecodeConfig of a request: the mode's settings, the request's explicit ones on top."""
    explicit = {"gen_length": req.gen_length, "mbe": req.mbe, "mbe_window": req.mbe_window,
                "temperature": req.temperature, "seed": req.seed}
    optional = {"threshold": req.tau_mask, "editing_threshold": req.tau_edit, "block_length": req.block_length,
                "max_post_steps": req.max_post_steps}
    explicit |= {k: v for k, v in optional.items() if v is not None}
    if not req.edit:
        explicit["editing_threshold"] = None
    return pipe.config(ENGINE_MODE[req.mode], **explicit)


@dataclass(eq=False)
class LiveRun:
    """A run in progress: its Trace (growing) and the iterator that drives the engine."""

    pipe: object
    trace: Trace
    records: Iterator[StepRecord]
    open: bool = True

    def close(self, status: str = "stopped", note: str = "") -> Trace:
        """Stop the engine (if still running) and finish the trace with its text and token names."""
        self.records.close()
        self.open = False
        if self.trace.status == "running":
            self.trace.finish(status, note)
        if self.trace.text is None:
            self.trace.text = self.pipe.decode_text(self.trace.output_ids)
        self.trace.name_tokens(self.pipe.token_texts, self.pipe.token_bytes)
        return self.trace


def _budgeted(stream: Iterator[StepRecord], trace: Trace, budget: Budget) -> Iterator[StepRecord]:
    """The run's records into `trace` until the run ends (done) or its budget cuts it (the trace says why)."""
    bounded = budget.bound(stream)
    yield from trace.follow(bounded)  # closing this closes the engine's generator
    if bounded.cut:
        trace.finish("stopped", bounded.cut)


def start(pipe, req: Request, budget: Budget | None = None) -> LiveRun:
    """A new run of `req` (InputError when the prompt and lengths do not fit the model); starts on first pull.

    `budget` defaults to the module's `BUDGET`, read at each call."""
    budget = budget or BUDGET
    cfg = decode_config(pipe, req)
    ids = pipe.encode(req.prompt)
    try:
        stream = pipe.stream(ids, cfg)  # checks the settings and the prompt now
    except ValueError as err:
        raise InputError(str(err)) from None
    trace = pipe.new_trace(ids, cfg, prompt=req.prompt, mode=req.mode)
    run = LiveRun(pipe, trace, _budgeted(stream, trace, budget))
    with _LIVE_LOCK:
        _LIVE.add(run)
    return run


def drain(run: LiveRun) -> Trace:
    """Run to the end (or the budget); the finished Trace."""
    for _ in run.records:
        pass
    return run.close("done")


def interleave(runs: dict[str, LiveRun]) -> Iterator[tuple[str, StepRecord]]:
    """Step every run in turn, one forward each, until all are done; yields (label, record)."""
    live = dict(runs)
    try:
        while live:
            for label in list(live):
                record = next(live[label].records, None)
                if record is None:
                    live.pop(label).close("done")
                else:
                    yield label, record
    finally:
        for run in runs.values():
            run.close()


class Throttle:
    """True at most once per `interval` seconds (the first call is due unless `wait_first`)."""

    def __init__(self, interval: float, wait_first: bool = False):
        self.interval = interval
        self.last = time.perf_counter() if wait_first else -float("inf")

    def due(self) -> bool:
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            return True
        return False
