"""The shipped LLaDA2.2-format model (assets/model22) loads as 2.2, and on its examples it moves tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llada.pipeline import Pipeline
from ui.learn.record import RunSpec, run_trace
from ui.playground.controls import example_model, examples

ROOT = Path(__file__).resolve().parents[1]
MODEL22 = ROOT / "assets" / "model22"


@pytest.fixture(scope="module")
def pipe():
    return Pipeline.load(MODEL22)


def test_it_loads_as_llada_2_2(pipe):
    cfg = pipe.model.config
    raw = json.loads((MODEL22 / "config.json").read_text())
    assert cfg.version == "2.2" and raw["expert_capacity"] == cfg.expert_capacity > 0
    assert (cfg.delete_token_id, cfg.split_token_id) == (raw["delete_token_id"], raw["split_token_id"])
    added = {t["content"]: t["id"] for t in json.loads((MODEL22 / "tokenizer.json").read_text())["added_tokens"]}
    assert (added["<|delete|>"], added["<|split|>"]) == (cfg.delete_token_id, cfg.split_token_id)
    assert set(json.loads((MODEL22 / "presets.json").read_text())) >= {"S", "Q"}
    size = sum(f.stat().st_size for f in MODEL22.glob("*.safetensors"))
    assert size < 10 * 2**20, f"the shipped weights are {size / 2**20:.1f} MiB: keep assets/model22 small"


def test_its_examples_name_it_and_one_moves_tokens(pipe):
    """At least two examples run on it; the first one's run inserts or deletes (greedy: the same every time)."""
    mine = [e for e in examples() if example_model(e) == str(MODEL22.resolve())]
    assert len(mine) >= 2, "assets/examples.json should name assets/model22 in two examples or more"
    e = mine[0]
    trace = run_trace(pipe, e["prompt"], RunSpec(e["mode"], mbe=e["mbe"], block_length=e["block_length"]),
                      e["gen_length"])
    assert trace.inserts + trace.deletes >= 1, [r.to_dict() for r in trace.records]


def test_the_app_offers_it_and_its_examples_pick_it():
    """The playground's candidates hold it right after the embedded model; a click on one of its examples
    sets the model selector to it (and an example naming no model, to the embedded one)."""
    from ui.models import DEFAULT_MODEL, model_dirs
    from ui.playground.controls import example_values

    dirs = model_dirs([], env="")
    assert dirs[:2] == [str(DEFAULT_MODEL.resolve()), str(MODEL22.resolve())]
    assert model_dirs([], env="", default=None) == [d for d in dirs[2:]]
    items = examples()
    picked = {example_values(i)[-1] for i, e in enumerate(items) if "model" in e}
    assert picked == {str(MODEL22.resolve())}
    first_plain = next(i for i, e in enumerate(items) if "model" not in e)
    assert example_values(first_plain)[-1] == str(DEFAULT_MODEL.resolve())
