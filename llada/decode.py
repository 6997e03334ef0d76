"""The draft-and-edit decoder: one loop, a generator that yields a `StepRecord` per forward.

The sequence (prompt + gen_length masks, padded to whole blocks) is decoded block by block from the
block holding the prompt's tail. Each decode forward scores a window (the active block, after the
MBE blocks when MBE is on), and the public rule `llada.rule.step` decides the drafts (M2T) and the
edits (T2T, MBE). A block stops when a step starts without masks and edits nothing, or after
`max_post_steps` mask-free steps; with `eos_early_stop` the run stops after a finished block that
holds EOS.

The KV cache holds finished blocks (those that left the MBE window), computed from their final
tokens: when a block's last forward already saw them its keys/values are committed as they are,
otherwise one `cache` forward recomputes them. Forwards that only fill the cache are `cache` records.

The loop of one run (`loop`) is a generator that asks for each forward (`Forward`) and is sent the
rule's decision on its logits; `BatchDecoder` drives the loops of many runs (rows) so that one
row-batched model call serves them all, and decides for all of them at once (`llada.decide`); every
row's trace is bit for bit its trace alone (`llada.batch`). A run alone is a batch of one.

A row may carry a budget's question (`may_continue(forwards)`, asked with the forwards the row has had
before each forward it asks for, `llada.budget`): a row refused is stopped before that forward runs, so
no forward past a budget is ever computed; a row that needs no more forwards is never asked about.

`decode()` checks its inputs before it returns the run's `Stream` (one `try` around the call is enough);
`generate()` drains it into a `Trace`. Inference mode is entered per forward, never across a `yield`,
so a run can be stepped from any thread and interleaved with another.

Forward paths (`forward=`): "dynamic" slices the cache to the keys in use (the path on CPU);
"static" runs the same forward with shapes fixed per window length (`llada.graphs`); "graph" records
those as CUDA graphs and replays them; "auto" = "graph" for a cached run on CUDA of a model whose
forward never waits for the host (`graph_ready`: FP8 experts on the Triton kernels), else "dynamic".
"""

from __future__ import annotations

import math
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generator, Iterator, NamedTuple

import torch

from .config import DecodeConfig, padded_length
from .decide import Decision, Window, decide
from .graphs import graph_ready, keep_step_graphs, step_graphs
from .model import LLaDA2MoE, Row, block_causal_mask
from .trace import Change, StepRecord, Trace

if TYPE_CHECKING:
    from .forward_memo import ForwardMemo

FORWARD_PATHS = ("auto", "dynamic", "static", "graph")


class NonFiniteLogits(FloatingPointError):
    """The model produced NaN or infinite logits: the run cannot go on (broken or overflowing weights)."""


class Forward(NamedTuple):
    """A forward a row's loop asks for: positions [lo, hi); those from groups_hi*B on form one group."""

    lo: int
    hi: int
    groups_hi: int
    logits: bool = True  # False: a cache forward (only its keys/values are kept)


class _Run:
    """Mutable state of one decoding run (the sequence, the cache, the counters)."""

    def __init__(self, model: LLaDA2MoE, prompt: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int,
                 forward: str = "auto"):
        self.model, self.cfg, self.mask_id, self.eos_id = model, cfg, mask_id, eos_id
        self.P, B = len(prompt), cfg.block_length
        self.n_blocks = padded_length(self.P, cfg.gen_length, B) // B
        self.first = self.P // B
        with torch.inference_mode():  # these tensors are only ever written inside inference mode
            self.x = torch.full((1, self.n_blocks * B), mask_id, dtype=torch.long, device=model.device)
            self.seq = self.x[0]  # (L,) the sequence, a view of x
            self.seq[:self.P] = torch.tensor(prompt, dtype=torch.long)
            path = resolve_forward(forward, model, cfg)
            # static paths: a KV cache and graphs kept from an earlier run of this shape, when one is free
            self.static = None if path == "dynamic" else step_graphs(model, self.n_blocks * B, B, path == "graph")
            self.cache = self.static.cache if self.static is not None else \
                model.new_cache(self.n_blocks * B) if cfg.use_cache else None
        if self.static is not None:
            weakref.finalize(self, keep_step_graphs, model, self.static)  # kept for the next run when this one ends
        self.generator = torch.Generator(device=model.device)
        if cfg.seed is not None:
            self.generator.manual_seed(cfg.seed)
        self.decode_forwards = 0
        self.resumed = time.perf_counter()  # when the engine last got control back from its consumer

    def row(self, f: Forward) -> Row:
        """The row-batched forward's input for `f`: the window over the cache, or the whole prefix without one."""
        B = self.cfg.block_length
        if self.cache is not None:
            mask = None
            if min(f.lo // B, f.groups_hi) != min((f.hi - 1) // B, f.groups_hi):  # several strict blocks in one call
                groups = (torch.arange(f.lo, f.hi, device=self.x.device) // B).clamp(max=f.groups_hi)
                keys = torch.cat([torch.full((f.lo,), -1, device=groups.device), groups])
                mask = block_causal_mask(groups, keys)
            return Row(self.seq[f.lo:f.hi], f.lo, mask, self.cache, f.logits)
        groups = (torch.arange(f.hi, device=self.x.device) // B).clamp(max=f.groups_hi)
        return Row(self.seq[:f.hi], 0, block_causal_mask(groups), None, f.logits)

    def seconds(self) -> float:
        return time.perf_counter() - self.resumed


def run_forwards(runs: list[_Run], asks: list[Forward], memo: ForwardMemo | None = None) -> list[torch.Tensor | None]:
    """One model call for every row's forward -> per row logits (hi-lo, V) (None for a cache forward).

    `memo` (`llada.forward_memo.ForwardMemo`): rows already computed are answered by it, not the model."""
    with torch.inference_mode():
        if len(runs) == 1 and runs[0].static is not None:
            run, f = runs[0], asks[0]
            return [run.static(run.x[:, f.lo:f.hi], f.lo, f.hi, f.groups_hi)]
        rows, model = [run.row(f) for run, f in zip(runs, asks)], runs[0].model
        logits = model.forward_rows(rows) if memo is None else memo.forward_rows(model, rows)
    return [out if out is None or out.shape[0] == f.hi - f.lo else out[-(f.hi - f.lo):] for out, f in zip(logits, asks)]


def answer_forwards(runs: list[_Run], asks: list[Forward], logits: list[torch.Tensor | None]) -> list[Decision | None]:
    """Each row's answer to its forward: the rule's `Decision` for a decode forward, all rows decided at once
    (`llada.decide`), None for a cache forward."""
    decode = [i for i, ask in enumerate(asks) if ask.logits]
    answers: list[Decision | None] = [None] * len(asks)
    if decode:
        with torch.inference_mode():
            decided = decide([runs[i] for i in decode], [Window(asks[i].lo, asks[i].hi) for i in decode],
                             [logits[i] for i in decode])
        for i, decision in zip(decode, decided):
            answers[i] = decision
    return answers


Loop = Generator["Forward | StepRecord", "Decision | None", None]  # yields asks and records, is sent decisions
MayContinue = Callable[[int], bool]  # forwards the row has had -> may it have one more?


def _fill_cache(run: _Run, upto: int, phase: str, block: int) -> Loop:
    """Compute strict block-causal keys/values of [cache.length, upto) and commit them."""
    cache = run.cache
    if cache is None or cache.length >= upto:
        return
    lo = cache.length
    yield Forward(lo, upto, upto // run.cfg.block_length, logits=False)  # every block strict, no merged group
    cache.commit(upto)
    yield StepRecord(kind="cache", phase=phase, step=run.decode_forwards, block=block, block_step=0,
                     window=(lo, upto), active=(lo, upto), seconds=run.seconds())


def _step(run: _Run, block: int, lo: int, block_step: int, d: Decision) -> StepRecord:
    """Apply the rule's decision `d` on window [lo, end of `block`) (`llada.decide`) to run.x; its record."""
    B = run.cfg.block_length
    a0, hi = block * B, (block + 1) * B
    if not all(map(math.isfinite, d.conf)):
        raise NonFiniteLogits(f"the model produced non-finite logits at step {run.decode_forwards + 1} "
                              f"(block {block}): its weights are broken or overflow in this dtype")
    with torch.inference_mode():
        run.seq[lo:hi] = d.tokens
    run.decode_forwards += 1
    old, new, conf = d.old, d.new, d.conf
    had_masks = run.mask_id in old[a0 - lo:]

    def changes(chosen: list[bool]) -> list[Change]:
        return [Change(lo + i, new[i], old[i], conf[i]) for i, yes in enumerate(chosen) if yes]

    return StepRecord(kind="decode", phase="draft" if had_masks else "verify", step=run.decode_forwards,
                      block=block, block_step=block_step, window=(lo, hi), active=(a0, hi),
                      drafts=changes(d.drafted), edits=changes(d.edited), mbe_edits=changes(d.mbe_edited),
                      guesses=new, confidence=conf, seconds=run.seconds())


def _decode_block(run: _Run, block: int) -> Loop:
    """The official per-block loop; asks for each forward and yields its record."""
    cfg, B = run.cfg, run.cfg.block_length
    lo = max(run.first, block - cfg.mbe_window) * B if cfg.mbe else block * B
    yield from _fill_cache(run, lo, "prefill" if run.decode_forwards == 0 else "refresh", block)
    post, block_step, saw_final = 0, 0, False
    masks = bool((run.seq[block * B:(block + 1) * B] == run.mask_id).any())  # then from each decision's list
    while True:
        if not masks:
            post += 1
        if post > cfg.max_post_steps:
            break
        block_step += 1
        decision = yield Forward(lo, (block + 1) * B, lo // B)
        record = _step(run, block, lo, block_step, decision)
        masks = run.mask_id in decision.after[block * B - lo:]
        yield record
        if record.phase == "verify" and not record.edits and not record.mbe_edits:
            saw_final = True
            break
    if run.cache is not None and saw_final and not cfg.mbe:
        run.cache.commit((block + 1) * B)  # the last forward saw the final tokens: its K/V are exact


def _eos_stop(run: _Run, block: int) -> bool:
    if not run.cfg.eos_early_stop:
        return False
    gen = run.seq[run.P:(block + 1) * run.cfg.block_length].tolist()
    return run.mask_id not in gen and run.eos_id in gen


def loop(run: _Run) -> Loop:
    """The decode loop of one row: yields a `Forward` (answered with the rule's `Decision` on its logits,
    None for a cache forward) or a `StepRecord`."""
    for block in range(run.first, run.n_blocks):
        yield from _decode_block(run, block)
        if block + 1 < run.n_blocks and _eos_stop(run, block):
            break


@dataclass
class _Row:
    index: int
    run: _Run
    loop: Loop
    ask: Forward | None = None  # the forward this row waits for
    started: bool = False
    forwards: int = 0  # forwards run for this row (decode and cache)
    may_continue: MayContinue | None = None  # a budget's question before each forward (None: no bound)


@dataclass
class BatchDecoder:
    """Rows decoded together; `step()` runs one round, iterating runs rounds until every row is done."""

    model: LLaDA2MoE
    mask_id: int
    eos_id: int
    max_batch: int | None = None  # rows decoded at once (None: all); more rows wait for a free slot
    forward: str = "auto"  # the forward path (see `llada.decode`); static and graph need max_batch=1
    memo: ForwardMemo | None = None  # rows already computed are answered by it, not computed again
    waiting: deque = field(default_factory=deque)
    active: list[_Row] = field(default_factory=list)
    done: list[int] = field(default_factory=list)  # rows finished so far, in order
    refused: set[int] = field(default_factory=set)  # rows stopped because their budget refused a forward
    rows: int = 0  # rows added so far (the next row's index)

    def __post_init__(self) -> None:
        if self.max_batch is not None and (isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int)
                                           or self.max_batch < 1):
            raise ValueError(f"max_batch must be a positive integer or None, got {self.max_batch!r}")
        if self.forward in ("static", "graph") and self.max_batch != 1:
            raise ValueError(f"forward={self.forward!r} decodes one run at a time: use max_batch=1 or 'dynamic'")

    def add(self, prompt_ids: list[int], cfg: DecodeConfig, may_continue: MayContinue | None = None) -> int:
        """Queue a run; returns its row index. ValueError now when the prompt or settings do not fit.

        `may_continue(forwards)` is asked before each forward of the row (see `limit`)."""
        check_prompt(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)
        forward = self.forward if self.max_batch == 1 or self.forward != "auto" else "dynamic"
        resolve_forward(forward, self.model, cfg)
        run = _Run(self.model, [int(t) for t in prompt_ids], cfg, self.mask_id, self.eos_id, forward)
        index, self.rows = self.rows, self.rows + 1
        self.waiting.append(_Row(index, run, loop(run), may_continue=may_continue))
        return index

    def limit(self, index: int, may_continue: MayContinue | None) -> None:
        """Ask `may_continue(forwards)` before each further forward of row `index`; False stops the row there."""
        for row in (*self.active, *self.waiting):
            if row.index == index:
                row.may_continue = may_continue

    def drop(self, index: int) -> None:
        """Stop a row now (a waiting one never starts); its records so far stay valid."""
        for row in list(self.active):
            if row.index == index:
                row.loop.close()
                self.active.remove(row)
                self.done.append(index)
        for row in list(self.waiting):
            if row.index == index:
                self.waiting.remove(row)
                self.done.append(index)

    @property
    def finished(self) -> bool:
        return not self.active and not self.waiting

    def step(self) -> list[tuple[int, StepRecord]]:
        """One round: every active row up to its next forward, one shared forward, every row's decision."""
        now = time.perf_counter()
        out: list[tuple[int, StepRecord]] = []
        for row in self.active:
            row.run.resumed = now
        self._advance(list(self.active), out)
        while self.waiting and (self.max_batch is None or len(self.active) < self.max_batch):
            row = self.waiting.popleft()
            row.run.resumed = now
            self.active.append(row)
            self._advance([row], out)
        for row in [r for r in self.active if r.may_continue is not None and not r.may_continue(r.forwards)]:
            self.refused.add(row.index)
            self.drop(row.index)  # its budget allows no other forward: stopped before computing one
        if self.active:
            runs, asks = [row.run for row in self.active], [row.ask for row in self.active]
            answers = answer_forwards(runs, asks, run_forwards(runs, asks, self.memo))
            for row, answer in zip(list(self.active), answers):
                row.ask = None
                row.forwards += 1
                out.append((row.index, row.loop.send(answer)))  # the record of that forward
        return out

    def _advance(self, rows: list[_Row], out: list[tuple[int, StepRecord]]) -> None:
        """Run each row's loop until it asks for a forward (records on the way go to `out`) or ends."""
        for row in rows:
            while row.ask is None:
                try:
                    item = row.loop.send(None) if row.started else next(row.loop)
                except StopIteration:
                    self.active.remove(row)
                    self.done.append(row.index)
                    break
                row.started = True
                if isinstance(item, Forward):
                    row.ask = item
                else:
                    out.append((row.index, item))

    def __iter__(self) -> Iterator[tuple[int, StepRecord]]:
        while not self.finished:
            yield from self.step()


class Stream:
    """The records of one run (decode and cache forwards), a batch of one (`BatchDecoder`).

    `limit(may_continue)` bounds it (a budget's question before each forward); `close()` stops the run."""

    def __init__(self, batch: BatchDecoder, index: int):
        self.batch, self.index = batch, index
        self.pending: deque[StepRecord] = deque()

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> StepRecord:
        while not self.pending:
            if self.batch.finished:
                raise StopIteration
            self.pending.extend(record for _, record in self.batch.step())
        return self.pending.popleft()

    def limit(self, may_continue: MayContinue | None) -> None:
        self.batch.limit(self.index, may_continue)

    def close(self) -> None:
        self.batch.drop(self.index)
        self.pending.clear()

    @property
    def refused(self) -> bool:
        """The run was stopped because its budget refused it a forward."""
        return self.index in self.batch.refused

    @property
    def closed(self) -> bool:
        """The run is over (ended, stopped or refused a forward) and every record was taken."""
        return self.batch.finished and not self.pending


def decode(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int,
           eos_id: int, forward: str = "auto", may_continue: MayContinue | None = None) -> Stream:
    """Check the inputs now, then return the run's records as a `Stream` (started on the first pull).

    `may_continue(forwards)` is asked before each forward (a budget: False stops the run before it)."""
    batch = BatchDecoder(model, mask_id, eos_id, max_batch=1, forward=forward)
    batch.add(prompt_ids, cfg, may_continue)
    return Stream(batch, 0)


def check_prompt(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int) -> None:
    """ValueError when the settings, the special ids or the prompt do not fit the model."""
    if not isinstance(cfg, DecodeConfig):
        raise ValueError(f"settings must be a DecodeConfig, got {type(cfg).__name__}")
    vocab = model.config.vocab_size
    for name, value in (("mask id", mask_id), ("EOS id", eos_id)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name} {value!r} is outside the vocabulary [0, {vocab})")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [t for t in prompt_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token id {bad[0]!r} is outside the vocabulary [0, {vocab})")
    if mask_id in prompt_ids:
        raise ValueError(f"prompt token {prompt_ids.index(mask_id)} is the mask id {mask_id}: a prompt holds no masks "
                         "(text that spells the mask token is tokenized as plain characters)")
    total = padded_length(len(prompt_ids), cfg.gen_length, cfg.block_length)
    limit = model.config.max_position_embeddings
    if total > limit:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) + gen_length ({cfg.gen_length}), padded to whole "
                         f"blocks of {cfg.block_length}, needs {total} positions; the model allows {limit}")


def resolve_forward(forward: str, model: LLaDA2MoE, cfg: DecodeConfig) -> str:
    """The forward path a run takes (see the module docstring); ValueError when it cannot."""
    if forward not in FORWARD_PATHS:
        raise ValueError(f"forward must be one of {', '.join(FORWARD_PATHS)}; got {forward!r}")
    if forward == "auto":
        return "graph" if cfg.use_cache and model.device.type == "cuda" and graph_ready(model) else "dynamic"
    if forward != "dynamic" and not cfg.use_cache:
        raise ValueError(f"forward={forward!r} needs the KV cache (use_cache=True)")
    if forward == "graph" and model.device.type != "cuda":
        raise ValueError(f"forward='graph' needs a CUDA model; this one is on {model.device}")
    return forward


def generate(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int,
             trace: Trace | None = None, forward: str = "auto") -> Trace:
    """Decode to the end; returns the finished Trace (`trace`: an empty one to fill, e.g. with a name)."""
    stream = decode(model, prompt_ids, cfg, mask_id, eos_id, forward)
    trace = trace or Trace(prompt_ids=list(prompt_ids), settings=cfg, mask_id=mask_id, eos_id=eos_id)
    for _ in trace.follow(stream):
        pass
    return trace.finish()
