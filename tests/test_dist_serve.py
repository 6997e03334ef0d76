"""Rank 0 drives, rank 1 serves its experts (`llada.dist.serve`): decodes that run on rank 0 alone, from two
threads at once, give one process's outputs.

One 2-rank launch on the reference fixture in float64 (exact, as in tests/test_dist.py): rank 0 decodes two
prompts in two threads at once (their forwards interleave layer by layer through the lock, and with pings
every 10 ms, the idle server's keep-alive) while rank 1 only serves; the outputs and block states are
compared with one process's in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from llada.dist.group import Ranks
from llada.dist.serve import Lead, serve_experts
from llada.model import LLaDA2MoE
from llada.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT = 600  # seconds for the 2-rank run on a loaded machine; a hang fails here instead of blocking CI
PROMPTS = ([1, 2, 3, 4, 5], [7, 9, 11])
SETTINGS = {"gen_length": 16, "block_length": 8}

SCRIPT = """
import json, sys, threading, time, torch
from llada.dist.group import Ranks
from llada.dist.serve import Lead, serve_experts
from llada.pipeline import Pipeline

ranks = Ranks.start(torch.device("cpu"))
pipe = Pipeline.load(sys.argv[2], dtype=torch.float64, mask_id=258, eos_id=257, ranks=ranks)
prompts, settings = json.loads(sys.argv[3]), json.loads(sys.argv[4])
if ranks.lead:
    out = [None] * len(prompts)
    def run(i):
        out[i] = pipe.generate(prompts[i], pipe.config("S", **settings)).summary()
    with Lead(pipe.model, ranks, ping_every=0.01):
        time.sleep(0.1)  # waits for nothing: an idle spell with pings only (any length passes; more pings, more cover)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        [t.start() for t in threads]
        [t.join() for t in threads]
    json.dump(out, open(sys.argv[1], "w"))
else:
    served = serve_experts(pipe.model, ranks)
    json.dump(served, open(sys.argv[1] + ".served", "w"))
ranks.stop()
"""


def test_rank_0_decodes_alone_while_rank_1_serves_its_experts(fixture_dir, tmp_path):
    script, result = tmp_path / "serve.py", tmp_path / "lead.json"
    script.write_text(SCRIPT)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(script), str(result),
                          str(fixture_dir), json.dumps(PROMPTS), json.dumps(SETTINGS)],
                         capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    split = json.loads(result.read_text())
    pipe = Pipeline.load(fixture_dir, dtype=torch.float64, mask_id=258, eos_id=257)
    for prompt, got in zip(PROMPTS, split):
        alone = pipe.generate(prompt, pipe.config("S", **SETTINGS)).summary()
        assert got["output_ids"] == alone["output_ids"]
        assert got["block_states_before_each_forward"] == alone["block_states_before_each_forward"]
    moe_layers = sum(1 for layer in pipe.model.layers if hasattr(layer.mlp, "experts"))
    forwards = sum(s["num_decode_forwards"] + s["num_cache_forwards"] for s in split)
    assert json.loads(Path(f"{result}.served").read_text()) == moe_layers * forwards  # every layer call, once (pings
    # are not calls)


def test_only_rank_0_leads_and_only_a_split_model_serves(fixture_dir):
    with torch.device("meta"):
        whole = LLaDA2MoE(Pipeline.load(fixture_dir, mask_id=258, eos_id=257).model.config)
    with pytest.raises(ValueError, match="only rank 0 leads"):
        Lead(whole, Ranks(1, 2))
    with pytest.raises(ValueError, match="rank 0 leads"):
        serve_experts(whole, Ranks(0, 2))
    with pytest.raises(ValueError, match="not split across ranks: load it with ranks="):
        Lead(whole, Ranks(0, 2))
    with pytest.raises(ValueError, match="ping_every must be a positive number of seconds"):
        Lead(whole, Ranks(0, 2), ping_every=0)
