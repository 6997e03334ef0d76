"""Expert parallel across ranks (`llada.dist`): each rank's slice, exact agreement with one process, refusals.

The agreement tests start 2 gloo ranks with `torchrun --standalone` (a free port of its own) in a subprocess
with a generous timeout: torchrun ends every rank when one fails, so a failure is an exit, never a hang.
float64 makes one process and two ranks round alike enough that every choice (an argmax, a threshold) is the
same: the ranks sum each token's experts in another order (their slices, then the all-reduce) than one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.dist.experts import ShardedExperts, expert_slice
from llada.dist.group import Ranks
from llada.model import LLaDA2MoE
from llada.pipeline import Pipeline
from llada.weights.checkpoint import load_model, plan
from llada.weights.replica import write_replica

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT = 600  # seconds for a whole 2-rank run on a loaded machine; a hang would fail here, not block CI
IDS = {"llada2_tiny_ref": {"mask_id": 258, "eos_id": 257}}  # the fixture has no tokenizer to name them
FIXTURE_RUN = ["--prompt-ids", "1,2,3,4,5", "--mask-id", "258", "--eos-id", "257", "--gen-length", "32",
               "--block-length", "8"]  # 86 decode forwards on the fixture: blocks with drafts, edits and reverts


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> dict[str, Path]:
    """Tiny LLaDA2.1 and LLaDA2.2 replicas in the real format: 3 shards, per-expert tensor names, a tokenizer."""
    root = tmp_path_factory.mktemp("replicas")
    return {v: write_replica(root / v, shape="tiny", seed=3, version=v) for v in ("2.1", "2.2")}


def launch(ranks: int, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node RANKS ARGS...` from the repository root."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", str(ranks), *args],
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)


def torchrun(ranks: int, *args: str) -> subprocess.CompletedProcess:
    return launch(ranks, "-m", "llada", "generate", *args)


def one_process(model: Path, prompt: list[int] | str, **settings) -> dict:
    """One process's run (in this process): the summary `python -m llada generate --json` prints."""
    pipe = Pipeline.load(model, dtype=torch.float64, **IDS.get(model.name, {}))
    ids = pipe.encode(prompt) if isinstance(prompt, str) else prompt
    return pipe.generate(ids, pipe.config("S", **settings)).summary()


def test_expert_slices_tile_the_experts():
    assert [expert_slice(16, r, 4) for r in range(4)] == [range(0, 4), range(4, 8), range(8, 12), range(12, 16)]
    with pytest.raises(ValueError, match=r"16 experts over 3 ranks leaves 1 over; run on one of 2, 4, 8, 16 ranks"):
        expert_slice(16, 0, 3)


def test_a_rank_plans_and_loads_only_its_experts(fixture_dir):
    full = load_model(fixture_dir, dtype=torch.float64)
    rank1 = load_model(fixture_dir, dtype=torch.float64, ranks=Ranks(1, 2))
    experts = rank1.layers[1].mlp.experts
    assert isinstance(experts, ShardedExperts) and experts.first_expert == 8 and experts.w13.shape[0] == 8
    torch.testing.assert_close(experts.w13, full.layers[1].mlp.experts.w13[8:], rtol=0, atol=0)
    torch.testing.assert_close(experts.w2, full.layers[1].mlp.experts.w2[8:], rtol=0, atol=0)
    torch.testing.assert_close(rank1.lm_head.weight, full.lm_head.weight, rtol=0, atol=0)  # replicated
    with torch.device("meta"):
        meta = LLaDA2MoE(rank1.config).double()
    from llada.dist.experts import shard_experts

    read = {entry.name for entry, _ in plan(fixture_dir, shard_experts(meta, 0, 2))}
    assert "model.layers.1.mlp.experts.7.down_proj.weight" in read
    assert not any(f".experts.{e}." in name for name in read for e in range(8, 16))  # rank 1's: never read


def test_the_fast_engine_across_ranks_is_refused(fixture_dir):
    with pytest.raises(ValueError, match="fast engine"):
        Pipeline.load(fixture_dir, mask_id=258, eos_id=257, engine="fast", ranks=Ranks(0, 2))


def test_float64_is_refused_off_the_cpu(fixture_dir, capsys):
    from llada.__main__ import main

    assert main(["generate", "--model", str(fixture_dir), *FIXTURE_RUN, "--dtype", "float64", "--device", "meta"]) == 2
    assert "--dtype float64 runs on the CPU only" in capsys.readouterr().err


def test_two_ranks_in_float64_decode_as_one_process(fixture_dir):
    alone = one_process(fixture_dir, [1, 2, 3, 4, 5], gen_length=32, block_length=8)
    ranks = torchrun(2, "--model", str(fixture_dir), *FIXTURE_RUN, "--dtype", "float64", "--json")
    assert ranks.returncode == 0, ranks.stderr
    lines = ranks.stdout.strip().splitlines()
    assert len(lines) == 1, "rank 0 prints the result, once"
    assert_same_run(json.loads(lines[0]), alone)


REPLICA_RUNS = {  # 2.2's block routing needs whole 32-token blocks; max_post_steps 2 keeps the edits, fewer forwards
    "2.1": {"gen_length": 16, "block_length": 16, "max_post_steps": 2},  # 31 decode forwards
    "2.2": {"gen_length": 32, "block_length": 32, "max_post_steps": 2},  # 47: block routing, the Levenshtein rule
}
REPLICA_SCRIPT = """
import json, sys, torch
from llada.dist.group import Ranks
from llada.pipeline import Pipeline

ranks = Ranks.start(torch.device("cpu"))
out = {}
for version, model in json.loads(sys.argv[2]).items():
    pipe = Pipeline.load(model, dtype=torch.float64, ranks=ranks)
    settings = json.loads(sys.argv[3])[version]
    out[version] = pipe.generate(pipe.encode("def add(a, b):"), pipe.config("S", **settings)).summary()
ranks.stop()
if ranks.lead:
    json.dump(out, open(sys.argv[1], "w"))
"""


def test_two_ranks_in_float64_decode_the_replicas_as_one_process(replicas, tmp_path):
    """Both replicas in one 2-rank launch (a launch costs seconds of start-up), through the Python API."""
    script, result = tmp_path / "replicas.py", tmp_path / "ranks.json"
    script.write_text(REPLICA_SCRIPT)
    run = launch(2, str(script), str(result), json.dumps({v: str(p) for v, p in replicas.items()}),
                 json.dumps(REPLICA_RUNS))
    assert run.returncode == 0, run.stderr
    split = json.loads(result.read_text())
    for version, settings in REPLICA_RUNS.items():
        assert_same_run(split[version], one_process(replicas[version], "def add(a, b):", **settings))


def assert_same_run(split: dict, alone: dict) -> None:
    assert split["output_ids"] == alone["output_ids"]
    assert split["block_states_before_each_forward"] == alone["block_states_before_each_forward"]
    assert split["num_decode_forwards"] == alone["num_decode_forwards"] > 1
    assert split["edits"] == alone["edits"] > 0  # decisions that edit, not only drafts


def test_a_world_size_that_does_not_divide_the_experts_is_one_error(fixture_dir):
    out = torchrun(3, "--model", str(fixture_dir), *FIXTURE_RUN)
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr  # rank 0 says it; the others exit quietly
    assert "16 experts over 3 ranks leaves 1 over" in errors[0]


RANK_SCRIPT = '''
import json, sys, torch
from llada.dist.group import RankError, Ranks

ranks = Ranks.start(torch.device("cpu"))
out = {}
try:  # rank 1 alone brings an error (a checkpoint it could not read, say): every rank hears of it
    ranks.agree(ValueError("only here") if ranks.rank == 1 else None)
except RankError as err:
    out["agree"] = str(err)
out["decided"] = ranks.decided(lambda: f"rank {ranks.rank} decides")  # only rank 0 runs it
def fails():
    raise ValueError("no decision")
try:
    ranks.decided(fails)
except (RankError, ValueError) as err:
    out["failed"] = f"{type(err).__name__}: {err}"
ranks.agree(None)
ranks.stop()
json.dump(out, open(f"{sys.argv[1]}/rank{ranks.rank}.json", "w"))
'''


def test_ranks_agree_on_errors_and_take_rank_0s_decisions(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    run = launch(2, str(script), str(tmp_path))
    assert run.returncode == 0, run.stderr
    outs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [o["agree"] for o in outs] == ["rank 1 failed: ValueError: only here"] * 2
    assert [o["decided"] for o in outs] == ["rank 0 decides"] * 2
    assert outs[0]["failed"] == "ValueError: no decision"  # raised on rank 0 as it is
    assert outs[1]["failed"] == "RankError: rank 0 failed: ValueError: no decision"


def test_a_rank_is_sized_by_its_share_of_the_experts():
    from llada.config import ModelConfig
    from llada.weights.memory import GIB, does_not_fit, weight_bytes
    from llada.weights.replica import replica_config

    flash = ModelConfig.from_dict(replica_config("flash"))
    experts = flash.parameter_counts()["routed_experts"] * 2  # bf16 bytes
    whole, half = weight_bytes(flash, torch.bfloat16), weight_bytes(flash, torch.bfloat16, world=2)
    assert whole - half == experts // 2  # one rank holds half the routed experts, all the rest
    assert does_not_fit(flash, torch.bfloat16, "cpu", room=140 * GIB, world=2) is None  # fits a 141 GB H200
    why = does_not_fit(flash, torch.bfloat16, "cpu", room=80 * GIB, world=2)
    assert why is not None and "GiB per rank of 2 in bfloat16" in why


def test_a_checkpoint_only_one_rank_cannot_read_stops_every_rank(fixture_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    raw = json.loads((fixture_dir / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps(raw | {"moe_intermediate_size": 48}))  # shapes the file lacks
    (broken / "model.safetensors").symlink_to(fixture_dir / "model.safetensors")
    script = tmp_path / "one_rank_broken.py"
    script.write_text("import os, sys\nfrom llada.__main__ import main\n"
                      f"model = {str(fixture_dir)!r} if os.environ['RANK'] == '0' else {str(broken)!r}\n"
                      f"sys.exit(main(['generate', '--model', model, *{FIXTURE_RUN!r}]))\n")
    run = launch(2, str(script))
    assert run.returncode != 0
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr  # rank 0, which loaded its slice, reports rank 1's error
    assert errors[0].startswith("error: rank 1 failed: CheckpointError:") and "has shape" in errors[0], errors[0]
