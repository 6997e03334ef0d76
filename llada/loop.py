"""One run's draft-and-edit loop: a generator that asks for each forward and yields a `StepRecord` per forward.

The sequence (prompt + gen_length masks, padded to whole blocks) is decoded block by block from the
block holding the prompt's tail. Each decode forward scores a window (the active block, after the
MBE blocks when MBE is on), and the public rule `llada.rule.step` decides the drafts (M2T) and the
edits (T2T, MBE). A block stops when a step starts without masks and edits nothing, or after
`max_post_steps` mask-free steps; with `eos_early_stop` the run stops after a finished block that
holds EOS (or another of the checkpoint's stop ids: LLaDA2.2 also ends at `<|role_end|>`).

A run that follows LLaDA2.2's Levenshtein rule (`llada.decide.levenshtein_of`: a 2.2 checkpoint, or
`DecodeConfig.rule`) decodes each block with `_decode_block22`: the same window and cache, the rule's
bookkeeping kept in `run.book` from the block's entry, tokens that move inside the active block (its
records list inserts, deletes and `moved_to`), and the block ends when the rule says it is done. When the
last step changed the block, its keys/values are recomputed from the final tokens by the next block's
cache forward (a `refresh`), as for a 2.1 block that ended at `max_post_steps`.

The KV cache holds finished blocks (those that left the MBE window), computed from their final
tokens: when a block's last forward already saw them its keys/values are committed as they are,
otherwise one `cache` forward recomputes them. Forwards that only fill the cache are `cache` records.

Pokes (`llada.trace.Poke`, a run's `pokes`) change the text between two forwards: `_poke`, a hook after a
forward's record, writes them, lets the block take another forward, and recomputes the cache from a poked
finished block; a poke after the last forward re-opens the block it touches (`_poked_loop`).

`loop(run)` never calls the model itself: it yields a `ForwardAsk` (the positions it needs scored) and is
sent the rule's `WindowUpdate` on that forward's logits (`llada.decide`), None for a cache forward. Who
runs the forwards, one run alone or many rows in one model call, is the driver's business
(`llada.decode`); the loop is the same either way, so a run's trace does not depend on its company.

Forward paths (`forward=`): "dynamic" slices the cache to the keys in use (the path on CPU);
"static" runs the same forward with shapes fixed per window length (`llada.fast.graphs`); "graph" records
those as CUDA graphs and replays them; "auto" = "graph" for a cached run on CUDA of a model whose
forward never waits for the host (`graph_ready`: FP8 experts on the Triton kernels), else "dynamic".
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Generator, NamedTuple

import torch

from .config import DecodeConfig, padded_length
from . import rule
from .decide import WindowUpdate, levenshtein_of
from .fast.graphs import graph_ready, keep_step_graphs, step_graphs
from .model import LLaDA2MoE, RowInput, block_causal_mask
from .trace import Change, Delete, Insert, Poke, Poked, StepRecord

FORWARD_PATHS = ("auto", "dynamic", "static", "graph")


class NonFiniteLogits(FloatingPointError):
    """The model produced NaN or infinite logits: the run cannot go on (broken or overflowing weights)."""


class ForwardAsk(NamedTuple):
    """A forward a row's loop asks for: positions [lo, hi); those from groups_hi*B on form one group."""

    lo: int
    hi: int
    groups_hi: int
    logits: bool = True  # False: a cache forward (only its keys/values are kept)


class Run:
    """Mutable state of one decoding run (the sequence, the cache, the counters)."""

    def __init__(self, model: LLaDA2MoE, prompt: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int,
                 forward: str = "auto", pokes: tuple[Poke, ...] = ()):
        self.model, self.cfg, self.mask_id, self.eos_id = model, cfg, mask_id, eos_id
        self.stops = {eos_id, *model.config.stop_token_ids}  # a finished block holding one ends the run (EOS stop)
        self.lev = levenshtein_of(model.config, cfg, mask_id)  # None: the joint (2.1) rule
        self.book: rule.BlockBook | None = None  # the Levenshtein rule's bookkeeping of the active block
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
        self.pokes: dict[int, list[Poke]] = {}  # step -> the pokes due after that decode forward, in order
        for p in pokes:
            self.pokes.setdefault(p.step, []).append(p)
        self.resumed = time.perf_counter()  # when the engine last got control back from its consumer

    def model_input(self, f: ForwardAsk) -> RowInput:
        """The row-batched forward's input for `f`: the window over the cache, or the whole prefix without one."""
        B = self.cfg.block_length
        if self.cache is not None:
            mask = None
            if min(f.lo // B, f.groups_hi) != min((f.hi - 1) // B, f.groups_hi):  # several strict blocks in one call
                groups = (torch.arange(f.lo, f.hi, device=self.x.device) // B).clamp(max=f.groups_hi)
                keys = torch.cat([torch.full((f.lo,), -1, device=groups.device), groups])
                mask = block_causal_mask(groups, keys)
            return RowInput(self.seq[f.lo:f.hi], f.lo, mask, self.cache, f.logits)
        groups = (torch.arange(f.hi, device=self.x.device) // B).clamp(max=f.groups_hi)
        return RowInput(self.seq[:f.hi], 0, block_causal_mask(groups), None, f.logits)

    def seconds(self) -> float:
        return time.perf_counter() - self.resumed


Loop = Generator["ForwardAsk | StepRecord", "WindowUpdate | None", None]  # yields asks and records, is sent updates


def _fill_cache(run: Run, upto: int, phase: str, block: int) -> Loop:
    """Compute strict block-causal keys/values of [cache.length, upto) and commit them."""
    cache = run.cache
    if cache is None or cache.length >= upto:
        return
    lo = cache.length
    yield ForwardAsk(lo, upto, upto // run.cfg.block_length, logits=False)  # every block strict, no merged group
    cache.commit(upto)
    yield StepRecord(kind="cache", phase=phase, step=run.decode_forwards, block=block, block_step=0,
                     window=(lo, upto), active=(lo, upto), seconds=run.seconds())


def _step(run: Run, block: int, lo: int, block_step: int, d: WindowUpdate) -> StepRecord:
    """Apply the rule's decision `d` on window [lo, end of `block`) (`llada.decide`) to run.x; its record."""
    B = run.cfg.block_length
    a0, hi = block * B, (block + 1) * B
    if not all(map(math.isfinite, d.conf)):
        raise NonFiniteLogits(f"the model produced non-finite logits at step {run.decode_forwards + 1} "
                              f"(block {block}): its weights are broken or overflow in this dtype")
    run.seq[lo:hi] = d.tokens  # the driver sends updates inside inference mode, where run.x was made
    run.decode_forwards += 1
    old, new, conf = d.old, d.new, d.conf
    had_masks = run.mask_id in old[a0 - lo:]
    written = new if d.written is None else d.written  # the joint rule writes x0; Levenshtein may write others

    def changes(chosen: list[bool]) -> list[Change]:
        return [Change(lo + i, written[i], old[i], conf[i]) for i, yes in enumerate(chosen) if yes]

    return StepRecord(kind="decode", phase="draft" if had_masks else "verify", step=run.decode_forwards,
                      block=block, block_step=block_step, window=(lo, hi), active=(a0, hi),
                      drafts=changes(d.drafted), edits=changes(d.edited), mbe_edits=changes(d.mbe_edited),
                      guesses=new, confidence=conf, seconds=run.seconds(), **_moves(d.levenshtein, a0))


def _moves(s: rule.LevenshteinStep | None, a0: int) -> dict:
    """A Levenshtein step's moves as record fields, at absolute positions (the block starts at a0)."""
    if s is None or not (s.inserts or s.deletes):
        return {}
    at = lambda i: a0 + i if i >= 0 else -1  # noqa: E731 - a block position made absolute, -1 kept
    return {"inserts": [Insert(a0 + m.position, at(m.mask), m.token) for m in s.inserts],
            "deletes": [Delete(a0 + m.position, m.token) for m in s.deletes],
            "moved_to": [at(i) for i in s.moved_to.tolist()]}


def _decode_block(run: Run, block: int) -> Loop:
    """The official per-block loop; asks for each forward and yields its record."""
    cfg, B = run.cfg, run.cfg.block_length
    # 1. The window: the active block, after the MBE blocks still open to edits (MBE on).
    lo = max(run.first, block - cfg.mbe_window) * B if cfg.mbe else block * B
    # 2. The cache covers everything before the window (a prefill first, a refresh after MBE edits).
    yield from _fill_cache(run, lo, "prefill" if run.decode_forwards == 0 else "refresh", block)
    post, block_step, saw_final = 0, 0, False
    masks = bool((run.seq[block * B:(block + 1) * B] == run.mask_id).any())  # then from each decision's list
    while True:
        # 3. Stop after max_post_steps forwards without masks.
        if not masks:
            post += 1
        if post > cfg.max_post_steps:
            break
        block_step += 1
        # 4. One forward over the window; the driver sends back the rule's update (drafts, edits, MBE edits).
        update = yield ForwardAsk(lo, (block + 1) * B, lo // B)
        # 5. Write the update into the sequence and record the step (with the pokes due after it, if any).
        record = _step(run, block, lo, block_step, update)
        masks = run.mask_id in update.after[block * B - lo:]
        if run.decode_forwards in run.pokes:
            yield from _poke(run, record, lo, block)  # the joint rule never goes back (it returns None)
            masks = bool((run.seq[block * B:(block + 1) * B] == run.mask_id).any())
            continue  # a poked block is not final: the next forward sees the changed text
        yield record
        # 6. A step without masks that changes nothing: the block is final.
        if record.phase == "verify" and not record.edits and not record.mbe_edits:
            saw_final = True
            break
    # 7. Without MBE the last forward saw the final tokens: its keys/values go into the cache as they are.
    if run.cache is not None and saw_final and not cfg.mbe:
        run.cache.commit((block + 1) * B)


def _poke(run: Run, record: StepRecord, lo: int, block: int) -> Generator:
    """The hook between two forwards: apply the pokes due after this one, yield its record, then recompute the
    cache where a poke changed a block it holds. Returns the block to go back to (LLaDA2.2: see below), or None.

    A poke in the window [lo, ...) is seen by the next forward, which scores the whole window. A poke in a
    finished block before the window changes keys/values the cache holds: the cache is cut back to that
    block's start and refilled up to `lo` from the changed text (a `refresh` record), which is what a run
    without the cache computes on every forward, so both give the same trace. Without MBE the model never
    edits a finished block again: the poke stays, and only the blocks after it read it. With MBE a poke in
    one of the `mbe_window` blocks before the active one is open to MBE edits, so the model may repair it;
    further back it stays, as without MBE. Either way the active block takes at least one more forward.

    On a LLaDA2.2 run (the Levenshtein rule), a poke that leaves a mask in a block before the active one (a
    masked token, a delete's padding, an inserted mask: no rule step drafts there) re-opens the earliest such
    block: the loop goes back to it, as for a poke after the last forward (`_blocks`)."""
    B = run.cfg.block_length
    with torch.inference_mode():
        for p in run.pokes.pop(run.decode_forwards):
            record.pokes.append(_apply_poke(run, p, record.active))
    yield record
    first = min(p.pos for p in record.pokes) // B * B
    if run.lev is not None:
        gen = run.seq[run.P:block * B]
        if bool((gen == run.mask_id).any()):
            return (run.P + int((gen == run.mask_id).nonzero()[0])) // B  # re-open it; `_blocks` cuts the cache
    if run.cache is not None and first < min(lo, run.cache.length):
        run.cache.commit(first)  # keys/values from the poked block on are stale: refill them
        yield from _fill_cache(run, lo, "refresh", block)
    return None


def _apply_poke(run: Run, p: Poke, active: tuple[int, int]) -> Poked:
    """Write one poke into run.seq (a move shifts the rest of its block); keeps the Levenshtein book of the
    active block in step (`llada.rule.poked_book`). Returns the poke as the trace holds it."""
    B, at = run.cfg.block_length, run.P + p.pos
    a0 = at // B * B
    block = run.seq[a0:a0 + B].tolist()
    poked = Poked(at - a0, p.token, block[at - a0] if p.kind != "insert" else block[-1], p.kind)
    poked.apply(block, B)
    run.seq[a0:a0 + B] = torch.tensor(block, dtype=run.seq.dtype, device=run.seq.device)
    if run.book is not None and a0 == active[0]:
        moved_to = poked.moved_to((0, B)) if p.kind != "write" else list(range(B))
        opened = {"write": [poked.pos] if p.token == run.mask_id != poked.old else [], "delete": [B - 1],
                  "insert": [poked.pos]}[p.kind]
        run.book = rule.poked_book(run.book, moved_to, opened)
    return poked._replace(pos=at)


def _decode_block22(run: Run, block: int) -> Generator:
    """The per-block loop of the Levenshtein rule (LLaDA2.2); asks for each forward and yields its record.
    Returns None, or the earlier block a poke re-opened (`_poke`).

    A poke after one of its steps (`_poke`) keeps the rule's bookkeeping (`llada.rule.poked_book`): the
    original bits move with their tokens and the masks the poke opens are new ones, while the schedule, the
    steps and post-steps counted and the seen blocks stay; a poke after the block's last step re-opens it,
    entered again with fresh bookkeeping (its masks then original), as a poke after the run's last forward does."""
    cfg, B = run.cfg, run.cfg.block_length
    a0, hi = block * B, (block + 1) * B
    # 1. The window and 2. the cache before it, as in `_decode_block`.
    lo = max(run.first, block - cfg.mbe_window) * B if cfg.mbe else a0
    yield from _fill_cache(run, lo, "prefill" if run.decode_forwards == 0 else "refresh", block)
    # 3. The rule's bookkeeping at the block's entry: its masks are the original ones, the prompt is frozen.
    frozen = torch.arange(a0, hi, device=run.seq.device) < run.P
    run.book = rule.start_block(run.seq[a0:hi], frozen, run.mask_id)
    block_step = 0
    while True:
        block_step += 1
        # 4. One forward over the window; the driver sends back the rule's update (moves included).
        update = yield ForwardAsk(lo, hi, lo // B)
        # 5. Write the update into the sequence, keep the book, record the step.
        record = _step(run, block, lo, block_step, update)
        run.book = update.levenshtein.book
        if run.decode_forwards in run.pokes:  # the pokes due after this forward (see `_poke`)
            back = yield from _poke(run, record, lo, block)
            if back is not None:
                return back
            if update.levenshtein.done:  # a poke after the block's last step re-opens it: entered again
                run.book = rule.start_block(run.seq[a0:hi], frozen, run.mask_id)
            continue
        yield record
        # 6. The rule says when the block is done (its final round, or a step without masks that changed nothing).
        if update.levenshtein.done:
            break
    # 7. Without MBE, a last step that changed nothing saw the final tokens: its keys/values are committed as
    #    they are; otherwise the next block's refresh forward recomputes them from the final tokens.
    if run.cache is not None and update.after == update.old and not cfg.mbe:
        run.cache.commit(hi)


def _eos_stop(run: Run, block: int) -> bool:
    if not run.cfg.eos_early_stop:
        return False
    gen = run.seq[run.P:(block + 1) * run.cfg.block_length].tolist()
    return run.mask_id not in gen and not run.stops.isdisjoint(gen)


def loop(run: Run) -> Loop:
    """The decode loop of one row: yields a `ForwardAsk` (answered with the rule's `WindowUpdate` on its logits,
    None for a cache forward) or a `StepRecord`."""
    if run.pokes:
        yield from _poked_loop(run)
        return
    yield from _blocks(run, run.first)


def _blocks(run: Run, first: int) -> Loop:
    """Blocks `first`, `first` + 1, ... decoded in turn, up to the last or an EOS stop. A LLaDA2.2 block may
    send the loop back to an earlier block a poke re-opened (`_poke`): the cache is cut back to its window."""
    decode_block = _decode_block if run.lev is None else _decode_block22
    block = first
    while block < run.n_blocks:
        back = yield from decode_block(run, block)
        if back is not None:
            block = back
            lo = max(run.first, back - run.cfg.mbe_window) * run.cfg.block_length if run.cfg.mbe else \
                back * run.cfg.block_length
            if run.cache is not None and run.cache.length > lo:
                run.cache.commit(lo)  # the re-opened window's keys/values are computed again from its tokens
            continue
        if block + 1 < run.n_blocks and _eos_stop(run, block):  # 8. EOS in a finished block ends the run
            break
        block += 1


def _poked_loop(run: Run) -> Loop:
    """The loop of a run with pokes. A poke due after the run's last forward (its step past the end) applies to
    the finished text on that last forward's record, and re-opens the earliest block it touches: that block is
    decoded again from the changed text (its window and cache as on its first visit), then the blocks after it,
    under the run's own rules (EOS stop included). To know which record is the last, each decode record is held
    until the loop asks for its next forward or record, then passed on unchanged."""
    B, first = run.cfg.block_length, run.first
    while True:
        last = yield from _holding(_blocks(run, first))
        if not run.pokes:
            yield last
            return
        late = [p for step in sorted(run.pokes) for p in run.pokes.pop(step)]  # 9. pokes after the last forward
        run.pokes[run.decode_forwards] = late
        first = min(run.P + p.pos for p in late) // B
        lo = max(run.first, first - run.cfg.mbe_window) * B if run.cfg.mbe else first * B
        yield from _poke(run, last, lo, first)
        if run.cache is not None and run.cache.length > lo:
            run.cache.commit(lo)  # the re-opened window's keys/values are computed again from its tokens


def _holding(inner: Loop) -> Generator["ForwardAsk | StepRecord", "WindowUpdate | None", StepRecord]:
    """`inner`'s asks and records passed on, each decode record one item late; returns the last one, not passed."""
    held, answer = None, None
    while True:
        try:
            item = inner.send(answer)
        except StopIteration:
            return held
        if isinstance(item, StepRecord) and item.kind == "decode":
            if held is not None:
                yield held
            held, answer = item, None
            continue
        if held is not None:
            yield held
            held = None
        answer = yield item


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
