"""Training presets, the sharded bf16 export read by the engine's loader, and whole runs of the command.

The runs use the `tiny` preset on a small source tree written by the test (tests/code_corpus.py),
so they take seconds; the `code` preset is checked by its sizes, never trained here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from safetensors import safe_open

from llada.weights.checkpoint import INDEX, hf_state_dict, load_model
from llada.config import ModelConfig
from llada.model import LLaDA2MoE
from llada.pipeline import Pipeline
from llada.train.build import model_config
from llada.card.command import main
from llada.train.cli import parse_args
from llada.train.export import MAX_SHARD_BYTES, plan_shards, save_sharded
from llada.train.loop import preset_config, save_dir, setup, train, train_step
from llada.train.recipes import OFFICIAL_DECODING, TRAINING_PRESETS, param_counts
from llada.train.resume import load_state, save_state
from code_corpus import write_tree

SHIPPED = Path(__file__).resolve().parents[1] / "assets" / "model"


def small_model() -> LLaDA2MoE:
    cfg = ModelConfig(vocab_size=61, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, partial_rotary_factor=0.5, intermediate_size=48,
                      moe_intermediate_size=12, num_experts=16, num_experts_per_tok=2, n_group=4, topk_group=2,
                      num_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5)
    return LLaDA2MoE(cfg).init_weights(std=0.1, seed=0)


# ---- presets and sizes ------------------------------------------------------------------------------

def test_code_preset_is_a_real_moe_within_its_size_budget():
    tc = preset_config("code")
    cfg = model_config(tc, tc.vocab_size)
    total, active = param_counts(cfg)
    assert cfg.num_experts >= 16 and 1 < cfg.n_group and cfg.topk_group < cfg.n_group
    assert cfg.num_shared_experts == 1 and total <= 40e6 and active <= 8.5e6
    with torch.device("meta"):
        model = LLaDA2MoE(cfg)
    assert sum(p.numel() for p in model.parameters()) == total  # the count is the model's, not a formula's
    tensors = {k: v.to(torch.bfloat16) for k, v in hf_state_dict(model).items()}
    shards = plan_shards(tensors, MAX_SHARD_BYTES)
    sizes = [sum(tensors[n].numel() * 2 for n in names) for names in shards]
    assert max(sizes) <= MAX_SHARD_BYTES < 16 * 2**20 and len(shards) >= 2 * total / MAX_SHARD_BYTES


def test_cpu_preset_is_a_real_moe_that_fits_the_model_directory():
    tc = preset_config("cpu")
    cfg = model_config(tc, tc.vocab_size)
    total, _ = param_counts(cfg)
    assert cfg.num_experts >= 16 and 1 < cfg.n_group and cfg.topk_group < cfg.n_group and cfg.num_shared_experts == 1
    assert 2 * total < 64 * 2**20 and tc.threads == 1 and tc.pack and tc.checkpoint_minutes > 0
    assert TRAINING_PRESETS["cpu"].knows and TRAINING_PRESETS["cpu"].decoding == OFFICIAL_DECODING


def test_the_shipped_model_has_the_lease_presets_architecture():
    """assets/model is v4, trained by `--preset lease` on a GPU (its card): the preset builds its shape, and its
    presets.json holds the calibrated S and Q, not the official ones the preset writes."""
    tc = preset_config("lease")
    shipped = json.loads((SHIPPED / "config.json").read_text())
    assert shipped["vocab_size"] == tc.vocab_size == 4096
    ours = model_config(tc, shipped["vocab_size"]).to_dict()
    arch = [k for k in ours if k not in ("architectures", "model_type")]
    assert {k: ours[k] for k in arch} == {k: ModelConfig.from_dict(shipped).to_dict()[k] for k in arch}
    assert TRAINING_PRESETS["lease"].decoding == OFFICIAL_DECODING
    calibrated = json.loads((SHIPPED / "presets.json").read_text())
    assert (calibrated["S"]["threshold"], calibrated["Q"]["threshold"]) == (0.3, 0.7)
    assert shipped["name"] == "llada2-lease-moe"
    assert TRAINING_PRESETS["code"].decoding == OFFICIAL_DECODING


def test_presets_and_overrides_are_checked():
    assert preset_config("code", minutes=5.0).minutes == 5.0
    with pytest.raises(ValueError, match="unknown training preset 'huge'; choose from tiny, v1, code"):
        preset_config("huge")
    with pytest.raises(ValueError, match="unknown training setting 'speed'"):
        preset_config("tiny", speed=2)
    with pytest.raises(ValueError, match=r"code_share must be in \[0, 1\], got 1.5"):
        preset_config("tiny", code_share=1.5)
    with pytest.raises(ValueError, match="compile must be auto, on or off, got 'yes'"):
        preset_config("tiny", compile="yes")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            preset_config("code", device="cuda")


def test_command_line_overrides_only_what_it_names(capsys):
    tc, args = parse_args(["--preset", "code", "--minutes", "5", "--block-lengths", "32,64", "--roots", "a,b"])
    assert tc.minutes == 5.0 and tc.block_lengths == (32, 64) and tc.roots == ("a", "b")
    assert tc.hidden == TRAINING_PRESETS["code"].values["hidden"] and tc.preset == "code" and not args.dry_run
    with pytest.raises(SystemExit):
        parse_args(["--minutes", "5"])  # --preset is required
    assert "--preset" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--preset", "tiny", "--window-share", "2"])
    assert "window_share must be in [0, 1], got 2.0" in capsys.readouterr().err  # one line, no traceback


# ---- sharded export --------------------------------------------------------------------------------

def test_sharded_bf16_checkpoint_loads_through_the_engine_loader(tmp_path):
    model = small_model()
    paths = save_sharded(model, tmp_path, extra_config={"mask_token_id": 60, "eos_token_id": 0},
                         max_bytes=20_000)
    index = json.loads((tmp_path / INDEX).read_text())
    assert len(paths) >= 3
    for path in paths:
        with safe_open(str(path), framework="pt") as f:
            data = sum(f.get_tensor(k).nbytes for k in f.keys())
        assert data <= 20_000 and path.stat().st_size < data + 4_000  # tensors within the bound, + a JSON header
    assert set(index["weight_map"]) == set(hf_state_dict(model)) and set(index["weight_map"].values()) == \
        {p.name for p in paths}
    assert index["metadata"]["total_size"] == 2 * sum(p.numel() for p in model.parameters()) + 2 * sum(
        b.numel() for n, b in model.named_buffers() if n.endswith("expert_bias"))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and config["mask_token_id"] == 60
    loaded = load_model(tmp_path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a.to(torch.bfloat16).float(), b), name  # bf16 rounding, nothing else


def test_a_second_save_replaces_the_first_shards(tmp_path):
    save_sharded(small_model(), tmp_path, max_bytes=20_000)
    save_sharded(small_model(), tmp_path)  # one shard now
    assert [p.name for p in tmp_path.glob("model-*.safetensors")] == ["model-00001-of-00001.safetensors"]
    load_model(tmp_path)


def test_one_tensor_larger_than_a_shard_gets_a_shard_of_its_own():
    tensors = {"a": torch.zeros(10), "b": torch.zeros(100), "c": torch.zeros(10)}  # 40, 400, 40 bytes
    assert plan_shards(tensors, max_bytes=100) == [["a"], ["b"], ["c"]]
    assert plan_shards(tensors, max_bytes=1000) == [["a", "b", "c"]]


def test_loss_ends_average_a_tenth_of_each_kind():
    from llada.train.logs import loss_ends

    log = [{"kind": "task", "loss": float(v)} for v in range(100)] + [{"kind": "code", "loss": 5.0}]
    assert loss_ends(log, "task") == (4.5, 94.5)  # ten steps each: 0..9 and 90..99
    assert loss_ends(log, "code") == (5.0, 5.0) and loss_ends(log, "window") is None


# ---- whole runs ------------------------------------------------------------------------------------

def tiny_run_config(tmp_path: Path, **overrides):
    write_tree(tmp_path / "src")
    values = dict(out=str(tmp_path / "out"), roots=(str(tmp_path / "src"),), steps=40, code_share=0.5,
                  vocab_size=300, bpe_chars=100_000) | overrides
    return preset_config("tiny", **values)


def test_a_tiny_training_run_loss_falls_and_leaves_a_model_dir(tmp_path):
    tc = tiny_run_config(tmp_path)
    summary = train(tc, progress=False)
    out = Path(tc.out)
    assert summary["steps"] == 40 and summary["data"]["train_files"] == 6 and summary["data"]["held_out_files"] == 1
    rows = [line.split(",") for line in (out / "loss.csv").read_text().splitlines()[1:]]
    for kind in ("task", "window", "function"):
        losses = [float(r[4]) for r in rows if r[2] == kind]
        # random init starts near ln(300) ~ 5.7; measured: the last three are 30-60% below the first three
        assert sum(losses[-3:]) < 0.85 * sum(losses[:3]), (kind, losses)
    for name in ("config.json", INDEX, "tokenizer.json", "tokenizer_config.json", "presets.json", "loss.csv",
                 "loss.png", "training.json"):
        assert (out / name).exists(), name
    assert json.loads((out / "presets.json").read_text()) == json.loads(json.dumps(OFFICIAL_DECODING))
    pipe = Pipeline.load(out)  # the same loader as real checkpoints
    assert pipe.model.config.num_experts == 16 and pipe.mask_id != pipe.eos_id
    trace = pipe.generate(pipe.encode("def area(width, height):\n"), pipe.config("S", gen_length=16))
    assert trace.forwards >= 1


def test_a_failing_compiled_layer_falls_back_to_eager(tmp_path, capsys):
    run = setup(tiny_run_config(tmp_path), progress=False)

    def broken(*args, **kwargs):
        raise RuntimeError("inductor: no C compiler")

    for layer in run.built.model.layers:
        layer._compiled_call_impl = broken  # what nn.Module.compile installs, failing as a compile would
    run.compiled = True
    record = train_step(run, 0, 1e-3)
    assert record["loss"] > 0 and not run.compiled
    assert all(layer._compiled_call_impl is None for layer in run.built.model.layers)
    assert "torch.compile failed (RuntimeError: inductor: no C compiler); continuing eagerly" in capsys.readouterr().out


def test_the_command_trains_evaluates_and_writes_the_card(tmp_path, capsys):
    write_tree(tmp_path / "src")
    out = tmp_path / "out"
    main(["--preset", "tiny", "--out", str(out), "--roots", str(tmp_path / "src"), "--steps", "6",
          "--vocab-size", "300", "--bpe-chars", "100000", "--eval-n", "1", "--code-n", "2", "--samples", "3",
          "--eval-gen-length", "16"])
    printed = capsys.readouterr().out
    assert "corpus: 6 training files" in printed and "active per token" in printed  # the plan
    report = json.loads((out / "eval.json").read_text())
    assert report["n"] == 1 and report["code"]["n"] == 2 and set(report["code"]["modes"]) == set(report["modes"])
    card = (out / "README.md").read_text()
    for part in ("python -m llada.train --preset tiny", "6 training files", "![loss](loss.png)",
                 "| S_MBE |", "code track: 2 held-out functions", "## Presets", "## Samples"):
        assert part in card, part
    assert card.count("```python") == 3  # the samples, unedited
    summary = json.loads((out / "training.json").read_text())
    assert summary["eval_seconds"] > 0 and summary["steps"] == 6


def test_a_run_trained_on_a_gpu_is_evaluated_on_this_cpu_and_its_card_says_where(tmp_path, monkeypatch):
    write_tree(tmp_path / "src")
    out = tmp_path / "out"
    common = ["--preset", "tiny", "--out", str(out), "--roots", str(tmp_path / "src"), "--vocab-size", "300",
              "--bpe-chars", "100000"]
    main(common + ["--steps", "2", "--no-eval"])
    summary = json.loads((out / "training.json").read_text())
    (out / "training.json").write_text(json.dumps(summary | {"device": "NVIDIA H200", "device_type": "cuda"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU lease's run, back on a CPU machine
    main(common + ["--eval-only", "--eval-n", "1", "--code-n", "0", "--samples", "1", "--eval-gen-length", "8"])
    assert json.loads((out / "eval.json").read_text())["n"] == 1
    assert json.loads((out / "training.json").read_text())["eval_device"].startswith("CPU (")
    card = (out / "README.md").read_text()
    assert "Device: NVIDIA H200" in card and "thread(s)), not the training device (TPS depends on it)" in card


def test_a_resumed_run_continues_exactly_where_it_stopped(tmp_path):
    tc = tiny_run_config(tmp_path, pack=True, block_lengths=(16, 32), checkpoint_minutes=60.0)
    run = setup(tc, progress=False)
    for step in range(3):
        run.log.append(train_step(run, step, 1e-3))
    save_state(run, 3, 12.0)
    going_on = [train_step(run, step, 1e-3)["loss"] for step in (3, 4)]
    again = setup(tc, progress=False, resume=True)  # tokenizer and rows from OUT, state from OUT/resume.pt
    assert load_state(again) == (3, 12.0) and len(again.log) == 3
    assert [train_step(again, step, 1e-3)["loss"] for step in (3, 4)] == going_on


def test_the_command_checkpoints_and_resumes(tmp_path, capsys):
    write_tree(tmp_path / "src")
    out = tmp_path / "out"
    common = ["--preset", "tiny", "--out", str(out), "--roots", str(tmp_path / "src"), "--vocab-size", "300",
              "--bpe-chars", "100000", "--checkpoint-minutes", "30", "--pack", "true", "--no-eval"]
    main(common + ["--steps", "4"])
    assert (out / "resume.pt").exists() and (out / "rows.pt").exists()
    first = json.loads((out / "training.json").read_text())
    assert first["steps"] == 4 and len(first["curve"]) == 1 and first["curve"][0]["step"] == 4
    assert len(list((out / "checkpoints").iterdir())) == 1
    assert "parse" in capsys.readouterr().err  # the first run parsed the corpus
    main(common + ["--steps", "7", "--resume"])
    second = json.loads((out / "training.json").read_text())
    assert second["steps"] == 7 and [p["step"] for p in second["curve"]] == [4, 7]
    assert second["curve"][1]["held_out_loss"] > 0
    assert "parse" not in capsys.readouterr().err  # the resumed run did not parse the corpus again
    assert Pipeline.load(out / "checkpoint").model.config.num_experts == 16
    main(common + ["--eval-only", "--eval-n", "1", "--code-n", "2", "--samples", "2", "--eval-gen-length", "16",
                   "--checkpoint-code-n", "2"])
    assert all(0 <= p["parses"] <= 1 for p in json.loads((out / "training.json").read_text())["curve"])
    card = (out / "README.md").read_text()
    assert card.count("python -m llada.train --preset tiny") == 2 and "--resume" in card  # both commands
    assert "## Learning curves" in card and "![held-out loss](curve.png)" in card and (out / "curve.png").exists()
    assert "Function rows are packed" in card and json.loads((out / "training.json").read_text())["steps"] == 7
    (out / "README.md").unlink()
    main(common + ["--eval-only", "--card-only", "--pilots", str(out)])  # the run as its own pilot: no new eval
    assert "| pilot hidden 64, 2 layers |" in (out / "README.md").read_text()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "training.json").write_text((out / "training.json").read_text())
    with pytest.raises(SystemExit, match="--card-only: .*eval.json does not exist"):
        main(["--preset", "tiny", "--out", str(bare), "--eval-only", "--card-only"])


def test_a_preset_that_says_what_its_model_knows_writes_model_info(tmp_path):
    run = setup(tiny_run_config(tmp_path, steps=1), progress=False)
    run.tc = preset_config("cpu", out=run.tc.out)
    out = save_dir(run, tmp_path / "model")
    assert json.loads((out / "model_info.json").read_text()) == {"knows": TRAINING_PRESETS["cpu"].knows}
    assert Pipeline.load(out).model.config.num_experts == 16


def test_the_pilot_paragraph_names_the_size_that_ended_lowest():
    from llada.card.write import pilot_verdict

    def pilot(name, params, loss, step):
        return {"name": name, "parameters": params, "active": params // 2,
                "curve": [{"minutes": 12.0, "step": step, "held_out_loss": loss}]}

    assert pilot_verdict([pilot("pilot hidden 128, 3 layers", 1_300_000, 2.9, 291)]) == []
    text = " ".join(pilot_verdict([pilot("pilot hidden 128, 3 layers", 1_300_000, 2.86, 291),
                                   pilot("pilot hidden 256, 6 layers", 10_500_000, 4.05, 46)]))
    assert "at 2 sizes" in text and "(291 steps)" in text and "(46 steps)" in text
    assert "Lowest held-out loss at the end: pilot hidden 128, 3 layers" in text and "2.860 after 12 minutes" in text
