"""A model directory with a real tokenizer: text in, text out, presets and special ids from the directory."""

import json
import shutil
import warnings

import torch

import pytest

from llada.weights.checkpoint import CheckpointError
from llada.pipeline import DefaultIdWarning, Pipeline


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
    with pytest.raises(CheckpointError, match=r"no mask id: .* default 156895 is outside the vocabulary \[0, 259\); "
                                              r"give it explicitly \(--mask-id\)"):
        Pipeline.load(fixture_dir)  # no tokenizer and no mask_token_id: never a silent vocab_size-1
    p = Pipeline.load(fixture_dir, mask_id=258)
    assert (p.mask_id, p.eos_id) == (258, 257)  # given; config.json's pad_token_id (LLaDA2.x pads with EOS)
    with pytest.raises(ValueError, match="has no tokenizer"):
        p.encode("hello")


def test_default_dtype_is_fp32_on_the_cpu_for_small_models(tiny_model_dir):
    assert Pipeline.load(tiny_model_dir).model.dtype == torch.float32
    assert Pipeline.load(tiny_model_dir, dtype=torch.bfloat16).model.dtype == torch.bfloat16


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_json(path, **changes):
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        data.pop(key)
    path.write_text(json.dumps(data))


def test_special_ids_the_tokenizer_declares_come_first(tiny_model_dir, tmp_path):
    d = _copy(tiny_model_dir, tmp_path / "m")
    hf = Pipeline.load(d).tokenizer.hf
    _edit_json(d / "config.json", mask_token_id=5, eos_token_id=6)
    _edit_json(d / "generation_config.json", mask_token_id=7, eos_token_id=8)
    p = Pipeline.load(d)
    assert (p.mask_id, p.eos_id) == (hf.convert_tokens_to_ids("<|mask|>"), hf.eos_token_id)


def test_special_ids_without_a_tokenizer_follow_the_files(fixture_dir, tmp_path):
    d = _copy(fixture_dir, tmp_path / "m")
    _edit_json(d / "config.json", mask_token_id=200, eos_token_id=201)  # pad_token_id 257 stays
    _edit_json(d / "generation_config.json", eos_token_id=[202, 203])
    p = Pipeline.load(d)
    assert (p.mask_id, p.eos_id) == (200, 202)  # generation_config.json before config.json; a list: its first
    (d / "generation_config.json").unlink()
    assert Pipeline.load(d).eos_id == 201  # config.json's eos_token_id before its pad_token_id
    _edit_json(d / "config.json", mask_token_id=259)
    with pytest.raises(CheckpointError, match=r"config.json: mask_token_id: mask id 259 is outside the vocabulary"):
        Pipeline.load(d)
    with pytest.raises(CheckpointError, match=r"given explicitly: EOS id -1 is outside the vocabulary"):
        Pipeline.load(d, mask_id=3, eos_id=-1)


def test_the_llada2_defaults_come_last_with_a_warning(replica_dir, tmp_path):
    d = _copy(replica_dir, tmp_path / "m")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (d / name).unlink()
    _edit_json(d / "config.json", pad_token_id=None)
    with pytest.warns(DefaultIdWarning) as caught:
        p = Pipeline.load(d)
    assert (p.mask_id, p.eos_id) == (156895, 156892)
    assert {"mask", "EOS"} == {str(w.message).split("no ")[1].split(" id")[0] for w in caught}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DefaultIdWarning)
        Pipeline.load(d, mask_id=156895, eos_id=156892)  # given explicitly: no default, no warning


def test_fp8_load_quantizes_the_experts_once(tiny_model_dir):
    from llada.fast.quantize import FP8Experts

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
