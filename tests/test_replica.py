"""LLaDA2.1-mini's real format, scaled down (llada.weights.replica), through every entry point: Pipeline, CLI, app.

The replica has the published config keys (with `auto_map` to remote code), sharded bf16 with an index
and per-expert names, vocab 157184 with <|endoftext|> = 156892 and <|mask|> = 156895, and the Ling chat
template. Nothing may prompt, fall back silently or print anything but JSON under --json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from llada.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]
FEW_FORWARDS = {"threshold": 0.0, "editing_threshold": None, "gen_length": 8, "block_length": 8}  # 2 per block


@pytest.fixture(scope="module")
def pipe(replica_dir):
    return Pipeline.load(replica_dir)


def test_the_replica_is_in_the_real_format(replica_dir):
    config = json.loads((replica_dir / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_llada2_moe.LLaDA2MoeModelLM"
    assert (config["vocab_size"], config["use_bias"], config["pad_token_id"], config["dtype"]) == (
        157184, False, 156892, "bfloat16")
    index = json.loads((replica_dir / "model.safetensors.index.json").read_text())["weight_map"]
    shards = sorted(set(index.values()))
    assert len(shards) >= 2 and all(name.startswith("model-0000") for name in shards)
    assert "model.layers.1.mlp.experts.15.down_proj.weight" in index
    with safe_open(str(replica_dir / index["model.layers.1.mlp.experts.0.gate_proj.weight"]), "pt") as f:
        assert f.get_slice("model.layers.1.mlp.experts.0.gate_proj.weight").get_dtype() == "BF16"


def test_pipeline_takes_the_real_ids_and_the_ling_template(pipe):
    assert (pipe.mask_id, pipe.eos_id) == (156895, 156892)  # <|mask|> by name, the declared EOS
    ids = pipe.encode("def add(a, b):")
    text = pipe.tokenizer.hf.decode(ids)
    assert text == ("<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>def add(a, b):"
                    "<|role_end|><role>ASSISTANT</role>")
    assert pipe.token_texts([156895, 156892]) == ["[MASK]", "<|endoftext|>"]


def test_pipeline_decodes_the_replica_in_bf16_and_fp8(replica_dir, pipe):
    ids = pipe.encode("hello")
    trace = pipe.generate(ids, pipe.config("S", **FEW_FORWARDS))
    assert len(trace.output_ids) == 8 and trace.status == "done"
    fp8 = Pipeline.load(replica_dir, dtype=torch.bfloat16, quantize="fp8")
    assert fp8.model.layers[1].mlp.experts.w13.dtype == torch.float8_e4m3fn
    assert len(fp8.generate(ids, fp8.config("S", **FEW_FORWARDS)).output_ids) == 8


def test_cli_with_stdin_closed_prints_only_json(replica_dir, tmp_path):
    """A tokenizer_config that also maps to remote code: without trust_remote_code=False, transformers asks."""
    d = tmp_path / "remote"
    shutil.copytree(replica_dir, d)
    tok = json.loads((d / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": ["tokenization_llada2.LLaDA2Tokenizer", None]}
    (d / "tokenizer_config.json").write_text(json.dumps(tok))
    args = ["--threshold", "0", "--no-edit", "--gen-length", "8", "--block-length", "8"]
    out = subprocess.run([sys.executable, "-m", "llada", "generate", "--model", str(d), "--prompt", "def add(",
                          *args, "--json"], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         cwd=ROOT, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # the whole of stdout is one JSON object: no question, no warning
    assert len(result["output_ids"]) == 8 and result["num_decode_forwards"] >= 2
    assert "custom code" not in out.stdout + out.stderr


def test_the_app_serves_the_replica_by_name(replica_dir):
    pytest.importorskip("gradio_client")
    from ui.models import Models
    from ui_helpers import api_client, launch_app

    models = Models([("inclusionAI/LLaDA2.1-mini", str(replica_dir))])
    assert models.choices() == [("inclusionAI/LLaDA2.1-mini", str(replica_dir))]
    demo, url = launch_app(models)
    try:
        client = api_client(url)
        text, stats = client.predict("def add(", "S", 0.0, None, False, 8, 8, "inclusionAI/LLaDA2.1-mini",
                                     api_name="/generate")
        assert stats["tokens"] == 8
        trace = client.predict(api_name="/trace")
        assert trace["model"] == "inclusionAI/LLaDA2.1-mini" and trace["mask_id"] == 156895
        with pytest.raises(Exception, match="unknown model 'gpt2'; choose one of: inclusionAI/LLaDA2.1-mini"):
            client.predict("def add(", "S", 0.0, None, False, 8, 8, "gpt2", api_name="/generate")
    finally:
        demo.close()


@pytest.mark.parametrize("shape", ["tiny", "load", "mini"])
def test_every_shape_has_a_22_config(shape):
    from llada.config import ModelConfig
    from llada.weights.replica import replica_config

    cfg = ModelConfig.from_dict(replica_config(shape, "2.2"))
    assert cfg.version == "2.2" and cfg.num_experts_per_tok < cfg.expert_capacity < cfg.num_experts
    assert (cfg.delete_token_id, cfg.split_token_id, cfg.stop_token_ids) == (156930, 156931, (156892, 156900))
    assert ModelConfig.from_dict(replica_config(shape)).version == "2.1"
