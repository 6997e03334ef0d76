"""A rank that dies mid-run (`torchrun -m llada generate` on 2 gloo ranks): every rank exits, never a hang.

A wrapper started by torchrun in place of `-m llada` makes rank 1 exit (status 3) as its second forward
begins, after one forward in lock-step with rank 0; rank 0 is then waiting in that forward's all-reduce.
Its collective fails (the peer's socket closes), rank 0 prints our one line, and torchrun ends the group,
naming rank 1 as the root cause. The timeout bounds the whole run: a hang fails here instead of blocking CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llada.dist.group import RankError, lost_rank

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT = 300  # seconds: a run of a few forwards and torchrun's shutdown, on a loaded machine

RANK_1_DIES = """
import os, sys
from llada import pipeline
from llada.__main__ import main

if os.environ["RANK"] == "1":
    load = pipeline.Pipeline.load.__func__

    def dies_at_its_second_forward(cls, *args, **kwargs):
        pipe = load(cls, *args, **kwargs)
        forwards = []

        def count(*_):
            forwards.append(1)
            if len(forwards) == 2:
                os._exit(3)
        pipe.model.word_embeddings.register_forward_hook(count)
        return pipe
    pipeline.Pipeline.load = classmethod(dies_at_its_second_forward)
sys.exit(main(sys.argv[1:]))
"""


def test_a_rank_that_dies_mid_run_ends_every_rank_with_a_clear_error(fixture_dir, tmp_path):
    script = tmp_path / "rank_1_dies.py"
    script.write_text(RANK_1_DIES)
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(script), "generate",
                          "--model", str(fixture_dir), "--prompt-ids", "1,2,3,4,5", "--mask-id", "258",
                          "--eos-id", "257", "--gen-length", "16", "--block-length", "8", "--dtype", "float64"],
                         capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)
    assert run.returncode != 0 and not run.stdout.strip(), run.stderr  # no result printed
    root_cause = run.stderr.split("Root Cause", 1)[-1]
    assert "rank      : 1" in root_cause and "exitcode  : 3" in root_cause, run.stderr  # torchrun names it
    ours = [line for line in run.stderr.splitlines() if line.startswith("error: a rank left the group")]
    # rank 0 prints our line unless torchrun's SIGTERM reaches it first (a race the test cannot fix)
    assert len(ours) <= 1, run.stderr


def test_only_a_lost_peer_reads_as_a_lost_rank():
    err = lost_rank(RuntimeError("[pair.cc:537] Read error [127.0.0.1]:28294: Connection reset by peer. More"))
    assert isinstance(err, RankError) and str(err) == (
        "a rank left the group mid-run (torchrun names it as it ends the others): "
        "[pair.cc:537] Read error [127.0.0.1]:28294: Connection reset by peer. More")
    assert lost_rank(RuntimeError("CUDA out of memory")) is None
