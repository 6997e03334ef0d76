"""The decoding modes: one table of official LLaDA2.1 presets, overridden per model, and one rule.

Official values (model card "Best Practices"):

    mode  tau_mask  tau_edit  max_post_steps  block
    S     0.5       0.0       16              32     drafts eagerly, edits repair it (Speedy)
    Q     0.7       0.5       16              32     careful drafting, editing on (Quality)
    M2T   0.95      off       16              32     drafting only, the LLaDA2.0-like baseline

LLaDA2.2 (tech report; its Levenshtein rule also takes `steps`, the schedule of a block's masks):

    mode  tau_mask  tau_edit  steps  max_post_steps  block
    S     0.5       0.0       32     16              32

The report gives S only: on a 2.2 model Q and M2T keep the 2.1 thresholds, with the same 32 steps
(`official("2.2")`). A model's version picks its table (`Pipeline.load` reads it from config.json).

A model directory may ship `presets.json` ({"S": {"threshold": .., ...}, ...}): its modes replace the
official ones key by key (a mode it does not name keeps the official values; it may add modes). A small
model calibrates its own S and Q this way (`python -m llada.eval.calibrate`); the official S and Q stay
one name away in every table as `S_OFFICIAL` and `Q_OFFICIAL`: the model's mode with the official values
laid over it (its other settings, such as EOS early stop, kept), unless presets.json names them itself.

The rule, the same for the command line, the API, the playground and the evaluation: a named mode
sets every setting it names; a setting given explicitly overrides the mode's (`resolve`).
"""

from __future__ import annotations

import json
from pathlib import Path

from .config import DecodeConfig

PRESETS_FILE = "presets.json"
OFFICIAL: dict[str, dict] = {
    "S": {"threshold": 0.5, "editing_threshold": 0.0, "max_post_steps": 16, "block_length": 32},
    "Q": {"threshold": 0.7, "editing_threshold": 0.5, "max_post_steps": 16, "block_length": 32},
    "M2T": {"threshold": 0.95, "editing_threshold": None, "max_post_steps": 16, "block_length": 32},
}
OFFICIAL_ALIASES = {"S_OFFICIAL": "S", "Q_OFFICIAL": "Q"}  # in every table: the official values of S and Q
OFFICIAL_22: dict[str, dict] = {name: values | {"steps": 32} for name, values in OFFICIAL.items()} | {
    "S": {"threshold": 0.5, "editing_threshold": 0.0, "steps": 32, "max_post_steps": 16, "block_length": 32},
}


def official(version: str = "2.1") -> dict[str, dict]:
    """The official table of a model version ("2.1" or "2.2")."""
    if version not in ("2.1", "2.2"):
        raise ValueError(f"unknown model version {version!r}; presets exist for 2.1 and 2.2")
    return OFFICIAL_22 if version == "2.2" else OFFICIAL


class PresetError(ValueError):
    """A presets.json that cannot be used; the message names the file, the mode and the setting."""


def resolve(mode: str, table: dict[str, dict] | None = None, **explicit) -> DecodeConfig:
    """The DecodeConfig of `mode` in `table` (official when None), every `explicit` setting on top.

    Pass only what the user set: `editing_threshold=None` means editing off, not "the mode's value"."""
    table = merged({}) if table is None else table
    key = mode.upper() if isinstance(mode, str) else mode
    if key not in table:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(table)}")
    try:
        return DecodeConfig(**(table[key] | explicit))
    except TypeError as err:
        raise ValueError(f"unknown decode setting ({err})") from None


def merged(own: dict[str, dict], version: str = "2.1") -> dict[str, dict]:
    """The official table of `version` with a model's own modes laid over it, key by key, and the official S
    and Q kept under `OFFICIAL_ALIASES` (the model's mode with the version's official values over it, unless
    `own` names them)."""
    base = official(version)
    table = {name: dict(values) for name, values in base.items()}
    for name, values in own.items():
        table[name.upper()] = table.get(name.upper(), {}) | values
    for alias, mode in OFFICIAL_ALIASES.items():
        table.setdefault(alias, table[mode] | base[mode])
    return table


def load_presets(root: str | Path, version: str = "2.1") -> dict[str, dict]:
    """The presets of a model directory: its presets.json over the official table of its version (PresetError
    if invalid)."""
    path = Path(root) / PRESETS_FILE
    if not path.exists():
        return merged({}, version)
    try:
        own = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PresetError(f"{path}: not valid JSON ({err})") from None
    return check_presets(own, str(path), version)


def check_presets(own, source: str, version: str = "2.1") -> dict[str, dict]:
    """Validate a presets table (every mode must build a DecodeConfig) and merge it over the official one."""
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise PresetError(f'{source}: expected {{"MODE": {{"threshold": .., ...}}, ...}}')
    table = merged(own, version)
    for name in own:
        try:
            DecodeConfig(**table[name.upper()])
        except TypeError as err:
            raise PresetError(f"{source}: mode {name}: unknown setting ({err})") from None
        except ValueError as err:
            raise PresetError(f"{source}: mode {name}: {err}") from None
    return table


def write_presets(own: dict[str, dict], root: str | Path) -> Path:
    """Write a model's own modes as presets.json (validated first)."""
    check_presets(own, PRESETS_FILE)
    path = Path(root) / PRESETS_FILE
    path.write_text(json.dumps(own, indent=2) + "\n", encoding="utf-8")
    return path


def tau_text(tau: float | None, spec: str = "g") -> str:
    """A threshold as people read it: "off" when it is None (editing switched off), else `format(tau, spec)`."""
    return "off" if tau is None else format(tau, spec)
