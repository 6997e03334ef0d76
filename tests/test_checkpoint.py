"""Loading Hugging Face directories: single file, shards, round trip, and every way one can be broken."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from llada.checkpoint import CheckpointError, load_model, save_model
from llada.config import ConfigError, ModelConfig


@pytest.fixture
def broken(tmp_path, fixture_dir):
    """A writable copy of the reference checkpoint."""
    d = tmp_path / "ckpt"
    shutil.copytree(fixture_dir, d)
    for f in d.iterdir():
        f.chmod(0o644)
    return d


def _logits(model):
    ids = torch.arange(3, 19).view(1, 16)
    return model(ids)


def test_sharded_checkpoint_loads_the_same(broken, fixture_dir):
    tensors = load_file(str(broken / "model.safetensors"))
    keys = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for name, part in halves.items():
        save_file({k: tensors[k] for k in part}, str(broken / name))
    weight_map = {k: name for name, part in halves.items() for k in part}
    (broken / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (broken / "model.safetensors").unlink()
    assert torch.equal(_logits(load_model(broken)), _logits(load_model(fixture_dir)))


def test_save_and_reload_round_trip(tmp_path, fixture_dir):
    model = load_model(fixture_dir)
    save_model(model, tmp_path / "copy")
    again = load_model(tmp_path / "copy")
    assert torch.equal(_logits(again), _logits(model))
    assert set(load_file(str(tmp_path / "copy" / "model.safetensors"))) == set(
        load_file(str(fixture_dir / "model.safetensors")))


def test_bfloat16_load(fixture_dir):
    model = load_model(fixture_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and _logits(model).dtype == torch.float32


def test_missing_directory_and_files(tmp_path, broken):
    with pytest.raises(CheckpointError, match="model directory not found"):
        load_model(tmp_path / "nope")
    (broken / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors or model.safetensors.index.json"):
        load_model(broken)
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json: file not found"):
        load_model(broken)


def test_corrupt_safetensors_names_the_file(broken):
    (broken / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: cannot read safetensors file"):
        load_model(broken)


def test_missing_shard_is_named(broken):
    (broken / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-2.safetensors"}}))
    with pytest.raises(CheckpointError, match="model-2.safetensors: shard listed"):
        load_model(broken)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.pop("hidden_size"), "missing required key"),
    (lambda c: c.update(model_type="llama"), "unknown model_type 'llama'"),
    (lambda c: c.update(num_key_value_heads=3), "multiple of num_key_value_heads"),
    (lambda c: c.update(n_group=3), "divisible by n_group"),
    (lambda c: c.update(hidden_size="wide"), "invalid value|hidden_size"),
])
def test_broken_config_names_the_key(broken, edit, message):
    cfg = json.loads((broken / "config.json").read_text())
    edit(cfg)
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=message):
        load_model(broken)


def test_config_that_is_not_json(broken):
    (broken / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
        load_model(broken)


def test_shape_mismatch_names_file_and_tensor(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["intermediate_size"] = 100  # the dense layer holds 96
    (broken / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor model\.layers\.0\.mlp\.\w+_proj\.weight "
                                              r"has shape"):
        load_model(broken)


def test_missing_expert_tensor_is_named(broken):
    tensors = load_file(str(broken / "model.safetensors"))
    del tensors["model.layers.2.mlp.experts.5.up_proj.weight"]
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor model\.layers\.2\.mlp\.experts\.5\.up_proj\.weight"):
        load_model(broken)


def test_config_validation_messages():
    base = json.loads('{"vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,'
                      '"num_key_value_heads": 1, "intermediate_size": 4, "moe_intermediate_size": 3,'
                      '"num_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}')
    assert ModelConfig.from_dict(base).head_dim == 4
    with pytest.raises(ConfigError, match="num_experts_per_tok must be in"):
        ModelConfig.from_dict(base | {"num_experts_per_tok": 3})
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        ModelConfig.from_dict(base | {"partial_rotary_factor": 0})


def test_tied_embeddings_need_no_lm_head(broken, fixture_dir):
    tensors = load_file(str(broken / "model.safetensors"))
    tensors["model.word_embeddings.weight"] = tensors.pop("lm_head.weight")  # one matrix serves both
    save_file(tensors, str(broken / "model.safetensors"))
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(cfg | {"tie_word_embeddings": True}))
    tied = load_model(broken)
    assert torch.equal(tied.lm_head.weight, tied.word_embeddings.weight)
    assert torch.equal(tied.lm_head.weight, load_model(fixture_dir).lm_head.weight)
    (broken / "config.json").write_text(json.dumps(cfg))  # untied: lm_head.weight is required
    with pytest.raises(CheckpointError, match="missing tensor lm_head.weight"):
        load_model(broken)
