"""Requests of the playground: checked inputs, the decode settings they mean, and recorded runs.

`check_request` refuses bad input with a short `InputError` (shown in `#error`, or as a Gradio error
over the API). `record` runs the engine's generator and yields the growing Trace after every forward;
`record_pair` interleaves two runs forward by forward, so S and Q share one timeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

from llada.decode import DecodeConfig

from .trace import Recorder, Trace, new_trace

MODES = ("S", "Q", "M2T only", "Custom")
LIMITS = {"block_length": (4, 128), "gen_length": (8, 1024), "max_post_steps": (0, 64), "mbe_window": (1, 4),
          "temperature": (0.0, 2.0), "seed": (0, 2**31 - 1)}
MAX_PROMPT_CHARS = 8000
PRESET_KEYS = ("threshold", "editing_threshold", "max_post_steps", "block_length")


class InputError(ValueError):
    """An input the playground refuses; the message says what is allowed."""


@dataclass(frozen=True)
class Request:
    prompt: str
    mode: str = "S"
    tau_mask: float = 0.5
    tau_edit: float | None = 0.0  # None = editing off
    mbe: bool = False
    mbe_window: int = 1
    block_length: int = 32
    gen_length: int = 128
    max_post_steps: int | None = None  # None = the mode's value
    temperature: float = 0.0
    seed: int | None = None


def _number(name: str, value, low: float, high: float, integer: bool = False) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InputError(f"{name} must be a number, got {value!r}")
    if integer and value != int(value):
        raise InputError(f"{name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise InputError(f"{name} must be between {low} and {high}, got {value!r}")
    return int(value) if integer else float(value)


def check_request(prompt, mode="S", tau_mask=0.5, tau_edit=0.0, mbe=False, mbe_window=1, block_length=32,
                  gen_length=128, max_post_steps=None, temperature=0.0, seed=None) -> Request:
    """A validated Request, or InputError naming the first bad input."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type something for the model to continue")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt is too long ({len(prompt)} characters; at most {MAX_PROMPT_CHARS})")
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    ints = {name: _number(name, value, *LIMITS[name], integer=True) for name, value in
            (("block_length", block_length), ("gen_length", gen_length), ("mbe_window", mbe_window))}
    if max_post_steps is not None:
        ints["max_post_steps"] = _number("max_post_steps", max_post_steps, *LIMITS["max_post_steps"], integer=True)
    if seed not in (None, ""):
        ints["seed"] = _number("seed", seed, *LIMITS["seed"], integer=True)
    return Request(prompt=prompt, mode=mode, tau_mask=_number("tau_mask", tau_mask, 0.0, 1.0),
                   tau_edit=None if tau_edit is None else _number("tau_edit", tau_edit, 0.0, 1.0), mbe=bool(mbe),
                   temperature=_number("temperature", temperature, *LIMITS["temperature"]), **ints)


def preset_values(presets: dict[str, dict], mode: str) -> dict:
    """The values in force for a preset of a model (its presets.json over the official ones)."""
    if mode == "Custom":
        return {}
    cfg = DecodeConfig.preset(mode, presets)
    return {key: getattr(cfg, key) for key in PRESET_KEYS}


def decode_config(pipe, req: Request) -> DecodeConfig:
    """The DecodeConfig of a request: the mode's thresholds (sliders for Custom) and the run's lengths."""
    overrides = {"block_length": req.block_length, "gen_length": req.gen_length, "mbe": req.mbe,
                 "mbe_window": req.mbe_window, "temperature": req.temperature, "seed": req.seed}
    if req.max_post_steps is not None:
        overrides["max_post_steps"] = req.max_post_steps
    if req.mode == "Custom":  # the model's S settings (post steps, EOS stop) with the sliders' thresholds
        overrides |= {"threshold": req.tau_mask, "editing_threshold": req.tau_edit}
        return pipe.config("S", **overrides)
    return pipe.config(req.mode, **overrides)


def prepare(pipe, req: Request) -> tuple[list[int], DecodeConfig]:
    """Prompt ids and settings; InputError when the prompt and lengths do not fit the model."""
    cfg = decode_config(pipe, req)
    ids = pipe.encode(req.prompt)
    B = cfg.block_length
    total = -(-(len(ids) + cfg.gen_length) // B) * B
    limit = pipe.model.config.max_position_embeddings
    if total > limit:
        raise InputError(f"the prompt ({len(ids)} tokens) plus gen_length {cfg.gen_length}, padded to blocks of {B}, "
                         f"needs {total} positions; this model allows {limit}")
    return ids, cfg


def record(pipe, req: Request) -> tuple[Recorder, Iterator[dict]]:
    """A recorder of a new run of `req` and the iterator of its records (the engine starts on first next)."""
    ids, cfg = prepare(pipe, req)
    recorder = Recorder(new_trace(pipe, req.prompt, ids, cfg, req.mode), pipe.token_texts)
    return recorder, recorder.drain(pipe.stream(ids, cfg))


def record_pair(runs: dict[str, Iterator[dict]]) -> Iterator[tuple[str, dict]]:
    """Step every run in turn, one forward each, until all are done; yields (label, record)."""
    live = dict(runs)
    try:
        while live:
            for label in list(live):
                item = next(live[label], None)
                if item is None:
                    del live[label]
                else:
                    yield label, item
    finally:
        for it in runs.values():
            it.close()


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


def finish(recorder: Recorder, pipe, complete: bool = True) -> Trace:
    if recorder.trace.result is None:
        recorder.finish(pipe.decode_text, complete=complete)
    return recorder.trace
