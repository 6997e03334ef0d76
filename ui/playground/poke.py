"""Poke the canvas: change a token of a finished (or stopped) run and watch the model decode around it.

A visitor taps a token of the canvas (assets/tokens.js writes its position into `#poke-pos`), picks what
to write there (`HOWS`: a mask, a random token, or a token typed in) and presses **poke and re-run**. The
run is decoded again from the same prompt with the same settings and model, with the poke applied after
the step the scrubber shows (`llada.trace.Poke`; a poke at the last step re-opens the block it touches),
the run's earlier pokes kept, so pokes add up. Everything it reads is this session's (its Trace in
gr.State and the widgets' values): a visitor's poke never reaches another visitor's run. The canvas marks
poked cells (`poke` state, `poked` class: ui/render/canvas.py) and the edit log lists the pokes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import gradio as gr

from llada.decide import levenshtein_of
from llada.records import Poke
from llada.trace import Trace

from ..frame import frame, problem
from ..knows import knows, scope_hint
from ..runs import start
from ..settings import InputError, Request, RunSettings, check_choice, check_flag, check_step
from .run import RunFrame, stream_frames

HOWS = ("mask it", "corrupt at random", "replace with")
MOVES = {"delete it": "delete", "insert a mask before it": "insert"}  # LLaDA2.2 runs only (its rule's moves)
HOWS_22 = HOWS + tuple(MOVES)
HELP = ("**Poke the canvas.** After a run (or scrubbed back to a step), tap a token, pick what to write there and "
        "press **poke and re-run**: the run decodes again with your poke after the step shown, and you see whether "
        "and when the model edits it back.")


@dataclass
class PokeView:
    """The poke controls under the canvas: the tapped position, what to write, the button."""

    pos: gr.Number
    how: gr.Radio
    token: gr.Textbox
    run: gr.Button


def poke_view() -> PokeView:
    """The poke controls (call inside the run view's column)."""
    with gr.Accordion("Poke a token and re-run", open=True, elem_id="poke-box"):
        gr.Markdown(HELP)
        with gr.Row(equal_height=True):
            pos = gr.Number(None, label="position (tap a token on the canvas)", precision=0, elem_id="poke-pos",
                            min_width=120)
            how = gr.Radio(list(HOWS_22), value=HOWS[0], label="write there", elem_id="poke-how", min_width=220,
                           info="delete it / insert a mask before it: LLaDA2.2 runs only")
            token = gr.Textbox("", label="replacement token (for replace with)", elem_id="poke-token",
                               placeholder="a token's text, or #ID", min_width=160)
        run = gr.Button("poke and re-run", elem_id="poke-run", variant="secondary", size="sm")
    return PokeView(pos, how, token, run)


def poke_of(pipe, trace: Trace, step: int, pos, how: str, token, rng: random.Random) -> Poke:
    """The poke a visitor asks for: after `step` (the step shown), at canvas position `pos` (counted from the
    prompt's first token, as the canvas numbers cells), writing a mask, a random token or `token` (a token's
    text or #ID, read by `pipe.poke_token`). InputError saying what to do instead."""
    if step < 1:
        raise InputError("scrub to step 1 or later first: a poke applies after a decode forward")
    if pos is None:
        raise InputError("tap a token of the canvas first (its position goes into the poke's position box)")
    if isinstance(pos, bool) or not isinstance(pos, (int, float)) or pos != int(pos):
        raise InputError(f"the poke's position must be a whole number, got {pos!r}")
    offset = int(pos) - trace.prompt_length
    if not 0 <= offset < trace.gen_length:
        where = "a prompt token" if offset < 0 else "past the generated region"
        raise InputError(f"position {int(pos)} is {where}: poke a generated token "
                         f"(positions {trace.prompt_length} to {trace.prompt_length + trace.gen_length - 1})")
    if how == "mask it":
        return Poke(step, offset, trace.mask_id)
    if how in MOVES:
        if levenshtein_of(pipe.model.config, trace.settings, trace.mask_id) is None:
            raise InputError(f"{how}: only a LLaDA2.2 run (its Levenshtein rule) deletes and inserts; this run "
                             f"follows the 2.1 rule: mask it or replace it instead")
        return Poke(step, offset, trace.mask_id, MOVES[how])
    if how == "corrupt at random":
        return Poke(step, offset, random_token(pipe, trace.tokens_at(step)[int(pos)], rng))
    if not isinstance(token, str) or not token.strip():
        raise InputError("type the replacement token (its text, or #ID) or pick mask it / corrupt at random")
    try:
        return Poke(step, offset, pipe.poke_token(token))
    except ValueError as err:
        raise InputError(str(err)) from None


def random_token(pipe, old: int, rng: random.Random) -> int:
    """A token drawn uniformly from the vocabulary, never a special one (mask, EOS, a stop) nor `old`."""
    special = {pipe.mask_id, pipe.eos_id, old, *pipe.model.config.stop_token_ids}
    vocab = pipe.model.config.vocab_size
    while (token := rng.randrange(vocab)) in special:
        pass
    return token


def earlier_pokes(trace: Trace) -> list[Poke]:
    """The run's own pokes, as asked again (each at the step it followed), so a new poke adds to them."""
    return [Poke(step, p.pos - trace.prompt_length, p.token, p.kind) for step, p in trace.pokes]


def poke_ui(models, trace: Trace | None, model, step, pos, how, token, ghost):
    """Re-run this session's run with one more poke; streams `RunFrame`s as a run does. `model` is the picked
    model's path (the run's own, or the poke is refused). A refused poke is said in #error and leaves the run on
    screen as it was."""
    try:
        ghost, step, how = check_flag("ghost", ghost), check_step(step), check_choice("write there", how, HOWS_22)
        if trace is None:
            raise InputError("run the model first: a poke changes a run's text")
        if trace.status == "running":
            raise InputError("the run is still decoding: wait for it to finish (or press Stop), then poke")
        model = models.checked_path(model)
        pipe = models.get(model)
        if pipe.name != trace.model:
            raise InputError(f"this run was decoded by {trace.model}: pick that model again to poke it")
        poke = poke_of(pipe, trace, min(step, trace.steps), pos, how, token, random.Random())
        settings = RunSettings(trace.mode or "Custom", trace.settings)
        run = start(pipe, Request(trace.prompt, settings, (*earlier_pokes(trace), poke)))
    except Exception as err:  # noqa: BLE001 - refused or failed: told in #error, the run left on screen
        yield frame(RunFrame, error=problem(err).html)
        return
    yield from stream_frames(run, ghost, scope_hint(trace.prompt, knows(model or models.default)))
