"""The ranks of one distributed run, and the two things they must agree on: errors and decisions.

torchrun starts one process per rank and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; `Ranks.start`
reads them and joins the process group (gloo on the CPU, NCCL on CUDA). Every rank runs the same decode loop,
in lock-step, because each forward's MoE layers end in a collective (`llada.dist.experts`).

Rank 0 owns the decisions. After each forward, rank 0 applies the rule to its logits and broadcasts the
result (`decided`): the tokens, the drafts and edits, the Levenshtein book; every rank writes those into its
copy of the sequence, so the block states, the stop after a block and the end of the run follow from rank 0's
choices alone. Identical code on identical logits would give identical choices, but the logits of two ranks
are only as alike as their collectives make them, and sampling draws from each rank's own generator: one
broadcast makes agreement a fact rather than a hope.

Errors: a rank that fails alone would leave the others waiting in a collective. `agree` is a barrier that
carries each rank's error: when any rank failed, every rank raises `RankError` naming the ranks and their
messages, and exits. Rank 0's decision errors travel with its broadcast the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")
TIMEOUT = timedelta(minutes=10)  # a collective that waits longer than this fails instead of hanging


class RankError(RuntimeError):
    """A distributed run that cannot go on: the message names the rank(s) that failed and why."""


LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "NCCL communicator was aborted")


def lost_rank(err: BaseException) -> RankError | None:
    """A collective's error that says a peer is gone (a rank died mid-run), as a RankError; else None. The
    transports do not say which rank: torchrun's summary names it (its "Root Cause"), as it ends the others."""
    text = str(err)
    if not (isinstance(err, dist.DistError) or any(words in text for words in LOST)):
        return None
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return RankError(f"a rank left the group mid-run (torchrun names it as it ends the others): {first}")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the group: `rank` of `world` (rank 0 decides and prints); `local` of them run on
    this machine (torchrun's LOCAL_WORLD_SIZE), sharing its memory when they run on the CPU."""

    rank: int
    world: int
    local: int = 1

    @property
    def lead(self) -> bool:
        return self.rank == 0

    @classmethod
    def start(cls, device: torch.device) -> "Ranks | None":
        """The ranks torchrun started (None outside torchrun or with one rank); joins the process group."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world < 2:
            return None
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            if device.type == "cuda":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, timeout=TIMEOUT)
        return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))

    def agree(self, error: BaseException | None) -> None:
        """A barrier carrying each rank's error: RankError on every rank when any rank brought one."""
        errors: list[tuple[bool, str] | None] = [None] * self.world
        echo = isinstance(error, RankError)  # an error the ranks agreed on already (it names its rank)
        mine = None if error is None else (echo, str(error) if echo else f"{type(error).__name__}: {error}")
        dist.all_gather_object(errors, mine)
        failed = [(r, e) for r, e in enumerate(errors) if e is not None]
        if failed:
            first_hand = [(r, text) for r, (again, text) in failed if not again]
            if not first_hand:  # only echoes: rank 0's (the lowest failed rank's) message, as it was
                raise RankError(errors[failed[0][0]][1])
            failed = first_hand
            if len({e for _, e in failed}) == 1 and len(failed) == self.world:  # every rank, one reason
                raise RankError(f"every rank failed: {failed[0][1]}")
            raise RankError("; ".join(f"rank {r} failed: {e}" for r, e in failed))

    def decided(self, decide: Callable[[], T]) -> T:
        """Rank 0's `decide()` on every rank (broadcast); an error in it is raised on every rank."""
        box: list = [None]
        if self.lead:
            try:
                box[0] = ("ok", decide())
            except Exception as err:  # noqa: BLE001 - sent to the others, then raised here as it is
                dist.broadcast_object_list([("error", f"{type(err).__name__}: {err}")], src=0)
                raise
        dist.broadcast_object_list(box, src=0)
        kind, value = box[0]
        if kind == "error":
            raise RankError(f"rank 0 failed: {value}")
        return value

    def stop(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
