"""Rank 0 drives, the other ranks serve its experts: a split model for code that runs on one process only.

The decode loop across ranks (`llada.dist.group`) runs in lock-step on every rank: each rank decodes the same
rows and takes rank 0's decisions. Code that runs on rank 0 alone (a server answering users, a notebook)
cannot ask that of the others: they do not know which rows, when, or how the batch changes. So here they
follow at the level of the experts, the one place a split model needs them:

* rank 0 (`lead`) runs everything as one process would. Each MoE layer, before running its slice of the
  experts, sends the others what they need for theirs: a header (layer, T, K, the dtypes), the
  layer's tokens x (T, H), their expert ids (T, K) and weights (T, K). Then every rank runs its slice and
  the all-reduce sums them, as in `llada.dist.experts`.
* every other rank (`serve_experts`) waits for a header, runs that layer's slice on the tokens it got, joins
  the all-reduce, and waits again, until rank 0 sends the stop header (`Lead.stop`, or leaving its `with`).
* a server may stay idle for longer than the group's collectives wait (`llada.dist.group.TIMEOUT`): with
  `ping_every` seconds, rank 0 sends an empty header (PING) that often, and the serving ranks wait again.

Attention, caches, the batch and the decisions stay on rank 0, so nothing above the model changes. The cost:
each MoE layer broadcasts x, ids and weights before its all-reduce (about as many bytes again: x is (T, H) in
the model's dtype against the all-reduce's fp32). A lock makes each layer's messages one unit, so forwards
from several threads of rank 0 interleave whole layers, never parts of one.
"""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from ..model import LLaDA2MoE
from .experts import RankSlice
from .group import Ranks

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)  # a dtype travels as its index
STOP = -1  # the header's layer when rank 0 is done
PING = -2  # the header's layer of a message that only says rank 0 is still there (an idle server)


class Lead:
    """Rank 0's side: its MoE layers send every call to the serving ranks (`with Lead(model, ranks): ...`)."""

    def __init__(self, model: LLaDA2MoE, ranks: Ranks, ping_every: float | None = None):
        if not ranks.lead:
            raise ValueError(f"rank {ranks.rank} serves (serve_experts); only rank 0 leads")
        if ping_every is not None and not ping_every > 0:
            raise ValueError(f"ping_every must be a positive number of seconds (or None); got {ping_every!r}")
        self.model, self.ranks, self.lock = model, ranks, threading.Lock()
        self.layers = sharded_layers(model)
        for index, experts in self.layers.items():
            experts.send = self._sender(index)
        model.ranks = None  # rank 0 decides alone: the others do not decode
        self.stopped = threading.Event()
        if ping_every is not None:  # a daemon: a server that dies without stop() is not kept alive by it
            threading.Thread(target=self._ping, args=(ping_every,), daemon=True, name="lead-ping").start()

    def _ping(self, every: float) -> None:
        """Send PING every `every` seconds until stop(): the serving ranks' broadcast never waits out its timeout."""
        while not self.stopped.wait(every):
            with self.lock:
                if self.stopped.is_set():
                    return
                self._header(PING)

    def _sender(self, index: int):
        def send(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, run):
            with self.lock:  # header, tensors and the all-reduce of one layer call, in one piece
                codes = DTYPES.index(x.dtype), DTYPES.index(weights.dtype)
                header = torch.tensor([index, *ids.shape, *codes], device=x.device)
                for tensor in (header, x.contiguous(), ids.to(torch.long).contiguous(), weights.contiguous()):
                    dist.broadcast(tensor, src=0)
                return run()
        return send

    def stop(self) -> None:
        """Release the serving ranks (they return from `serve_experts`); this model then runs no more forwards.
        A second call does nothing."""
        with self.lock:
            if self.stopped.is_set():
                return
            self.stopped.set()
            for experts in self.layers.values():
                experts.send = None
            self._header(STOP)

    def _header(self, layer: int) -> None:
        """A header with no tensors after it: STOP or PING (called under the lock)."""
        dist.broadcast(torch.tensor([layer, 0, 0, 0, 0], device=self.model.lm_head.weight.device), src=0)

    def __enter__(self) -> "Lead":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_experts(model: LLaDA2MoE, ranks: Ranks) -> int:
    """Run this rank's slice of every MoE layer call rank 0 sends, until it stops; the number of calls served."""
    if ranks.lead:
        raise ValueError("rank 0 leads (Lead); serve_experts runs on the other ranks")
    layers, device = sharded_layers(model), model.lm_head.weight.device
    served = 0
    while True:
        header = torch.empty(5, dtype=torch.long, device=device)
        dist.broadcast(header, src=0)
        index, T, K, x_code, w_code = header.tolist()
        if index == STOP:
            return served
        if index == PING:
            continue
        x = torch.empty(T, model.config.hidden_size, dtype=DTYPES[x_code], device=device)  # (T, H)
        ids = torch.empty(T, K, dtype=torch.long, device=device)  # (T, K)
        weights = torch.empty(T, K, dtype=DTYPES[w_code], device=device)  # (T, K)
        for tensor in (x, ids, weights):
            dist.broadcast(tensor, src=0)
        layers[index](x, ids, weights)  # its slice, then the all-reduce with every rank
        served += 1


def sharded_layers(model: LLaDA2MoE) -> dict[int, RankSlice]:
    """layer index -> its slice of the experts (`RankSlice`: a model loaded with `ranks`, plain or quantized)."""
    layers = {i: layer.mlp.experts for i, layer in enumerate(model.layers)
              if isinstance(getattr(layer.mlp, "experts", None), RankSlice)}
    if not layers:
        raise ValueError("this model's experts are not split across ranks: load it with ranks=")
    return layers
