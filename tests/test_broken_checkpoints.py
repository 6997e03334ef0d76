"""Every way a model directory can be broken: a CheckpointError naming the file and the key, never a traceback.

One table of breakages of the reference checkpoint (config values of the wrong type, sign or size;
keys that change the computation in ways the engine does not implement; damaged shards, indexes,
presets, generation configs and special ids). Each goes through `Pipeline.load` (the error names the
file and the key) and the command line (one `error:` line, exit status 2). Huge dimensions are refused
from config.json alone, before anything is allocated; NaN weights stop the run with an error.
"""

from __future__ import annotations

import json
import struct
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from llada.__main__ import main
from llada.weights.checkpoint import CheckpointError
from llada.loop import NonFiniteLogits
from llada.pipeline import Pipeline

MASK = 258  # the reference fixture names no mask token (see its golden.json)


def _config(key, value):
    def edit(d):
        cfg = json.loads((d / "config.json").read_text())
        if value is _DROP:
            cfg.pop(key)
        else:
            cfg[key] = value
        (d / "config.json").write_text(json.dumps(cfg))
    return edit


_DROP = object()


def _write(name, text):
    return lambda d: (d / name).write_text(text)


def _tensors(change):
    def edit(d):
        tensors = load_file(str(d / "model.safetensors"))
        change(tensors)
        save_file(tensors, str(d / "model.safetensors"))
    return edit


def _truncate(d):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])


def _bad_header(d):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + data[8:])


def _split_with_duplicate(d):
    tensors = load_file(str(d / "model.safetensors"))
    keys = sorted(tensors)
    save_file({k: tensors[k] for k in keys[:10]}, str(d / "a.safetensors"))
    save_file({k: tensors[k] for k in keys[9:]}, str(d / "b.safetensors"))  # keys[9] is in both
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: "a.safetensors" if i < 10 else "b.safetensors" for i, k in enumerate(keys)}}))
    (d / "model.safetensors").unlink()


CASES = [  # (id, breakage, file named, words that must be in the message)
    ("heads-zero", _config("num_attention_heads", 0), "config.json", "num_attention_heads"),
    ("groups-zero", _config("n_group", 0), "config.json", "n_group"),
    ("hidden-string", _config("hidden_size", "wide"), "config.json", "hidden_size"),
    ("layers-fraction", _config("num_hidden_layers", 2.5), "config.json", "num_hidden_layers"),
    ("layers-float", _config("num_hidden_layers", 3.0), "config.json", "num_hidden_layers"),
    ("kv-heads-negative", _config("num_key_value_heads", -2), "config.json", "num_key_value_heads"),
    ("vocab-bool", _config("vocab_size", True), "config.json", "vocab_size"),
    ("vocab-list", _config("vocab_size", [259]), "config.json", "vocab_size"),
    ("eps-negative", _config("rms_norm_eps", -1e-6), "config.json", "rms_norm_eps"),
    ("theta-string", _config("rope_theta", "600k"), "config.json", "rope_theta"),
    ("theta-nan", _config("rope_theta", float("nan")), "config.json", "rope_theta"),
    ("rotary-zero", _config("partial_rotary_factor", 0), "config.json", "partial_rotary_factor"),
    ("qk-norm-string", _config("use_qk_norm", "yes"), "config.json", "use_qk_norm"),
    ("tie-int", _config("tie_word_embeddings", 1), "config.json", "tie_word_embeddings"),
    ("dense-negative", _config("first_k_dense_replace", -1), "config.json", "first_k_dense_replace"),
    ("shared-negative", _config("num_shared_experts", -1), "config.json", "num_shared_experts"),
    ("top-k-zero", _config("num_experts_per_tok", 0), "config.json", "num_experts_per_tok"),
    ("topk-group-too-big", _config("topk_group", 9), "config.json", "topk_group"),
    ("head-dim-zero", _config("head_dim", 0), "config.json", "head_dim"),
    ("positions-zero", _config("max_position_embeddings", 0), "config.json", "max_position_embeddings"),
    ("experts-not-divisible", _config("n_group", 3), "config.json", "n_group"),
    ("kv-not-divisor", _config("num_key_value_heads", 3), "config.json", "num_key_value_heads"),
    ("model-type", _config("model_type", "llama"), "config.json", "model_type"),
    ("hidden-missing", _config("hidden_size", _DROP), "config.json", "hidden_size"),
    ("dtype-unknown", _config("torch_dtype", "int8"), "config.json", "dtype"),
    ("act-gelu", _config("hidden_act", "gelu"), "config.json", "hidden_act"),
    ("norm-head", _config("norm_head", True), "config.json", "norm_head"),
    ("softmax-router", _config("score_function", "softmax"), "config.json", "score_function"),
    ("no-renormalise", _config("norm_topk_prob", False), "config.json", "norm_topk_prob"),
    ("router-bf16", _config("router_dtype", "bf16"), "config.json", "router_dtype"),
    ("sliding-window", _config("use_sliding_window", True), "config.json", "use_sliding_window"),
    ("rope-linear", _config("rope_scaling", {"type": "linear", "factor": 2.0}), "config.json", "rope_scaling"),
    ("huge-vocab", _config("vocab_size", 10**12), "config.json", "vocab_size x hidden_size"),
    ("huge-layers", _config("num_hidden_layers", 10**8), "config.json", "num_hidden_layers x num_experts"),
    ("huge-experts", _config("num_experts", 4 * 10**9), "config.json", "num_experts"),
    ("config-not-json", _write("config.json", "{not json"), "config.json", "not valid JSON"),
    ("config-a-list", _write("config.json", "[1, 2]"), "config.json", "expected a JSON object"),
    ("weights-garbage", _write("model.safetensors", "\0garbage" * 10), "model.safetensors", "cannot read"),
    ("weights-truncated", _truncate, "model.safetensors", "truncated"),
    ("header-too-long", _bad_header, "model.safetensors", "cannot read"),
    ("weights-int8", _tensors(lambda t: t.update({"model.norm.weight": t["model.norm.weight"].to(torch.int8)})),
     "model.safetensors", "model.norm.weight has dtype I8"),
    ("tensor-missing", _tensors(lambda t: t.pop("model.layers.2.mlp.experts.5.up_proj.weight")), "ckpt",
     "missing tensor model.layers.2.mlp.experts.5.up_proj.weight"),
    ("tensor-unexpected", _tensors(lambda t: t.update({"model.layers.0.attention.dense.bias": torch.zeros(64)})),
     "model.safetensors", "unexpected tensor model.layers.0.attention.dense.bias"),
    ("expert-out-of-range", _tensors(lambda t: t.update({"model.layers.1.mlp.experts.16.up_proj.weight":
                                                         torch.zeros(40, 64)})), "model.safetensors", "num_experts"),
    ("shape-mismatch", _config("intermediate_size", 100), "model.safetensors", "model.layers.0.mlp"),
    ("index-not-json", _write("model.safetensors.index.json", "{"), "model.safetensors.index.json", "not a valid"),
    ("index-missing-shard", _write("model.safetensors.index.json", json.dumps({"weight_map": {"a": "x.safetensors"}})),
     "x.safetensors", "shard listed"),
    ("index-duplicate", _split_with_duplicate, "b.safetensors", "also in a.safetensors"),
    ("presets-bad-value", _write("presets.json", json.dumps({"S": {"threshold": 3}})), "presets.json", "threshold"),
    ("presets-not-json", _write("presets.json", "{"), "presets.json", "not valid JSON"),
    ("generation-not-json", _write("generation_config.json", "{"), "generation_config.json", "not valid JSON"),
    ("eos-out-of-range", _write("generation_config.json", json.dumps({"eos_token_id": 9999})),
     "generation_config.json", "eos_token_id"),
    ("eos-string", _config("pad_token_id", "257"), "config.json", "pad_token_id"),
    ("eos-equals-mask", _config("pad_token_id", MASK), "ckpt", "both 258"),
    ("tokenizer-garbage", _write("tokenizer.json", "{garbage"), "ckpt", "cannot load the tokenizer"),
]


@pytest.mark.parametrize("breakage, file, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pipeline_names_the_file_and_the_key(broken, breakage, file, words):
    breakage(broken)
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as err:
        Pipeline.load(broken, mask_id=MASK)
    assert file in str(err.value) and words in str(err.value), str(err.value)
    assert time.perf_counter() - start < 30  # refused from headers and config: nothing huge was built


@pytest.mark.parametrize("breakage, file, words", [c[1:] for c in CASES[::4]], ids=[c[0] for c in CASES[::4]])
def test_cli_prints_one_error_line(broken, capsys, breakage, file, words):
    breakage(broken)
    code = main(["generate", "--model", str(broken), "--prompt-ids", "1,2,3", "--mask-id", str(MASK),
                 "--gen-length", "4", "--block-length", "4", "--json"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert out.err.startswith("error: ") and out.err.count("\n") == 1 and words in out.err, out.err


def test_huge_dimensions_are_refused_from_the_config_alone(broken):
    _config("vocab_size", 10**12)(broken)
    with pytest.raises(CheckpointError, match=r"config.json: refused before loading: the weights need .* GiB"):
        Pipeline.load(broken, mask_id=MASK)


def test_nan_weights_stop_the_run_with_an_error(broken, capsys):
    _tensors(lambda t: t.update({k: torch.full_like(v, float("nan")) for k, v in t.items()}))(broken)
    pipe = Pipeline.load(broken, mask_id=MASK)  # loading does not scan values; the first forward tells
    with pytest.raises(NonFiniteLogits, match="non-finite logits at step 1"):
        pipe.generate([1, 2, 3], pipe.config("S", gen_length=4, block_length=4))
    code = main(["generate", "--model", str(broken), "--prompt-ids", "1,2,3", "--mask-id", str(MASK),
                 "--gen-length", "4", "--block-length", "4", "--json"])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and out.err.startswith("error: the model produced non-finite logits")
