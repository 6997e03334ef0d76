"""Poke the canvas (ui/playground/poke.py): the poke a visitor asks for, every bad one refused in words, the
re-run equal to the engine's own run with the same pokes, the canvas and edit log marking pokes."""

from __future__ import annotations

import random

import pytest

from llada.records import Poke
from test_canvas import assert_patches_rebuild_every_step
from ui.models import Models
from ui.playground.poke import HOWS, earlier_pokes, poke_of, poke_ui, random_token
from ui.playground.run import generate_ui
from ui.render import canvas, narrate, tables
from ui.settings import InputError

PROMPT = "def add(a, b):"
PAGE = {"mode": "Q", "tau_mask": 0.7, "edit": True, "tau_edit": 0.5, "mbe": False, "mbe_window": 1,
        "block_length": 8, "gen_length": 16, "max_post_steps": 16, "temperature": 0.0, "seed": 0, "ghost": False}


@pytest.fixture(scope="module")
def models(tiny_model_dir) -> Models:
    return Models([str(tiny_model_dir)])


@pytest.fixture(scope="module")
def finished(models):
    """A finished playground run of this page (its last frame's trace)."""
    return list(generate_ui(models, prompt=PROMPT, **PAGE))[-1].trace


def _poke(models, trace, step, pos, how="mask it", token="", model=None):
    return list(poke_ui(models, trace, model, step, pos, how, token, False))


def test_a_poke_reruns_the_run_with_it_as_the_engine_would(models, finished):
    pipe, P = models.get(None), finished.prompt_length
    frames = _poke(models, finished, 3, P + 1, "replace with", "#9")
    rerun = frames[-1].trace
    alone = pipe.generate(pipe.encode(PROMPT), finished.settings, pokes=[Poke(3, 1, 9)])
    assert frames[-1].error == "" and rerun is not finished and rerun.status == "done"
    assert rerun.output_ids == alone.output_ids and rerun.poke_list() == alone.poke_list()
    assert finished.pokes == []  # the run poked stays as it was: the re-run is a new trace
    again = _poke(models, rerun, rerun.steps, P + 2)[-1].trace  # pokes add up: the earlier one is kept
    assert [(k, p.pos - P, p.token) for k, p in again.pokes][0] == (3, 1, 9) and len(again.pokes) == 2
    assert again.pokes[1][1][:2] == (P + 2, pipe.mask_id)


def test_the_canvas_and_the_edit_log_mark_pokes(models, finished):
    P = finished.prompt_length
    trace = _poke(models, finished, 2, P, "replace with", "#9")[-1].trace
    poked_cell = f'data-pos="{P}" data-block="{P // trace.block_length}" data-state="poke"'
    assert poked_cell in canvas.render(trace, 2) and 'class="tok poked"' in canvas.render(trace, 2)
    assert "poked after step 2" in canvas.render(trace, 2) and "poked after it" in canvas.render(trace, 2)
    assert f'data-pos="{P}"' in canvas.render(trace, 1) and poked_cell not in canvas.render(trace, 1)
    later = canvas.render(trace, trace.steps)
    assert 'data-state="poke" title' not in later and f'class="tok poked" data-pos="{P}"' in later  # still marked
    assert '<span class="key" data-state="poke">' in later  # in the legend
    log = tables.edit_log(trace)
    want = [[2, P, narrate.visible(canvas.text(trace, 9))]]  # the token's text, spaces shown
    assert log[log.kind == "poke"][["step", "position", "new"]].values.tolist() == want
    assert_patches_rebuild_every_step(trace)  # the live view and the replay draw the same marks


def test_what_to_write(models, finished):
    pipe, P = models.get(None), finished.prompt_length
    rng = random.Random(0)
    assert poke_of(pipe, finished, 2, P + 3, "mask it", "", rng) == Poke(2, 3, pipe.mask_id)
    assert poke_of(pipe, finished, 2, float(P), "replace with", "#7", rng) == Poke(2, 0, 7)
    old = finished.tokens_at(2)[P]
    drawn = {poke_of(pipe, finished, 2, P, "corrupt at random", "", rng).token for _ in range(200)}
    special = {pipe.mask_id, pipe.eos_id, old, *pipe.model.config.stop_token_ids}
    assert len(drawn) > 50 and not drawn & special
    assert random_token(pipe, old, random.Random(1)) == random_token(pipe, old, random.Random(1))
    assert set(HOWS) == {"mask it", "corrupt at random", "replace with"}
    with pytest.raises(InputError, match="only a LLaDA2.2 run"):
        poke_of(pipe, finished, 2, P, "delete it", "", rng)


@pytest.mark.parametrize("step, pos, how, token, message", [
    (0, 0, "mask it", "", "step 1 or later"), (2, None, "mask it", "", "tap a token"),
    (2, -1, "mask it", "", "a prompt token"), (2, 10_000, "mask it", "", "past the generated region"),
    (2, 1.5, "mask it", "", "whole number"), (2, "", "replace with", "", "type the replacement"),
    (2, "", "replace with", "hello world, twice over", "not one"), (2, "", "replace with", "#99999", "unknown")])
def test_a_bad_poke_is_refused_in_words(models, finished, step, pos, how, token, message):
    pos = finished.prompt_length if pos == "" else pos
    pos = pos + finished.prompt_length if pos == -1 else pos
    with pytest.raises(InputError, match=message):
        poke_of(models.get(None), finished, step, pos, how, token, random.Random(0))


def test_a_refused_poke_is_said_and_leaves_the_run(models, finished):
    for trace, how, message in [(None, "mask it", "run the model first"), (finished, "burn it", "write there"),
                                (finished, "mask it", "a prompt token")]:
        frames = _poke(models, trace, 2, 0, how)
        assert len(frames) == 1 and message in frames[0].error
        assert all(getattr(frames[0], name) is not None for name in ("canvas", "trace"))  # skips: left as it was
    running = type(finished).from_dict(finished.to_dict())
    running.status = "running"
    assert "still decoding" in _poke(models, running, 2, finished.prompt_length)[0].error
    elsewhere = _poke(models, finished, 2, finished.prompt_length, model="/nowhere")[0].error
    assert "unknown model" in elsewhere


def test_earlier_pokes_are_asked_again_at_their_steps(models, finished):
    P = finished.prompt_length
    trace = _poke(models, finished, 2, P + 4)[-1].trace
    assert earlier_pokes(trace) == [Poke(2, 4, models.get(None).mask_id)]
