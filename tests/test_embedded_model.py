"""The shipped model in assets/model: size, MoE shape, presets, and that it loads and generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llada.pipeline import Pipeline

MODEL = Path(__file__).resolve().parents[1] / "assets" / "model"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.load(MODEL)


def test_checkpoint_is_small_and_a_real_moe(pipe):
    assert sum(f.stat().st_size for f in MODEL.glob("*.safetensors")) <= 25 * 2**20
    cfg = pipe.model.config
    assert cfg.num_experts >= 8 and 1 < cfg.n_group and cfg.topk_group < cfg.n_group
    assert cfg.num_shared_experts >= 1 and cfg.first_k_dense_replace == 1


def test_presets_are_the_models_own(pipe):
    """Each mode decodes with the settings of assets/model/presets.json (its EOS early stop is not the official
    table's)."""
    shipped = json.loads((MODEL / "presets.json").read_text())
    assert set(shipped) == {"S", "Q", "M2T"}
    for mode, settings in shipped.items():
        cfg = pipe.config(mode)
        assert {key: getattr(cfg, key) for key in settings} == settings, mode
    assert pipe.config("M2T").editing_threshold is None
    assert pipe.config("S").threshold < pipe.config("Q").threshold


def test_s_drafts_at_least_one_and_a_half_times_as_fast_as_q_on_code(pipe):
    """The shipped S and Q show the paper's trade-off (the card's "Calibrated presets"): on a few function
    openings S writes at least 1.5x Q's tokens per forward (cache refreshes counted). A retrained model whose S
    drafts no faster than its Q fails here: calibrate it (python -m llada.eval.calibrate --write)."""
    from llada.eval.harness import CODE_PROMPTS

    tpf = {}
    for mode in ("S", "Q"):
        runs = [pipe.generate(pipe.encode(p), pipe.config(mode, gen_length=128)) for p in CODE_PROMPTS]
        tpf[mode] = sum(len(r.output_ids) for r in runs) / sum(r.forwards for r in runs)
    assert tpf["S"] >= 1.5 * tpf["Q"], tpf


def test_generates_code_and_stops(pipe):
    prompt = pipe.encode("def fibonacci(n):\n")
    result = pipe.generate(prompt, pipe.config("Q", gen_length=64))  # the calibrated S writes on to the next block
    text = pipe.decode_text(result.output_ids)
    assert result.output_ids and text.strip()
    assert result.num_decode_forwards < 64  # drafting fills several tokens per forward
    # it stops: an EOS ends the answer inside the first block of 32, and the preset's EOS early stop decodes no
    # block after it (the same run without the early stop goes on to the second block)
    assert pipe.eos_id in result.output_ids and len(result.output_ids) <= 32
    full = pipe.generate(prompt, pipe.config("Q", gen_length=64, eos_early_stop=False))
    assert full.output_ids == result.output_ids and result.num_decode_forwards < full.num_decode_forwards


def test_a_function_opening_gets_a_body_that_parses(pipe):
    import ast

    prompt = "def is_prime(n):\n"  # with the official S (τ_mask 0.5): the calibrated S trades such bodies for speed
    result = pipe.generate(pipe.encode(prompt), pipe.config("S_OFFICIAL", gen_length=64))
    body = ast.parse(prompt + pipe.decode_text(result.output_ids)).body[0].body  # SyntaxError if it does not parse
    assert body and isinstance(body[0], ast.stmt)


def test_solves_held_out_items(pipe):
    from llada.eval.harness import mode_config, score_item
    from llada.data.tasks import eval_items

    items = eval_items("sort", 3, seed=0) + eval_items("reverse", 3, seed=0)  # 100% in the model card
    assert sum(score_item(pipe, item, mode_config(pipe, "Q", 32)).correct for item in items) >= 5
