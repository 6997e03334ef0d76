"""Loading Hugging Face directories: single file, shards, lean placement, dtypes, fp8 while loading, round trip.

Every way a directory can be broken is in test_broken_checkpoints.py."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from llada.weights import memory
from llada.weights.checkpoint import CheckpointError, hf_state_dict, load_model, save_model
from llada.config import FIXED, REFERENCE_DEFAULTS, ConfigError, ModelConfig
from llada.model import LLaDA2MoE
from llada.fast.quantize import quantize_model_fp8


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


def test_config_validation_messages():
    base = json.loads('{"vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,'
                      '"num_key_value_heads": 1, "intermediate_size": 4, "moe_intermediate_size": 3,'
                      '"num_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}')
    assert ModelConfig.from_dict(base).head_dim == 4
    with pytest.raises(ConfigError, match="num_experts_per_tok must be in"):
        ModelConfig.from_dict(base | {"num_experts_per_tok": 3})
    with pytest.raises(ConfigError, match="partial_rotary_factor"):
        ModelConfig.from_dict(base | {"partial_rotary_factor": 0})
    assert ModelConfig.from_dict(base).version == "2.1"
    v22 = base | {"expert_capacity": 3, "block_size": 32, "delete_token_id": 9, "split_token_id": 10}
    assert ModelConfig.from_dict(v22).version == "2.2"  # a positive expert_capacity: LLaDA2.2 block routing
    with pytest.raises(ConfigError, match="expert_capacity \\(1\\) is smaller than num_experts_per_tok \\(2\\)"):
        ModelConfig.from_dict(v22 | {"expert_capacity": 1})


def test_stop_ids_come_from_generation_config_when_config_json_has_none(tmp_path, fixture_dir):
    from llada.weights.checkpoint import read_config

    root = tmp_path / "m"
    root.mkdir()
    raw = json.loads((fixture_dir / "config.json").read_text())
    raw.pop("eos_token_id", None)
    (root / "config.json").write_text(json.dumps(raw))
    assert read_config(root)[0].stop_token_ids == ()
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    assert read_config(root)[0].stop_token_ids == (1, 2)


def test_tied_embeddings_need_no_lm_head(broken, fixture_dir):
    tensors = load_file(str(broken / "model.safetensors"))
    tensors["model.word_embeddings.weight"] = tensors.pop("lm_head.weight")  # one matrix serves both
    save_file(tensors, str(broken / "model.safetensors"))
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(cfg | {"tie_word_embeddings": True}))
    tied = load_model(broken)
    assert tied.lm_head.weight.data_ptr() == tied.word_embeddings.weight.data_ptr()  # shared, not copied
    assert torch.equal(tied.lm_head.weight, load_model(fixture_dir).lm_head.weight)
    (broken / "config.json").write_text(json.dumps(cfg))  # untied: lm_head.weight is required
    with pytest.raises(CheckpointError, match="missing tensor lm_head.weight"):
        load_model(broken)


def _shards(root):
    out = {}
    for f in sorted(root.glob("*.safetensors")):
        out |= load_file(str(f))
    return out


def test_every_tensor_lands_in_its_place(replica_dir):
    """Read shard by shard into preallocated slices, the model holds exactly the checkpoint's values."""
    model = load_model(replica_dir, dtype=torch.bfloat16)
    stored, loaded = _shards(replica_dir), hf_state_dict(model)
    assert loaded.keys() == stored.keys()
    assert all(torch.equal(loaded[k], stored[k]) for k in stored)


def test_dtypes_are_cast_while_reading(replica_dir):
    wide = load_model(replica_dir, dtype=torch.float32)
    narrow = load_model(replica_dir, dtype=torch.bfloat16)
    assert wide.dtype == torch.float32 and narrow.dtype == torch.bfloat16
    assert all(torch.equal(a, b.float()) for a, b in zip(wide.state_dict().values(), narrow.state_dict().values()))


def test_default_dtype_follows_the_device_and_the_size(replica_dir):
    small = ModelConfig.from_json(replica_dir / "config.json")
    assert small.dtype == "bfloat16"
    assert memory.default_dtype(small, "cpu") == torch.float32  # 10 M parameters: fp32 on the CPU
    assert memory.default_dtype(small, "cuda") == torch.bfloat16  # the checkpoint's dtype on a GPU
    from llada.weights.replica import replica_config

    mini = ModelConfig.from_dict(replica_config("mini"))
    assert 16e9 < sum(mini.parameter_counts().values()) < 16.5e9  # LLaDA2.1-mini: 16 B parameters
    assert memory.default_dtype(mini, "cpu") == torch.bfloat16  # no fp32 copy of a 16 B model
    assert load_model(replica_dir).dtype == torch.float32


def test_fp8_experts_are_quantized_while_loading_exactly_as_after(replica_dir):
    """Expert by expert at load time gives the same codes and scales as quantizing the loaded model."""
    during = load_model(replica_dir, dtype=torch.bfloat16, quantize="fp8")
    after = quantize_model_fp8(load_model(replica_dir, dtype=torch.bfloat16), impl="torch")
    a, b = during.state_dict(), after.state_dict()
    assert a.keys() == b.keys() and any(t.dtype == torch.float8_e4m3fn for t in a.values())
    assert all(torch.equal(a[k].view(torch.uint8) if a[k].dtype == torch.float8_e4m3fn else a[k],
                           b[k].view(torch.uint8) if b[k].dtype == torch.float8_e4m3fn else b[k]) for k in a)
    with pytest.raises(ValueError, match="unknown quantization 'int4'"):
        load_model(replica_dir, quantize="int4")


def test_a_bf16_load_holds_the_model_and_little_else(tmp_path):
    """Peak resident memory above the imports stays near the checkpoint's size (no second copy, no mmap)."""
    from llada.weights.replica import write_replica

    root = write_replica(tmp_path / "r", "tiny", hidden_size=256, head_dim=64, shard_bytes=48 << 20)
    out = subprocess.run([sys.executable, "-m", "llada.bench", "load", "--child", "--model", str(root), "--device",
                          "cpu", "--dtype", "bfloat16", "--gen-length", "0"], capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.splitlines()[-1])
    assert r["checkpoint_bytes"] > 150e6 and r["dtype"] == "bfloat16"
    extra = r["peak_rss_bytes"] - r["rss_before_load_bytes"]
    # 128 MB: the 157k-token tokenizer and the runtime's first allocations, whatever the model's size;
    # a loader that keeps the read tensors beside the model needs 2x the checkpoint or more
    assert extra < 1.1 * r["checkpoint_bytes"] + (128 << 20), r


def test_known_non_weight_tensors_are_skipped(broken, fixture_dir):
    tensors = load_file(str(broken / "model.safetensors"))
    tensors["model.rotary_emb.inv_freq"] = torch.ones(4)  # some exporters save RoPE's buffer
    save_file(tensors, str(broken / "model.safetensors"))
    assert torch.equal(_logits(load_model(broken)), _logits(load_model(fixture_dir)))


def test_attention_biases_are_honoured(tmp_path, fixture_dir):
    cfg = dataclasses.replace(ModelConfig.from_json(fixture_dir / "config.json"), use_bias=True, use_qkv_bias=True)
    model = LLaDA2MoE(cfg).init_weights(seed=0)
    with torch.no_grad():
        for layer in model.layers:
            layer.attention.dense.bias.normal_(0, 0.5)
            layer.attention.query_key_value.bias.normal_(0, 0.5)
    save_model(model, tmp_path / "biased")
    assert {"model.layers.0.attention.dense.bias", "model.layers.0.attention.query_key_value.bias"} <= set(
        load_file(str(tmp_path / "biased" / "model.safetensors")))
    again = load_model(tmp_path / "biased")
    assert torch.equal(_logits(again), _logits(model))
    with torch.no_grad():
        for layer in again.layers:
            layer.attention.dense.bias.zero_()
    assert not torch.allclose(_logits(again), _logits(model), atol=1e-3)  # the biases are used


def test_a_router_without_expert_bias(tmp_path, fixture_dir):
    cfg = dataclasses.replace(ModelConfig.from_json(fixture_dir / "config.json"), moe_router_enable_expert_bias=False)
    model = LLaDA2MoE(cfg).init_weights(seed=0)
    save_model(model, tmp_path / "plain")
    assert not any(k.endswith("expert_bias") for k in load_file(str(tmp_path / "plain" / "model.safetensors")))
    assert torch.equal(_logits(load_model(tmp_path / "plain")), _logits(model))


def test_saved_config_carries_every_key_the_reference_reads(tmp_path, fixture_dir):
    """The reference fills absent keys with its own defaults (use_bias true, n_group 8, ...): write them all."""
    model = load_model(fixture_dir)
    save_model(model, tmp_path / "copy")
    written = json.loads((tmp_path / "copy" / "config.json").read_text())
    needed = set(REFERENCE_DEFAULTS) | set(FIXED) | {"rope_scaling", "pad_token_id", "head_dim", "num_key_value_heads",
                                                     "intermediate_size", "moe_intermediate_size", "dtype"}
    assert needed <= set(written), needed - set(written)
    assert (written["use_bias"], written["use_qkv_bias"], written["norm_head"]) == (False, False, False)
    assert ModelConfig.from_dict(written) == model.config


def test_absent_keys_take_the_reference_defaults(broken):
    cfg = json.loads((broken / "config.json").read_text())
    for key in ("partial_rotary_factor", "n_group", "topk_group", "routed_scaling_factor", "rms_norm_eps"):
        cfg.pop(key)
    read = ModelConfig.from_dict(cfg)
    assert (read.partial_rotary_factor, read.n_group, read.topk_group, read.routed_scaling_factor,
            read.rms_norm_eps) == (0.5, 8, 4, 2.5, 1e-5)
    cfg.pop("use_bias")
    (broken / "config.json").write_text(json.dumps(cfg | {"n_group": 4, "topk_group": 2}))
    with pytest.raises(CheckpointError, match=r"missing tensor model\.layers\.0\.attention\.dense\.bias.*"
                                              r"omits use_bias, whose default is true"):
        load_model(broken)
