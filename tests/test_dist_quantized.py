"""Quantized experts across ranks (`llada.dist.experts`): int8 and FP8 slices, at load and from a directory.

Each rank quantizes (or reads) only its own experts; each pair then runs through the kernels one process runs
it through, so the ranks differ from one process only in the order a token's experts are summed. float64 keeps
that order's differences near 1e-16 of a logit: every choice is the same (2 gloo ranks, one launch).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from llada.dist.experts import ShardedExperts, ShardedFP8Experts, ShardedInt8Experts, shard_experts
from llada.dist.group import Ranks
from llada.dist.serve import sharded_layers
from llada.model import LLaDA2MoE
from llada.pipeline import Pipeline
from llada.weights import checkpoint, fp8_checkpoint, int8_checkpoint
from llada.weights.checkpoint import CheckpointError, load_model, plan
from llada.weights.replica import write_replica
from test_dist import IDS, assert_same_run, launch

SLICES = {"int8": ShardedInt8Experts, "fp8": ShardedFP8Experts}


@pytest.fixture(scope="module")
def stored(fixture_dir, tmp_path_factory) -> dict[str, Path]:
    """The fixture written as an int8 and as an FP8 checkpoint (experts stacked, several shards)."""
    root = tmp_path_factory.mktemp("quantized")
    int8_checkpoint.convert(fixture_dir, root / "int8", shard_bytes=40_000)
    fp8_checkpoint.convert(fixture_dir, root / "fp8", shard_bytes=40_000)
    return {"int8": root / "int8", "fp8": root / "fp8"}


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8) if t.dtype.itemsize == 1 else t  # fp8 has no equality of its own


def assert_rank_holds_its_slice(part, whole, rank: int, world: int, kind: str) -> None:
    """Every tensor of `part` (rank `rank`'s model) is `whole`'s, the experts' its rows of them, bit for bit."""
    experts = part.layers[1].mlp.experts
    n = whole.config.num_experts // world
    assert isinstance(experts, SLICES[kind]) and experts.first_expert == rank * n and experts.w13.shape[0] == n
    mine, all_of = part.state_dict(), whole.state_dict()
    assert mine.keys() == all_of.keys()
    for key, t in mine.items():
        want = all_of[key][rank * n:(rank + 1) * n] if ".mlp.experts." in key else all_of[key]
        assert t.dtype == want.dtype and torch.equal(as_bytes(t), as_bytes(want)), key


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_a_rank_quantizes_only_its_experts_as_one_process_does(fixture_dir, kind):
    whole = load_model(fixture_dir, quantize=kind)
    for rank in range(2):
        part = load_model(fixture_dir, quantize=kind, ranks=Ranks(rank, 2))
        assert_rank_holds_its_slice(part, whole, rank, 2, kind)
        assert sorted(sharded_layers(part)) == [1, 2]  # the app on a group (`llada.dist.serve`) finds every slice


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_a_rank_reads_only_its_rows_of_a_quantized_directory(stored, kind):
    whole = load_model(stored[kind])
    for rank in range(2):
        assert_rank_holds_its_slice(load_model(stored[kind], ranks=Ranks(rank, 2)), whole, rank, 2, kind)
    # rank 1 of 2 reads the second half of each stacked tensor's bytes, never the first
    with torch.device("meta"):
        meta = shard_experts(LLaDA2MoE(whole.config).to(whole.dtype), 1, 2)
    (checkpoint._fp8_experts if kind == "fp8" else checkpoint.int8_format.swap_modules)(meta)
    whole_plan = {entry.name: entry for entry, _ in plan(stored[kind], whole)}
    for entry, slot in plan(stored[kind], meta):
        if slot.first is not None:
            full = whole_plan[entry.name]
            assert (entry.begin, entry.end) == ((full.begin + full.end) // 2, full.end), entry.name


def test_a_world_that_does_not_divide_the_experts_is_refused_quantized_too(stored):
    with pytest.raises(CheckpointError, match="16 experts over 3 ranks leaves 1 over"):
        load_model(stored["int8"], ranks=Ranks(0, 3))


CASES_SCRIPT = """
import json, sys, torch
from llada.dist.group import Ranks
from llada.dist.serve import sharded_layers
from llada.pipeline import Pipeline

ranks = Ranks.start(torch.device("cpu"))
out = {}
for name, case in json.loads(sys.argv[2]).items():
    pipe = Pipeline.load(case["model"], dtype=torch.float64, quantize=case["quantize"], ranks=ranks, **case["ids"])
    settings = dict(case["settings"])
    prompt = settings.pop("prompt_ids", None) or pipe.encode(settings.pop("prompt"))
    out[name] = pipe.generate(prompt, pipe.config("S", **settings)).summary()
ranks.stop()
if ranks.lead:
    json.dump(out, open(sys.argv[1], "w"))
"""
REPLICA_RUN = {"prompt": "def add(a, b):", "gen_length": 16, "block_length": 16, "max_post_steps": 2}  # 31 forwards
FIXTURE_RUN = {"prompt_ids": [1, 2, 3, 4, 5], "gen_length": 16, "block_length": 8}  # ~55 forwards, with edits


def test_two_ranks_decode_quantized_models_as_one_process(fixture_dir, tmp_path):
    """int8 at load (the tiny replica: the pack kernel), an int8 directory (the fixture: the tiles kernel) and
    FP8 at load (the fixture, on the PyTorch FP8 reference) in one 2-rank launch, each against one process."""
    replica = write_replica(tmp_path / "replica", shape="tiny", seed=3, version="2.1")
    int8_checkpoint.convert(fixture_dir, tmp_path / "fixture-int8")
    cases = {
        "int8 at load": {"model": str(replica), "quantize": "int8", "ids": {}, "settings": REPLICA_RUN},
        "int8 directory": {"model": str(tmp_path / "fixture-int8"), "quantize": None,
                           "ids": IDS["llada2_tiny_ref"], "settings": FIXTURE_RUN},
        "fp8 at load": {"model": str(fixture_dir), "quantize": "fp8", "ids": IDS["llada2_tiny_ref"],
                        "settings": FIXTURE_RUN},
    }
    script, result = tmp_path / "quantized.py", tmp_path / "ranks.json"
    script.write_text(CASES_SCRIPT)
    run = launch(2, str(script), str(result), json.dumps(cases))
    assert run.returncode == 0, run.stderr
    split = json.loads(result.read_text())
    for name, case in cases.items():
        pipe = Pipeline.load(case["model"], dtype=torch.float64, quantize=case["quantize"], **case["ids"])
        settings = dict(case["settings"])
        prompt = settings.pop("prompt_ids", None) or pipe.encode(settings.pop("prompt"))
        assert_same_run(split[name], pipe.generate(prompt, pipe.config("S", **settings)).summary())


def test_ranks_of_one_machine_share_its_memory_on_the_cpu(fixture_dir, monkeypatch):
    """Each rank's share of the experts fits the machine, but not twice: the two ranks of one host are refused."""
    from llada.weights import memory

    need = memory.weight_bytes(load_model(fixture_dir, ranks=Ranks(0, 2)).config, torch.float32, world=2)
    monkeypatch.setattr(memory, "available_bytes", lambda device: memory.HEADROOM + need * 3 // 2)
    assert isinstance(load_model(fixture_dir, ranks=Ranks(0, 2)).layers[1].mlp.experts, ShardedExperts)  # a host each
    with pytest.raises(CheckpointError, match=r"refused before loading: .* \(the 2 ranks of this machine share"):
        load_model(fixture_dir, ranks=Ranks(0, 2, local=2))
