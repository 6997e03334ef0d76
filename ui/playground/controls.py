"""The playground's controls: the prompt bar, the mode row, the examples and the settings column.

A named mode sets the sliders to the model's preset (thresholds, post steps, block length) when the
user picks it; moving a threshold makes the mode Custom. Slider ranges are what the model accepts:
the generation length stops where prompt and generation no longer fit its positions, and a value typed
beyond a slider's range is not silently clamped: the page says what happened (assets/page.js).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from llada.presets import tau_text

from .. import ASSETS, pace, runs
from ..frame import DECODE_CONCURRENCY
from ..knows import knows
from ..settings import LIMITS, MODES, InputError, check_choice, check_step, preset_values, presets_of

EXAMPLE_INPUTS = ("prompt", "mode", "mbe", "block_length", "gen_length")
EXAMPLE_SETS = (*EXAMPLE_INPUTS, "model")  # what a click sets: the inputs and the model the example names


def examples(path: Path = ASSETS / "examples.json") -> list[dict]:
    """Example runs: {label, prompt, mode, mbe, block_length, gen_length} each (assets/examples.json), and
    optionally `model`, a model directory relative to the repository (`assets/model22`); without it the
    example runs on the embedded model."""
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def example_model(example: dict) -> str:
    """The resolved directory of the model an example runs on (the model selector's value for it)."""
    return str((ASSETS.parent / example.get("model", "assets/model")).resolve())


def presets_note(model_path: str | None) -> str:
    """The values of the named modes; the official S and Q only when the model's own differ from them."""
    presets = presets_of(model_path)

    def row(mode: str) -> str:
        v = preset_values(presets, mode)
        return (f"**{mode}** τ_mask {v['threshold']:.2f} · τ_edit {tau_text(v['editing_threshold'], '.2f')} · "
                f"block {v['block_length']}")

    note = "Presets of this model: " + " · ".join(row(mode) for mode in ("S", "Q", "M2T only"))
    own = [m for m in ("S", "Q") if preset_values(presets, m) != preset_values(presets, f"{m} (official)")]
    if own:
        note += ("  \nCalibrated for this model (its card says why); the LLaDA2.1 values: "
                 + " · ".join(row(f"{m} (official)") for m in own))
    return note


def knows_note(model_path: str | None) -> str:
    """The line on what the chosen model knows (its model_info.json, else its model card)."""
    return f"**What this model knows:** {knows(model_path).line}"


def apply_mode(model_path, mode, with_block: bool = True) -> tuple:
    """Slider values of a preset: tau_mask, edit, tau_edit, max_post_steps, block_length (skips for Custom)."""
    if check_choice("mode", mode, MODES) == "Custom":
        return (gr.skip(),) * 5
    v = preset_values(presets_of(model_path), mode)
    off = v["editing_threshold"] is None
    block = v["block_length"] if with_block else gr.skip()
    return v["threshold"], not off, gr.skip() if off else v["editing_threshold"], v["max_post_steps"], block


def gen_limit(model_path: str | None, block_max: int = LIMITS["block_length"][1]) -> int:
    """The longest generation the model takes after a short prompt (its positions, less one large block)."""
    try:
        raw = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8")) if model_path else {}
        positions = int(raw.get("max_position_embeddings", 32768))
    except (OSError, ValueError, TypeError):
        positions = 32768
    return max(LIMITS["gen_length"][0], min(LIMITS["gen_length"][1], positions - block_max))


@dataclass
class PromptBar:
    """What a first visit needs above the fold: the prompt, Generate, Stop, Compare and the mode row."""

    prompt: gr.Textbox
    generate: gr.Button
    stop: gr.Button
    compare: gr.Button
    mode: gr.Radio
    mbe: gr.Checkbox
    teach: gr.Checkbox  # replay slowly after each run


@dataclass
class Settings:
    """The settings column: model, thresholds, lengths, the folded rest, and ghost."""

    model: gr.Dropdown
    presets: gr.Markdown  # the model's presets, one line
    tau_mask: gr.Slider
    edit: gr.Checkbox  # editing (T2T) on
    tau_edit: gr.Slider
    block_length: gr.Slider
    gen_length: gr.Slider
    mbe_window: gr.Slider
    max_post_steps: gr.Slider
    temperature: gr.Slider
    seed: gr.Number
    ghost: gr.Checkbox


@dataclass
class Controls(Settings, PromptBar):
    """Every control of the tab, by the names a run's inputs have (`generate_ui`'s), and the model's note."""

    knows: gr.Markdown  # what the chosen model knows

    @classmethod
    def of(cls, knows: gr.Markdown, bar: PromptBar, settings: Settings) -> Controls:
        return cls(knows=knows, **vars(bar), **vars(settings))


def prompt_bar() -> PromptBar:
    """Prompt, Generate and Stop, then the mode row."""
    with gr.Row(equal_height=True):
        prompt = gr.Textbox(label="Prompt (Ctrl+Enter or ⌘+Enter runs it)", lines=2, max_lines=8,
                            elem_id="prompt", placeholder="176+771=", scale=5, min_width=300)
        with gr.Column(scale=1, min_width=140):
            generate = gr.Button("Generate", variant="primary", elem_id="generate")
            stop = gr.Button("Stop", elem_id="stop")
            compare = gr.Button("Compare S vs Q", elem_id="run-compare", size="sm")
    with gr.Row(equal_height=True):
        mode = gr.Radio(list(MODES), value="S", label="Mode", elem_id="mode", scale=3, min_width=300)
        mbe = gr.Checkbox(value=False, label="Multi-Block Editing (MBE)", elem_id="mbe", scale=1, min_width=220)
        teach = gr.Checkbox(value=True, label="replay slowly after each run", elem_id="teach", scale=1,
                            min_width=220)
    return PromptBar(prompt, generate, stop, compare, mode, mbe, teach)


def example_list(controls: Controls) -> gr.Dataset:
    """The examples as a dataset of labels; a click sends its index (`example_values` reads it)."""
    items = examples()
    rows = [[e[k] for k in EXAMPLE_INPUTS] for e in items]
    return gr.Dataset(components=[getattr(controls, k) for k in EXAMPLE_INPUTS], samples=rows, type="index",
                      sample_labels=[e["label"] for e in items], label="Examples: click one to run it",
                      elem_id="examples", samples_per_page=6)


def example_values(index) -> tuple:
    """The values an example sets (EXAMPLE_SETS: its inputs, then its model), by its index; InputError for an
    index that is none."""
    items = examples()
    try:
        k = check_step(index, "example index")
    except InputError:
        k = -1
    if not 0 <= k < len(items):  # the message gives the real range, never the scrubbers' generic bound
        raise InputError(f"example index must be a whole number from 0 to {len(items) - 1}, got {index!r}")
    return (*(items[k][name] for name in EXAMPLE_INPUTS), example_model(items[k]))


def wait_note(budget=None, slow=None) -> str:
    """What a visitor waits for when the decode slots are busy (ui/frame.py `DECODE_CONCURRENCY`); with `slow`
    (a `ui.pace.SlowBudget`, where a slow model is offered) what a run on a slow model may take."""
    budget = budget or runs.BUDGET
    note = (f"{DECODE_CONCURRENCY} requests decode at once; while both are busy, a new one waits in the queue (the "
            f"run's outputs show its place in the queue and the seconds waited) until one of them ends: at most "
            f"{budget.seconds:g} s when no other request is waiting ahead of it.")
    if slow is None:
        return note
    return (f"{note} A model that takes {slow.from_seconds:g} s or more per forward (measured on its first run) "
            f"may use {slow.forwards} forwards and up to {slow.most_seconds:g} s per run instead, and a wait as long.")


def maybe_slow(models) -> bool:
    """Is a model offered that may take seconds per forward (on the CPU, one too large for fp32: `ui.models`)?"""
    return models.rt.kind == "cpu" and any(str(m.dtype) != "torch.float32" for m in models.offered)


def settings(models) -> Settings:
    """The settings column: model, thresholds, lengths, and the rest folded away."""
    model = gr.Dropdown(models.choices(), value=models.default, label="Model", elem_id="model",
                        info=models.note() or None)  # why a candidate is not offered
    presets = gr.Markdown(presets_note(models.default), elem_id="presets")
    s = preset_values(presets_of(models.default), "S")
    tau_mask = gr.Slider(0, 1, value=s["threshold"], step=0.01, label="τ_mask: draft a mask when p > τ_mask (M2T)",
                         elem_id="tau-mask")
    edit = gr.Checkbox(value=True, label="editing (T2T) on", elem_id="edit-on")
    tau_edit = gr.Slider(0, 1, value=s["editing_threshold"] or 0.0, step=0.01,
                         label="τ_edit: edit a token when p > τ_edit (T2T)", elem_id="tau-edit")
    block_length = gr.Slider(*LIMITS["block_length"], value=s["block_length"], step=4, label="block length",
                             elem_id="block-length")
    top = gen_limit(models.default)
    gen_length = gr.Slider(LIMITS["gen_length"][0], top, value=min(128, top), step=8, label="generation length",
                           elem_id="gen-length")
    mbe_window = gr.Slider(*LIMITS["mbe_window"], value=1, step=1, label="MBE window (finished blocks kept "
                           "editable)", elem_id="mbe-window")
    with gr.Accordion("More settings", open=False):
        max_post_steps = gr.Slider(*LIMITS["max_post_steps"], value=s["max_post_steps"], step=1,
                                   label="max post steps (mask-free steps per block)", elem_id="max-post-steps")
        temperature = gr.Slider(*LIMITS["temperature"], value=0.0, step=0.05, label="temperature (0 = greedy)",
                                elem_id="temperature")
        seed = gr.Number(value=0, precision=0, label="seed", elem_id="seed")
    ghost = gr.Checkbox(value=False, label="ghost: show the model's current guess inside masks", elem_id="ghost")
    waits = wait_note(slow=pace.SLOW if maybe_slow(models) else None)
    gr.Markdown(f"Each request may use {runs.BUDGET.describe()}; a run that reaches it stops and keeps what it wrote. "
                f"{waits} This tab keeps its last run for an hour.", elem_id="budget-note")
    return Settings(model, presets, tau_mask, edit, tau_edit, block_length, gen_length, mbe_window, max_post_steps,
                    temperature, seed, ghost)
