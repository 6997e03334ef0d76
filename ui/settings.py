"""A run's settings, from widget to engine: checked inputs, the UI's mode label and the engine's DecodeConfig.

`check_request` refuses bad input with an `InputError` that names the field and the allowed values
(shown in `#error`, or as a Gradio error over the API): types are strict (a boolean is a boolean, a
prompt is a string), numbers finite, and a prompt needs visible characters and valid Unicode. What it
returns is one value, `Request(prompt, RunSettings(mode, config))`: the UI's mode label (S, Q, M2T only,
Custom, S (official), Q (official)) and the `DecodeConfig` the engine runs, resolved from the model's
presets. S and Q are the model's own (a small model calibrates them, `llada.eval.calibrate`); S (official)
and Q (official) are the LLaDA2.1 values (`llada.presets.OFFICIAL_ALIASES`), one click away.

Settings follow the engine's one rule (`llada.presets`): a named mode sets the thresholds, a threshold
given explicitly overrides it; Custom is the model's S mode with the thresholds given.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import NamedTuple

from llada.config import DecodeConfig
from llada.presets import load_presets, merged, resolve
from llada.records import Poke, read_poke

MODES = ("S", "Q", "M2T only", "Custom", "S (official)", "Q (official)")
ENGINE_MODE = {"S": "S", "Q": "Q", "M2T only": "M2T", "M2T": "M2T", "Custom": "S",  # UI label -> preset
               "S (official)": "S_OFFICIAL", "Q (official)": "Q_OFFICIAL"}
LIMITS = {"block_length": (4, 128), "gen_length": (8, 1024), "max_post_steps": (0, 64), "mbe_window": (1, 4),
          "temperature": (0.0, 2.0), "seed": (0, 2**31 - 1)}
MAX_PROMPT_CHARS = 8000
MAX_POKES = 64  # more pokes than a run of the longest length has steps to read is not a lesson
PRESET_KEYS = ("threshold", "editing_threshold", "max_post_steps", "block_length")
INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp", "Cs")  # control, format (zero-width), separators, surrogates


class InputError(ValueError):
    """An input the playground refuses; the message says what is allowed."""


class RunSettings(NamedTuple):
    """How one run decodes: the UI's mode label (one of `MODES`) and the engine's settings."""

    mode: str
    config: DecodeConfig


class Request(NamedTuple):
    """A checked request: the prompt, its run's settings and the pokes it carries (`check_pokes`)."""

    prompt: str
    settings: RunSettings
    pokes: tuple[Poke, ...] = ()


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


def check_flag(name: str, value) -> bool:
    """A checkbox's value: true or false, nothing read as either (the string "false" is refused)."""
    return _flag(name, value)


def check_step(value, name: str = "step") -> int:
    """A scrubber's step: a finite whole number from 0 (a step past the last shows the last)."""
    return _number(name, value, 0, 10**9, integer=True)


def check_choice(name: str, value, choices) -> str:
    """One of `choices` (strings), or InputError listing them."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(str, choices))}, got {_shown(value)}")
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


def check_settings(presets: dict[str, dict] | None, mode="S", tau_mask=None, tau_edit=None, edit=True, mbe=False,
                   mbe_window=1, block_length=None, gen_length=128, max_post_steps=None, temperature=0.0,
                   seed=None) -> RunSettings:
    """The settings of a model with `presets` (None: the official ones), or InputError naming the first bad
    input. None for tau_mask, tau_edit, block_length or max_post_steps means the mode's value; edit False
    switches editing (T2T) off whatever tau_edit says."""
    if not isinstance(mode, str) or mode not in ENGINE_MODE:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {_shown(mode)}")
    explicit = {"threshold": _optional("tau_mask", tau_mask, 0.0, 1.0),
                "editing_threshold": _optional("tau_edit", tau_edit, 0.0, 1.0)}
    edit, mbe = _flag("edit", edit), _flag("mbe", mbe)
    explicit |= {"mbe_window": _number("mbe_window", mbe_window, *LIMITS["mbe_window"], integer=True),
                 "block_length": _optional("block_length", block_length, *LIMITS["block_length"], integer=True),
                 "gen_length": _number("gen_length", gen_length, *LIMITS["gen_length"], integer=True),
                 "max_post_steps": _optional("max_post_steps", max_post_steps, *LIMITS["max_post_steps"], True),
                 "temperature": _number("temperature", temperature, *LIMITS["temperature"]),
                 "seed": _optional("seed", seed, *LIMITS["seed"], integer=True)}
    explicit = {k: v for k, v in explicit.items() if v is not None or k == "seed"} | {"mbe": mbe}
    if not edit:
        explicit["editing_threshold"] = None
    try:
        return RunSettings(mode, resolve(ENGINE_MODE[mode], presets, **explicit))
    except ValueError as err:
        raise InputError(str(err)) from None


def check_request(presets: dict[str, dict] | None, prompt, mode="S", **settings) -> Request:
    """A checked Request (the prompt first, then `check_settings`), or InputError."""
    return Request(check_prompt(prompt), check_settings(presets, mode, **settings))


def check_pokes(pokes, token_of) -> tuple[Poke, ...]:
    """Pokes as a caller sends them (null or a list of `STEP:POS:TOKEN` texts or {step, pos, token} objects,
    read by `llada.records.read_poke` with `token_of`), or InputError naming the bad one. Whether each fits
    the run (a step from 1, a position in the generated region) is checked when the run starts."""
    if pokes is None:
        return ()
    if not isinstance(pokes, (list, tuple)):
        raise InputError(f'pokes must be a list of "STEP:POS:TOKEN" texts or {{step, pos, token}} objects, '
                         f"got {_shown(pokes)}")
    if len(pokes) > MAX_POKES:
        raise InputError(f"at most {MAX_POKES} pokes per run, got {len(pokes)}")
    out = []
    for i, spec in enumerate(pokes):
        try:
            out.append(read_poke(spec, token_of))
        except ValueError as err:
            raise InputError(f"pokes[{i}] {_shown(spec)}: {err}") from None
    return tuple(out)


def presets_of(model_path: str | Path | None) -> dict[str, dict]:
    """The presets of a model directory (its presets.json over the official ones of its version, 2.1 or 2.2,
    from config.json), read without loading it."""
    if not model_path:
        return merged({})
    from llada.weights.checkpoint import read_config

    return load_presets(Path(model_path), read_config(Path(model_path))[0].version)


def preset_values(presets: dict[str, dict], mode: str) -> dict:
    """The values in force for a UI mode of a model (its presets.json over the official ones)."""
    if mode == "Custom":
        return {}
    cfg = resolve(ENGINE_MODE[mode], presets)
    return {key: getattr(cfg, key) for key in PRESET_KEYS}
