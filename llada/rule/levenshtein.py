"""LLaDA2.2's Levenshtein rule on the active block: drafts, edits, and the moves DELETE and SPLIT make.

One forward's candidates (`levenshtein_candidates`, the mask logit suppressed) turn the block (W,) into
its next state (`levenshtein_step`), or R blocks (R, W) at once (`levenshtein_rows`, equal row by row).
The prompt's tail in the block (P positions, a prefix) never moves. docs/llada22.md works it by hand:

    book = start_block(block, frozen, mask_id)                 # at the block's entry
    cand = levenshtein_candidates(logits, lev)                 # logits (W, V)
    s = levenshtein_step(block, cand, frozen, book, lev)
    block, book = s.tokens, s.book                             # s.done: the block is finished

One step: 1. count post-steps, decide the final round; 2. draft (M2T) on the schedule; 3. edit (T2T) as
in 2.1; in the final round MASK, DELETE and SPLIT become `plain`; 4. the anti-loop escape on a written
block seen before; 5. the moves, left to right: DELETE drops its position, SPLIT becomes [MASK, the token
it held before this step], cut or padded with new masks to W.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

import torch

class PostCount(str, Enum):
    """How post-steps count while an original mask is unresolved. The two differ only when one comes back,
    which only a written mask candidate does (a caller that does not suppress the mask logit)."""

    RESET = "reset"  # the reference decoder: post-steps start again from 0
    CUMULATIVE = "cumulative"  # SGLang: the count goes on; the post-step budget is spent once per block


class Escape(str, Enum):
    """Which changed position the anti-loop escape rewrites with its runner-up candidate."""

    LEAST_CONFIDENT = "least_confident"  # SGLang, FluxServe: the lowest p (ties: the leftmost); deterministic
    RANDOM = "random"  # the reference: uniform over the changed positions, from the caller's generator


@dataclass(frozen=True)
class Levenshtein:
    """Settings of the LLaDA2.2 rule; the defaults are the report's S mode."""

    mask_id: int
    delete_id: int
    split_id: int
    threshold: float = 0.5  # tau_mask, strict
    editing_threshold: float | None = 0.0  # tau_edit, strict; None: no T2T
    steps: int = 32  # the schedule spreads the block's entry masks over this many steps
    max_post_steps: int = 16
    max_steps: int = 1000  # the step with index max_steps - 1 is a final round, whatever else holds
    post_count: PostCount = PostCount.RESET
    escape: Escape = Escape.LEAST_CONFIDENT

    def __post_init__(self):
        object.__setattr__(self, "post_count", PostCount(self.post_count))
        object.__setattr__(self, "escape", Escape(self.escape))
        if len({self.mask_id, self.delete_id, self.split_id}) != 3:
            raise ValueError(f"mask, DELETE and SPLIT need three ids, got {self.mask_id}, {self.delete_id}, "
                             f"{self.split_id}")
        for name in ("threshold", "editing_threshold"):
            if getattr(self, name) is not None and not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.steps < 1 or self.max_post_steps < 0 or self.max_steps < 1:
            raise ValueError(f"steps and max_steps must be >= 1 and max_post_steps >= 0, got {self.steps}, "
                             f"{self.max_steps}, {self.max_post_steps}")

    def forbidden(self) -> tuple[int, int, int]:
        return self.mask_id, self.delete_id, self.split_id


@dataclass(frozen=True)
class Candidates:
    """What one forward proposes at each block position, (W,) or (R, W). The caller suppresses the mask
    logit before any of it (`levenshtein_candidates` does, from logits): the rule never drafts a mask."""

    token: torch.Tensor  # the best token
    p: torch.Tensor  # its probability (softmax with the mask logit suppressed)
    runner_up: torch.Tensor  # the second best: what the anti-loop escape writes
    plain: torch.Tensor  # the best that is neither DELETE nor SPLIT: what the final round writes


def levenshtein_candidates(logits: torch.Tensor, lev: Levenshtein) -> Candidates:
    """Greedy candidates from logits (..., V): fp32 softmax with the mask logit at -inf; argmax ties go to
    the lowest id."""
    logits = logits.float().clone()
    logits[..., lev.mask_id] = -torch.inf
    p, token = torch.softmax(logits, dim=-1).max(dim=-1)
    runner_up = logits.scatter(-1, token[..., None], -torch.inf).argmax(-1)
    logits[..., [lev.delete_id, lev.split_id]] = -torch.inf
    return Candidates(token, p, runner_up, logits.argmax(-1))


@dataclass(frozen=True)
class BlockBook:
    """The rule's bookkeeping of one active block between its steps (`start_block` makes it at entry)."""

    original: torch.Tensor  # (W,) bool: the token here descends from a mask the block entered with
    entry_masks: int  # masks at entry: the schedule spreads them over `steps`
    step: int = 0  # steps taken in this block
    post: int = 0  # post-steps counted
    seen: frozenset = frozenset()  # written blocks (tuples of W ids) of earlier steps, before their moves


@dataclass(frozen=True)
class BlockBooks:
    """`BlockBook` of R rows: original (R, W), counters (R,) long, one frozenset of seen blocks per row."""

    original: torch.Tensor
    entry_masks: torch.Tensor
    step: torch.Tensor
    post: torch.Tensor
    seen: tuple[frozenset, ...]

    def row(self, r: int) -> BlockBook:
        return BlockBook(self.original[r], int(self.entry_masks[r]), int(self.step[r]), int(self.post[r]),
                         self.seen[r])

    @classmethod
    def of(cls, books: Sequence[BlockBook]) -> "BlockBooks":
        """The books of R blocks stacked, each as it is alone (the inverse of `row`)."""
        device = books[0].original.device
        counters = torch.tensor([[b.entry_masks, b.step, b.post] for b in books], dtype=torch.long, device=device)
        return cls(torch.stack([b.original for b in books]), *counters.T, tuple(b.seen for b in books))


def start_block(tokens: torch.Tensor, frozen: torch.Tensor, mask_id: int) -> BlockBook | BlockBooks:
    """The bookkeeping of a block (W,) or of R blocks (R, W) at entry: every non-prompt mask is original."""
    original = (tokens == mask_id) & ~frozen
    if tokens.dim() == 1:
        return BlockBook(original, int(original.sum()))
    zeros = torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)
    return BlockBooks(original, original.sum(-1), zeros, zeros.clone(), (frozenset(),) * tokens.shape[0])


def poked_book(book: BlockBook, moved_to: Sequence[int], opened: Sequence[int]) -> BlockBook:
    """The bookkeeping of an active block after a change from outside (a poke, `llada.loop`): each position's
    original bit travels with its token (`moved_to`: where position i's token went, -1 gone), and the masks the
    change opened (`opened`: a masked token, a deleted token's padding, an inserted mask) are **new** masks, as
    SPLIT's and DELETE's are: the schedule owes one transfer each at the next step, and they neither reset nor
    hold back the post-step count. The schedule, the steps taken, the post-steps and the seen blocks stay: a
    poke is not a step of the block."""
    W = book.original.shape[0]
    if len(moved_to) != W or not all(-1 <= t < W for t in moved_to) or not all(0 <= i < W for i in opened):
        raise ValueError(f"a poked block of {W} positions needs moved_to in [-1, {W}) and opened in [0, {W}), "
                         f"got {list(moved_to)}, {list(opened)}")
    bits = [False] * W
    for i, to in enumerate(moved_to):
        if to >= 0:
            bits[to] = bool(book.original[i])
    for i in opened:
        bits[i] = False
    return replace(book, original=torch.tensor(bits, device=book.original.device))


@dataclass(frozen=True)
class Insert:
    position: int  # where SPLIT was written (before the moves)
    mask: int  # where the inserted mask is after the moves; -1: cut off at the block's end
    token: int  # the token restored after it: what `position` held before this step


@dataclass(frozen=True)
class Delete:
    position: int  # where DELETE was written (before the moves)
    token: int  # the token removed: what `position` held before this step


@dataclass(frozen=True)
class LevenshteinStep:
    """What one step does to a block of W positions; positions are those before the moves, but `tokens`."""

    tokens: torch.Tensor  # (W,) the block after the step, moves included
    written: torch.Tensor  # (W,) the block after the writes, before the moves
    drafted: torch.Tensor  # (W,) bool: a mask replaced (M2T)
    edited: torch.Tensor  # (W,) bool: a token replaced (T2T)
    moved_to: torch.Tensor  # (W,) long: where the position's token is after the moves; -1 deleted or cut off
    inserts: tuple[Insert, ...]
    deletes: tuple[Delete, ...]
    book: BlockBook  # for the next step
    final: bool  # this step was the final round
    escaped: int  # the position the anti-loop escape rewrote; -1 none
    done: bool  # the block is finished: the final round, or it had no mask and nothing changed


@dataclass(frozen=True)
class LevenshteinRows:
    """`LevenshteinStep` of R rows: tensors (R, W) or (R,), one tuple of inserts and of deletes per row."""

    tokens: torch.Tensor
    written: torch.Tensor
    drafted: torch.Tensor
    edited: torch.Tensor
    moved_to: torch.Tensor
    inserts: tuple[tuple[Insert, ...], ...]
    deletes: tuple[tuple[Delete, ...], ...]
    book: BlockBooks
    final: torch.Tensor  # (R,) bool
    escaped: torch.Tensor  # (R,) long
    done: torch.Tensor  # (R,) bool

    def row(self, r: int) -> LevenshteinStep:
        return LevenshteinStep(self.tokens[r], self.written[r], self.drafted[r], self.edited[r], self.moved_to[r],
                               self.inserts[r], self.deletes[r], self.book.row(r), bool(self.final[r]),
                               int(self.escaped[r]), bool(self.done[r]))


def levenshtein_step(tokens: torch.Tensor, cand: Candidates, frozen: torch.Tensor, book: BlockBook,
                     lev: Levenshtein, generator: torch.Generator | None = None) -> LevenshteinStep:
    """One step of the LLaDA2.2 rule on an active block: tokens (W,), candidates (W,) each, frozen (W,) bool
    (the prompt, a prefix). Plain Python over the W positions: the reference for `levenshtein_rows`."""
    _check22(tokens, cand, frozen, book.original, lev, generator, rows=False)
    old, x, orig = tokens.tolist(), cand.token.tolist(), book.original.tolist()
    p = cand.p.tolist()  # float32 values; the thresholds are rounded to float32 the same way below
    tau, tau_edit = _rounded(lev.threshold, cand.p), _rounded(lev.editing_threshold, cand.p)
    W, P, M = len(old), int(frozen.sum()), lev.mask_id
    masks = [i for i in range(P, W) if old[i] == M]
    left = any(orig[i] for i in masks)  # an original mask is unresolved
    post = (0 if lev.post_count is PostCount.RESET else book.post) if left else book.post + 1
    final = book.step >= lev.max_steps - 1 or (post >= lev.max_post_steps if lev.max_post_steps else not left)
    need = _scheduled(book.entry_masks, lev.steps, book.step)
    need = W if need is None else need + sum(not orig[i] for i in masks)
    high = [i for i in masks if p[i] > tau]
    chosen = set(high if len(high) >= need else sorted(masks, key=lambda i: (-p[i], i))[:need])
    if lev.max_post_steps == 0 and left and all(i in chosen for i in masks if orig[i]):
        final = True  # no post-steps: the step that resolves the last original mask is the final round
    chosen = set(masks) if final else chosen
    edits = {i for i in range(P, W) if old[i] != M and x[i] != old[i] and p[i] > tau_edit}
    written = [x[i] if i in chosen or i in edits else old[i] for i in range(W)]
    if final:
        plain = cand.plain.tolist()
        written = [plain[i] if t in lev.forbidden() and (i in chosen or i in edits) else t
                   for i, t in enumerate(written)]
    escaped = -1
    if not final and tuple(written) in book.seen:
        changed = [i for i in sorted(chosen | edits) if written[i] != old[i]]
        if changed:
            escaped = _pick(changed, p, lev, generator)
            written[escaped] = int(cand.runner_up[escaped])
    out, bits, moved_to, inserts, deletes = [], [], [-1] * W, [], []
    for i, t in enumerate(written):  # the moves, left to right
        if i >= P and t == lev.delete_id:
            deletes.append(Delete(i, old[i]))
            continue
        if i >= P and t == lev.split_id:
            inserts.append(Insert(i, len(out) if len(out) < W else -1, old[i]))
            out, bits, t = out + [M], bits + [False], old[i]
        moved_to[i] = len(out) if len(out) < W else -1
        out, bits = out + [t], bits + [orig[i]]
    pad = max(0, W - len(out))
    out, bits = out[:W] + [M] * pad, bits[:W] + [False] * pad
    like = dict(device=tokens.device)
    return LevenshteinStep(
        tokens=torch.tensor(out, dtype=tokens.dtype, **like), written=torch.tensor(written, dtype=tokens.dtype, **like),
        drafted=torch.tensor([i in chosen and written[i] != old[i] for i in range(W)], **like),
        edited=torch.tensor([i in edits and written[i] != old[i] for i in range(W)], **like),
        moved_to=torch.tensor(moved_to, dtype=torch.long, **like), inserts=tuple(inserts), deletes=tuple(deletes),
        book=BlockBook(torch.tensor(bits, **like), book.entry_masks, book.step + 1, post,
                       book.seen | {tuple(written)}),
        final=final, escaped=escaped, done=final or (not masks and out == old))


def levenshtein_rows(tokens: torch.Tensor, cand: Candidates, frozen: torch.Tensor, books: BlockBooks,
                     lev: Levenshtein, generators: Sequence[torch.Generator] | None = None) -> LevenshteinRows:
    """`levenshtein_step` of R blocks at once: tokens, candidates and frozen (R, W); with Escape.RANDOM, one
    generator per row. Each row gets what it gets alone; only the seen-block check runs row by row."""
    _check22(tokens, cand, frozen, books.original, lev, generators, rows=True)
    M = lev.mask_id
    masks = (tokens == M) & ~frozen  # (R, W)
    left = (masks & books.original).any(-1)  # (R,)
    counted = books.post if lev.post_count is PostCount.CUMULATIVE else torch.zeros_like(books.post)
    post = torch.where(left, counted, books.post + 1)
    final = (books.step >= lev.max_steps - 1) | (post >= lev.max_post_steps if lev.max_post_steps else ~left)
    chosen = _draft_rows(masks, cand.p, books, lev)
    if lev.max_post_steps == 0:
        final |= left & ~(masks & books.original & ~chosen).any(-1)
    chosen = torch.where(final[:, None], masks, chosen)
    edits = ~masks & ~frozen & (cand.token != tokens) & (cand.p > _rounded(lev.editing_threshold, cand.p))
    written = torch.where(chosen | edits, cand.token, tokens)
    scrub = final[:, None] & (chosen | edits) & torch.isin(written, torch.tensor(lev.forbidden(), device=tokens.device))
    written = torch.where(scrub, cand.plain, written)
    escaped, seen = _escape_rows(tokens, written, chosen | edits, final, cand, books.seen, lev, generators)
    new, bits, moved_to, inserts, deletes = _move_rows(tokens, written, frozen, books.original, lev)
    changed = written != tokens
    return LevenshteinRows(
        tokens=new, written=written, drafted=chosen & changed, edited=edits & changed, moved_to=moved_to,
        inserts=inserts, deletes=deletes,
        book=BlockBooks(bits, books.entry_masks, books.step + 1, post, seen),
        final=final, escaped=escaped, done=final | (~masks.any(-1) & (new == tokens).all(-1)))


def _scheduled(entry_masks: int, steps: int, t: int) -> int | None:
    """How many entry masks the schedule drafts at step t (from 0): an even share, the remainder first;
    None once the schedule is over (every mask)."""
    return None if t >= steps else entry_masks // steps + (t < entry_masks % steps)


def _rounded(threshold: float | None, p: torch.Tensor) -> float:
    """A threshold as p's dtype holds it (as a tensor comparison rounds it); None: +inf, nothing passes."""
    return torch.inf if threshold is None else float(torch.tensor(threshold, dtype=p.dtype))


def _pick(changed: list[int], p: list[float], lev: Levenshtein, generator: torch.Generator | None) -> int:
    """The position the escape rewrites, among the changed ones (ascending)."""
    if lev.escape is Escape.RANDOM:
        return changed[int(torch.randint(len(changed), (1,), generator=generator))]
    return min(changed, key=lambda i: (p[i], i))


def _draft_rows(masks: torch.Tensor, p: torch.Tensor, books: BlockBooks, lev: Levenshtein) -> torch.Tensor:
    """M2T of R rows (bool (R, W)): the passing masks when at least `need` pass, else the `need` most
    confident (a stable sort: ties go to the leftmost)."""
    R, W = masks.shape
    t, n = books.step, books.entry_masks
    share = n // lev.steps + (t < n % lev.steps).long()
    need = torch.where(t < lev.steps, share + (masks & ~books.original).sum(-1), W)  # (R,)
    conf = torch.where(masks, p, torch.full_like(p, -torch.inf))
    high = masks & (conf > _rounded(lev.threshold, p))
    order = conf.sort(dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(W, device=p.device).expand(R, W))
    return torch.where((high.sum(-1) >= need)[:, None], high, masks & (rank < need[:, None]))


def _escape_rows(tokens, written, picked, final, cand, seen, lev, generators):
    """The anti-loop escape of each row (writes into `written`): the escaped position per row (R,) and the
    rows' seen blocks with this step's written block added."""
    escaped = [-1] * len(seen)
    keys = [tuple(row) for row in written.tolist()]
    for r, key in enumerate(keys):
        if key in seen[r] and not final[r]:
            changed = (picked[r] & (written[r] != tokens[r])).nonzero().flatten().tolist()
            if changed:
                escaped[r] = _pick(changed, cand.p[r].tolist(), lev, generators[r] if generators else None)
                written[r, escaped[r]] = cand.runner_up[r, escaped[r]]
                keys[r] = tuple(written[r].tolist())
    return torch.tensor(escaped, device=tokens.device), tuple(s | {k} for s, k in zip(seen, keys))


def _move_rows(tokens, written, frozen, original, lev: Levenshtein):
    """The moves of R rows at once: each position gives 0 (DELETE), 2 (SPLIT: the mask, then the restored
    token) or 1 tokens; a cumulative sum says where they start, and a scatter into 2W + 1 slots (the last a
    sink for what goes nowhere) lays them out; the first W are the block, masks after its end."""
    R, W = tokens.shape
    live = ~frozen
    dele, split = live & (written == lev.delete_id), live & (written == lev.split_id)
    count = 1 - dele.long() + split.long()  # (R, W)
    start = count.cumsum(-1) - count  # (R, W) where each position's first output lands
    sink = torch.full_like(start, 2 * W)
    first, second = torch.where(dele, sink, start), torch.where(split, start + 1, sink)
    out = torch.full((R, 2 * W + 1), lev.mask_id, dtype=tokens.dtype, device=tokens.device)
    out.scatter_(1, first, torch.where(split, lev.mask_id, written)).scatter_(1, second, tokens)
    bits = torch.zeros(R, 2 * W + 1, dtype=torch.bool, device=tokens.device)
    bits.scatter_(1, first, original & ~split).scatter_(1, second, original)
    landed = torch.where(split, start + 1, start)
    moved_to = torch.where(dele | (landed >= W), -1, landed)
    mask_at = torch.where(start < W, start, -1)
    inserts, deletes = [[] for _ in range(R)], [[] for _ in range(R)]
    for r, i in split.nonzero().tolist():
        inserts[r].append(Insert(i, int(mask_at[r, i]), int(tokens[r, i])))
    for r, i in dele.nonzero().tolist():
        deletes[r].append(Delete(i, int(tokens[r, i])))
    return out[:, :W], bits[:, :W], moved_to, tuple(map(tuple, inserts)), tuple(map(tuple, deletes))


def _check22(tokens, cand, frozen, original, lev, generator, rows: bool) -> None:
    """Shapes, the prompt as a prefix, `plain` free of MASK/DELETE/SPLIT, a generator for Escape.RANDOM."""
    dims, name = (2, "levenshtein_rows needs (R, W)") if rows else (1, "levenshtein_step needs (W,)")
    parts = {"tokens": tokens, "frozen": frozen, "original": original} | vars(cand)
    shapes = {k: tuple(t.shape) for k, t in parts.items()}
    if len(set(shapes.values())) != 1 or tokens.dim() != dims:
        raise ValueError(f"{name} tensors of one shape, got shapes {shapes}")
    if frozen.dtype != torch.bool or original.dtype != torch.bool:
        raise ValueError(f"frozen and original must be bool tensors, got {frozen.dtype}, {original.dtype}")
    prefix = torch.arange(tokens.shape[-1], device=frozen.device) < frozen.sum(-1, keepdim=True)
    if not torch.equal(frozen, prefix):
        raise ValueError("frozen must be a prefix of the block (the prompt's tail): the prompt never moves")
    if torch.isin(cand.plain, torch.tensor(lev.forbidden(), device=tokens.device)).any():
        raise ValueError("Candidates.plain must be neither MASK, DELETE nor SPLIT (suppress all three logits)")
    if lev.escape is Escape.RANDOM and (generator is None or rows and len(generator) != tokens.shape[0]):
        raise ValueError("Escape.RANDOM needs a torch.Generator (one per row for levenshtein_rows)")
