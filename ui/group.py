"""The playground on a group of ranks: `torchrun --nproc-per-node N app.py [--model DIR]`.

A model split across ranks (expert parallel, `llada.dist`) needs every rank in each MoE layer of each
forward, but users reach rank 0 only. So rank 0 runs the app as one process would, and the other ranks
follow at the MoE layers (`llada.dist.serve`: rank 0 leads, they serve its experts):

1. every rank joins the group and loads the group's one model together, each its own slice of the experts
   (the `--model` given, else the embedded model; the picker offers only it: every rank holds a slice of
   that one, so there is no switching to another);
2. the ranks agree on load errors (`Ranks.agree`): a rank that failed stops every rank, and rank 0 prints
   one line naming it;
3. rank 0 serves the page (the `launch` it is given) with `Lead` around the model, pinging the others every
   PING_SECONDS while idle, so they never wait out the group's collective timeout; the other ranks serve
   their experts until rank 0 stops;
4. when the server closes (Ctrl-C: torchrun passes SIGINT on to the ranks), rank 0 stops the others
   (`Lead.stop`) and every rank leaves the group. The serving ranks ignore SIGINT: rank 0 says when
   they are done, so they never die inside a layer call rank 0 is still waiting on.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable

from .models import DEFAULT_MODEL, Models

PING_SECONDS = 60.0  # an idle server's keep-alive, well inside the group's 10-minute timeout (llada.dist.group)


def in_group() -> bool:
    """Started by torchrun with more than one rank (its WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def group_model(cli: list) -> str | tuple[str, str]:
    """The group's one model: the one `--model` given (a path, or a downloaded hub repo's (name, path)), else the
    embedded model; ValueError for several (every rank holds a slice of one model: the picker cannot switch)."""
    if len(cli) > 1:
        raise ValueError(f"a group of ranks serves one model: give one --model, not {len(cli)}")
    return cli[0] if cli else str(DEFAULT_MODEL)


def serve_group(cli: list, launch: Callable[[Models], None]) -> int:
    """Run this rank's part of the app on a group (see the module docstring); the exit status: 0, or 2 after an
    error every rank agreed on (rank 0 printed it)."""
    import torch

    from llada.dist.group import RankError, Ranks

    from .models import runtime

    ranks = Ranks.start(torch.device(runtime().device))
    if ranks is None:
        raise ValueError("serve_group runs under torchrun with two ranks or more (WORLD_SIZE)")
    try:
        try:
            models, pipe = _load_together(cli, ranks)
        except RankError as err:
            if ranks.lead:
                print(f"error: {err}", file=sys.stderr, flush=True)
            return 2
        role = "serves the page" if ranks.lead else "serves its experts"
        print(f"[app] rank {ranks.rank} of {ranks.world} (pid {os.getpid()}) {role}", flush=True)
        if ranks.lead:
            _lead(models, pipe, ranks, launch)
        else:
            _serve(pipe, ranks)
        return 0
    finally:
        ranks.stop()


def _load_together(cli: list, ranks) -> tuple[Models, object]:
    """(the group's Models, the loaded Pipeline of this rank's slice); RankError on every rank when any failed."""
    from llada.pipeline import Pipeline
    from llada.weights.checkpoint import CheckpointError

    error = models = pipe = None
    try:
        models = Models([group_model(cli)], world=ranks.world)
        if not models.offered:
            raise ValueError(models.note())
        model = models.offered[0]
        pipe = Pipeline.load(model.path, dtype=model.dtype, device=models.rt.device, quantize=model.quantize,
                             progress=ranks.lead, ranks=ranks)
        pipe.name = model.name
        models.hold(pipe)
    except (CheckpointError, ValueError, OSError, RuntimeError) as err:  # RuntimeError: out of memory, ...
        error = err
    ranks.agree(error)
    return models, pipe


def _lead(models: Models, pipe, ranks, launch: Callable[[Models], None]) -> None:
    """Rank 0: the page, with its model's MoE layers leading the others; they are released when it closes."""
    from llada.dist.serve import Lead

    lead = Lead(pipe.model, ranks, ping_every=PING_SECONDS)
    try:
        launch(models)  # returns when the server closes (Ctrl-C)
    finally:
        lead.stop()


def _serve(pipe, ranks) -> None:
    """Another rank: its experts, for every MoE layer call of rank 0, until rank 0 stops."""
    from llada.dist.serve import serve_experts

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 stops us (Lead.stop); SIGTERM still ends us at once
    serve_experts(pipe.model, ranks)

