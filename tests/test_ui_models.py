"""Which checkpoints the playground offers, by name, and why the others are not: local directories, preloaded
hub snapshots, broken models, models too big for the machine, resident loading and ZeroGPU slots."""

import json
import shutil

import pytest

from llada.weights.replica import replica_config
from ui import models as m
from ui import zerogpu
from ui.playground.run import generate_ui

GIB = 2**30
CPU16 = m.Runtime("cpu", "cpu", room=16 * GIB)  # a CPU Space with 16 GiB


def _fake_hub_cache(root, repo, source):
    """The hub cache layout: models--org--name/{refs/main, snapshots/<rev>/...}."""
    base = root / ("models--" + repo.replace("/", "--"))
    rev = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(source, base / "snapshots" / rev)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return base / "snapshots" / rev


def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def test_preloaded_repos_come_from_spaces_yaml(tmp_path):
    f = tmp_path / "spaces.yaml"
    f.write_text("sdk: gradio\npreload_from_hub:\n  - org/model config.json,model.safetensors\n  - org/other\n")
    assert m.preloaded_repos(f) == ["org/model", "org/other"]
    assert m.preloaded_repos(tmp_path / "none.yaml") == []


def test_hub_snapshots_are_found_locally_named_by_repo_and_never_downloaded(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    snap = _fake_hub_cache(tmp_path, "org/model", tiny_model_dir)
    assert m.hub_snapshots(["org/model", "org/absent"]) == [("org/model", str(snap))]
    monkeypatch.setattr(m, "preloaded_repos", lambda: ["org/model"])
    dirs = m.model_dirs([str(tiny_model_dir), str(tiny_model_dir)], env="", default=None)
    assert dirs == [str(tiny_model_dir), ("org/model", str(snap))]  # duplicates once, hub models by repo
    offered = m.Models(dirs, rt=CPU16)
    assert offered.choices() == [("tiny-random", str(tiny_model_dir)), ("org/model", str(snap))]


def test_names_are_unique(tiny_model_dir, tmp_path):
    second = _copy(tiny_model_dir, tmp_path / "again")
    models = m.Models([str(tiny_model_dir), second], rt=CPU16)
    assert models.names() == ["tiny-random", "tiny-random (2)"]
    assert models.path_of("tiny-random (2)") == second


def test_a_model_that_does_not_fit_is_not_offered_and_says_why(tmp_path, tiny_model_dir):
    """The mini on a 16 GiB CPU Space: refused from its config.json alone, before any weight is read."""
    mini = tmp_path / "mini"
    mini.mkdir()
    (mini / "config.json").write_text(json.dumps(replica_config("mini")))  # no weights at all
    models = m.Models([("inclusionAI/LLaDA2.1-mini", str(mini)), str(tiny_model_dir)], rt=CPU16)
    assert models.names() == ["tiny-random"]
    (withheld,) = models.withheld
    assert withheld.name == "inclusionAI/LLaDA2.1-mini"
    assert ("not offered on this CPU machine: the weights need 30.3 GiB in bfloat16 but cpu has 16.0 GiB"
            in withheld.reason)
    assert "inclusionAI/LLaDA2.1-mini: not offered" in models.note()
    with pytest.raises(ValueError, match="model 'inclusionAI/LLaDA2.1-mini' is not offered: .*30.3 GiB"):
        models.path_of("inclusionAI/LLaDA2.1-mini")
    big = m.Models([("inclusionAI/LLaDA2.1-mini", str(mini))], rt=m.Runtime("cpu", "cpu", room=64 * GIB))
    assert big.names() == ["inclusionAI/LLaDA2.1-mini"]  # a CPU machine with the memory offers it (bf16)
    assert big.offered[0].note.startswith("bfloat16, 16.26 B parameters")


FLASH = dict(hidden_size=4096, num_hidden_layers=32, moe_intermediate_size=1024, intermediate_size=9216,
             num_attention_heads=32, num_key_value_heads=4, head_dim=128)  # LLaDA2.1-flash's sizes (102.9 B)


def test_flash_is_offered_in_fp8_where_only_fp8_fits(tmp_path):
    flash = tmp_path / "flash"
    flash.mkdir()
    (flash / "config.json").write_text(json.dumps(replica_config("mini", **FLASH)))  # no weights at all
    h200 = m.Models([("inclusionAI/LLaDA2.1-flash", str(flash))], rt=m.Runtime("cuda", "cuda", 139 * GIB, fp8=True))
    (offered,) = h200.offered
    assert offered.quantize == "fp8"
    assert offered.note == "bfloat16 with FP8 experts (quantized at load), 102.89 B parameters, 98.67 GiB"
    a100 = m.Models([("flash", str(flash))], rt=m.Runtime("cuda", "cuda", 139 * GIB, fp8=False))
    assert not a100.offered and "need 191.6 GiB in bfloat16 but cuda has 139.0 GiB" in a100.withheld[0].reason
    zero = m.Models([("flash", str(flash))], rt=m.Runtime("zerogpu", "cuda", m.ZEROGPU_ROOM, fp8=True))
    assert not zero.offered and "98.7 GiB in bfloat16 with fp8 experts but cuda has 70.0 GiB" in zero.withheld[0].reason


def test_a_group_offers_quantized_experts_where_only_they_fit_a_rank(tmp_path):
    """Across ranks (`torchrun ... app.py`) the loader splits quantized experts too: sized by one rank's share."""
    flash, mini = tmp_path / "flash", tmp_path / "mini"
    for root, config in ((flash, replica_config("mini", **FLASH)), (mini, replica_config("mini"))):
        root.mkdir()
        (root / "config.json").write_text(json.dumps(config))  # no weights at all
    h100s = m.Models([("flash", str(flash))], rt=m.Runtime("cuda", "cuda", 79.6 * GIB, fp8=True), world=2)
    (offered,) = h100s.offered  # bf16 needs 98.6 GiB per rank of 2: FP8 experts, 52.2
    assert offered.quantize == "fp8" and offered.note.endswith("52.16 GiB per rank of 2")
    cpus = m.Models([("mini", str(mini))], rt=CPU16, world=2)
    (offered,) = cpus.offered  # bf16 needs about 16 GiB per rank of 2: int8, 8.6
    assert offered.quantize == "int8" and offered.note.endswith("8.64 GiB per rank of 2")


def test_an_fp8_checkpoint_is_sized_in_fp8_and_withheld_on_a_gpu_without_it(tmp_path, tiny_model_dir):
    from llada.weights.fp8_checkpoint import convert

    convert(tiny_model_dir, tmp_path / "fp8")
    cpu = m.Models([("tiny-fp8", str(tmp_path / "fp8"))], rt=CPU16)
    assert cpu.offered[0].quantize == "fp8" and "with FP8 experts," in cpu.offered[0].note
    pipe = cpu.get("tiny-fp8")
    assert type(pipe.model.layers[-1].mlp.experts).__name__ == "FP8Experts"
    a100 = m.Models([("tiny-fp8", str(tmp_path / "fp8"))], rt=m.Runtime("cuda", "cuda", 80 * GIB, fp8=False))
    assert "an FP8 checkpoint needs a GPU of compute capability 8.9 or later" in a100.withheld[0].reason


def test_models_share_the_room(tmp_path, tiny_model_dir):
    import torch

    from llada.weights import memory
    from llada.weights.checkpoint import read_config

    cfg = read_config(tiny_model_dir)[0]
    need, int8 = memory.weight_bytes(cfg, torch.float32), memory.weight_bytes(cfg, torch.bfloat16, "int8")
    room = m.Runtime("cpu", "cpu", room=memory.HEADROOM + need + int8 // 2)  # room for one, not two (nor in int8)
    models = m.Models([str(tiny_model_dir), _copy(tiny_model_dir, tmp_path / "b")], rt=room)
    assert models.names() == ["tiny-random"] and "GiB" in models.withheld[0].reason
    assert "with int8 weights they need" in models.withheld[0].reason
    room = m.Runtime("cpu", "cpu", room=memory.HEADROOM + need + int8 + (need - int8) // 2)  # the second: int8 only
    models = m.Models([str(tiny_model_dir), _copy(tiny_model_dir, tmp_path / "c")], rt=room)
    assert [o.quantize for o in models.offered] == [None, "int8"]
    assert models.offered[1].note.startswith("bfloat16 with int8 weights (quantized at load)")
    assert type(models.get(models.offered[1].path).model.layers[-1].mlp.experts).__name__ == "Int8Experts"


@pytest.mark.parametrize("breakage, words", [
    (lambda d: (d / "presets.json").write_text('{"S": {"threshold": 3}}'), "presets.json: mode S: threshold"),
    (lambda d: (d / "config.json").write_text('{"model_type": "llada2_moe"}'), "config.json: missing required key"),
])
def test_a_broken_default_model_never_stops_the_app(tmp_path, tiny_model_dir, breakage, words):
    from ui.demo import build_demo

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model_dir, bad)
    breakage(bad)
    models = m.Models([str(bad), str(tiny_model_dir)], rt=CPU16)
    assert models.default == str(tiny_model_dir) and words in models.note()
    demo = build_demo(models, recordings={})
    selector = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "model")
    assert words in selector.info  # the reason is on screen, under the model selector
    alone = m.Models([str(bad)], rt=CPU16)
    build_demo(alone, recordings={})  # nothing offered: the app still starts
    with pytest.raises(ValueError, match=f"no model is offered: bad: .*{words}"):
        alone.get(None)


def test_weights_that_fail_to_load_show_on_screen_and_withhold_the_model(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_model_dir, bad)
    (bad / "model.safetensors").write_bytes(b"\0" * 64)
    models = m.Models([str(bad), str(tiny_model_dir)], rt=CPU16)
    assert models.default == str(bad)  # config and presets are fine: offered until it is loaded
    frames = list(generate_ui(models, model=str(bad), prompt="def add(", mode="S", block_length=8, gen_length=8,
                              max_post_steps=4))
    assert "cannot read safetensors file" in frames[0].error and "model.safetensors" in frames[0].error
    models.load_resident()  # ZeroGPU's start: the broken one is withheld, the others are loaded
    assert models.names() == ["tiny-random (2)"] and "tiny-random: failed to load" in models.note()


def test_path_of_accepts_only_offered_names(tiny_model_dir):
    models = m.Models([str(tiny_model_dir)], rt=CPU16)
    assert models.path_of("tiny-random") == str(tiny_model_dir)
    assert models.path_of("") is None and models.path_of(None) is None  # the default
    with pytest.raises(ValueError, match="unknown model '/etc'; choose one of: tiny-random"):
        models.path_of("/etc")
    assert models.get("tiny-random").name == "tiny-random"


def test_gpu_slots_are_sized_from_the_request(monkeypatch):
    from ui import runs

    monkeypatch.setattr(runs, "BUDGET", runs.Budget())  # the app's: 30 s a request (the tests' own is longer)
    budget = runs.BUDGET.seconds
    short, long = m.gpu_seconds(32, 32), m.gpu_seconds(512, 32)
    assert budget <= short <= long <= zerogpu.MAX_SLOT  # never below the request budget
    assert m.gpu_seconds(128, 4, runs=2) >= m.gpu_seconds(128, 4)
    assert m.gpu_seconds(10**6, 4) == zerogpu.MAX_SLOT and m.gpu_seconds("x", None) >= budget


def _trace(*seconds):
    from types import SimpleNamespace

    return SimpleNamespace(records=[SimpleNamespace(kind="decode", seconds=s) for s in seconds])


def test_slots_follow_the_forward_time_measured_on_the_first_gpu_call(monkeypatch):
    from ui import runs

    monkeypatch.setattr(runs, "BUDGET", runs.Budget(forwards=1024, seconds=30.0))
    clock = zerogpu.SlotClock()
    monkeypatch.setattr(m, "CLOCK", clock)
    # 512 tokens in blocks of 32: 17 blocks x (32 + 16 post + 2) = 850 forwards
    assert m.gpu_seconds(512, 32) == zerogpu.MAX_SLOT  # at the assumed 0.12 s a forward: over the longest slot
    clock.observe(_trace(9.0, 0.020, 0.022, 0.021, 0.021))  # the first call: a compile, then forwards of ~21 ms
    assert clock.per_forward == 0.021
    clock.observe(_trace(0.5, 0.5, 0.5))  # kept: later calls do not move it
    assert clock.per_forward == 0.021
    assert m.gpu_seconds(512, 32) == 30  # 850 x 0.021 x 1.25 = 22 s: the budget's 30 s
    assert m.gpu_seconds(512, 32, runs=2) == 45  # S vs Q: 1,700 forwards = 44.6 s
    clock.weights = 30 * 2**30  # a new worker copies 30 GiB (3.75 s at 8 GiB/s) and sets its engine up (20 s)
    assert m.gpu_seconds(32, 32) == 54 and m.gpu_seconds(512, 32, runs=2) == 69
    assert clock.sweep_seconds(10.0) == 64  # transfer + 30 s of sweeping + a decode in flight


def test_zerogpu_is_read_from_the_environment_without_touching_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("CUDA touched before spaces"))
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert m.runtime() == m.Runtime("zerogpu", "cuda", m.ZEROGPU_ROOM, fp8=True)  # an H200 slice
    monkeypatch.setenv("SPACES_ZERO_GPU", "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert m.runtime().kind == "cpu"  # a CPU Space: `spaces` is installed there too, but it is not ZeroGPU


def test_on_gpu_wraps_only_on_zerogpu(monkeypatch):
    import sys
    import types

    calls = []
    fake = types.ModuleType("spaces")
    fake.GPU = lambda fn, duration=60: calls.append(duration) or fn
    monkeypatch.setitem(sys.modules, "spaces", fake)

    def handler(gen, block):
        yield gen

    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert m.on_gpu(handler, seconds=lambda g, b: m.gpu_seconds(g, b)) is handler and calls == []
    monkeypatch.setenv("SPACES_ZERO_GPU", "1")
    m.on_gpu(seconds=lambda g, b: m.gpu_seconds(g, b))(handler)
    assert callable(calls[0]) and calls[0](64, 32) == m.gpu_seconds(64, 32)
