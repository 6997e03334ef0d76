"""A model directory with a real tokenizer: text in, text out, presets from the directory."""

import json

import torch

import pytest

from llada.checkpoint import CheckpointError
from llada.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return Pipeline.load(tiny_model_dir)


def test_special_ids_come_from_the_directory(pipe):
    hf = pipe.tokenizer.hf
    assert pipe.mask_id == hf.convert_tokens_to_ids("<|mask|>")
    assert pipe.eos_id == hf.eos_token_id


def test_text_round_trip_and_token_pieces(pipe):
    text = "def add(a, b):\n    return a + b"
    ids = pipe.encode(text)
    assert pipe.decode_text(ids) == text
    assert "".join(pipe.token_texts(ids)) == text
    assert pipe.token_texts([pipe.mask_id, pipe.eos_id]) == ["[MASK]", "<|endoftext|>"]


def test_generate_from_text(pipe):
    trace = pipe.generate(pipe.encode("def add("), pipe.config("Q", gen_length=20, block_length=8), prompt="def add(")
    assert 0 < len(trace.output_ids) <= 20 and trace.text == pipe.decode_text(trace.output_ids)
    assert (trace.model, trace.prompt, trace.status) == ("tiny-random", "def add(", "done")


def test_model_presets_override_the_official_ones(tiny_model_dir, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    (d / "presets.json").write_text(json.dumps({"S": {"threshold": 0.3, "editing_threshold": 0.1,
                                                      "block_length": 16}}))
    p = Pipeline.load(d)
    assert p.config("S").threshold == 0.3 and p.config("S").block_length == 16
    assert p.config("Q").threshold == 0.7  # untouched modes keep the official values
    (d / "presets.json").write_text(json.dumps({"S": {"threshold": 3}}))
    with pytest.raises(CheckpointError, match="presets.json: mode S: threshold"):
        Pipeline.load(d)


def test_text_prompt_without_tokenizer(fixture_dir):
    p = Pipeline.load(fixture_dir)
    assert (p.mask_id, p.eos_id) == (258, 257)  # last vocabulary id; pad_token_id
    with pytest.raises(ValueError, match="has no tokenizer"):
        p.encode("hello")


def test_fp8_load_quantizes_the_experts_once(tiny_model_dir):
    from llada.quantize import FP8Experts

    p = Pipeline.load(tiny_model_dir, quantize="fp8")
    experts = [layer.mlp.experts for layer in p.model.layers[1:]]
    assert all(isinstance(e, FP8Experts) and e.w13.dtype == torch.float8_e4m3fn for e in experts)
    result = p.generate(p.encode("def add("), p.config("Q", gen_length=8, block_length=8))
    assert len(result.output_ids) > 0
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        Pipeline.load(tiny_model_dir, quantize="int4")


def test_chat_models_get_their_template(tiny_model_dir, tmp_path):
    import shutil

    d = tmp_path / "chat"
    shutil.copytree(tiny_model_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "<user>{{ messages[0]['content'] }}</user><assistant>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    p = Pipeline.load(d)
    assert p.tokenizer.has_chat_template
    assert p.encode("def add(") == p.encode("<user>def add(</user><assistant>", chat=False)
    assert p.encode("def add(", chat=False) != p.encode("def add(")
