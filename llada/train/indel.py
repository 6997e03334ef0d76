"""The LLaDA2.2 objective: drafts with tokens missing or extra, labelled DELETE and SPLIT.

LLaDA2.2 decodes with the Levenshtein rule (`llada.rule.levenshtein`): in the active block a position
whose candidate is DELETE is dropped, and one whose candidate is SPLIT becomes [MASK, the token it held],
the block cut or padded with new masks to its length. A model learns to write those two tokens from
drafts that are wrong by whole tokens, labelled from their alignment to the target block:

    target      a  b  c  d  e  f              (the generated part of one block, n = 6)
    delete b    a     c  d  e  f
    insert x    a     c  x  d  e  f
    pad / cut   a  c  x  d  e  f  ->  a  c  x  d  e  f        (n - 1 + 1 = n: no pad, nothing cut)
    labels      a  S  D  d  e  f              S = SPLIT (b is missing before c), D = DELETE (x is extra)
    the moves   a  M  c  d  e  f              the target, a mask where b goes

`indel_block` corrupts one block and labels it; each item of the corrupted block is a kept target
token (label: itself, or SPLIT when the target token just before it is missing), an extra token
(label: DELETE) or a pad mask at the end (label: the target token it stands for, counted from the
last kept token; MASK, outside the loss, when it stands for nothing). Deleted tokens are never
adjacent, so each gap between kept tokens misses at most one token and one SPLIT restores it (the rule
inserts one mask per SPLIT). Extras are drawn from the block's own tokens (a repeated digit, a
duplicated word: what a parallel draft gets wrong) or, with probability `uniform_extra`, from the
whole vocabulary. On top, kept tokens that are not SPLIT-labelled are masked
with the block's M2T noise level, as in the 2.1 objective.

`tests/test_train_indel.py` checks the labels against the rule: a labelled block, passed through the
rule's moves, becomes the target with masks where the missing tokens go.

What the public sources fix and what is chosen here (docs/training.md, "The LLaDA2.2 objective"): the
report names the two edit tokens and the rule; the corruption below (at most one missing token per
gap, extras from the block's tokens, pads labelled with the tail of the target) is this project's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .objective import Batch, NoiseConfig, corrupt, noisy_logits


@dataclass(frozen=True)
class IndelConfig:
    """How often and how hard drafts are corrupted by whole tokens."""

    share: float = 0.5  # fraction of rows whose blocks get deletions and insertions (the rest: 2.1 noise)
    max_deletes: float = 0.25  # up to this fraction of a block's generated tokens go missing
    max_inserts: float = 0.25  # ... and this many extra tokens come in
    uniform_extra: float = 0.2  # share of extra tokens drawn from the whole vocabulary

    def __post_init__(self):
        for name in ("share", "max_deletes", "max_inserts", "uniform_extra"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"indel {name} must be in [0, 1], got {getattr(self, name)}")


@dataclass(frozen=True)
class EditIds:
    """The three ids the objective writes: the mask (pads), DELETE and SPLIT."""

    mask: int
    delete: int
    split: int


@dataclass(frozen=True)
class Labelled:
    """One corrupted block of n generated positions: what the model reads and what it should write."""

    tokens: list[int]  # (n,) the corrupted block (pads are masks)
    labels: list[int]  # (n,) the target token, DELETE or SPLIT at each position
    missing: list[int]  # target positions that hold a mask after the rule's moves (SPLIT's masks, the bare tail)


def indel_block(target: list[int], rng: random.Random, cfg: IndelConfig, ids: EditIds, vocab: int) -> Labelled:
    """Corrupt one block (its generated tokens `target`) by deletions and insertions and label it."""
    n = len(target)
    if n < 2:
        raise ValueError(f"indel_block needs a block of at least 2 generated tokens, got {n}")
    while True:  # a draw whose extras all fall past the end and that deletes nothing changes nothing: draw again
        k = rng.randint(0, max(1, int(cfg.max_deletes * n)))
        deleted = _spaced(n, k, rng)
        kept = [("keep", i) for i in range(n) if i not in deleted]
        j = rng.randint(0 if deleted else 1, max(1, int(cfg.max_inserts * n)))
        for _ in range(j):  # extra tokens at random slots
            kept.insert(rng.randint(0, len(kept)), ("extra", _extra(target, rng, cfg, ids, vocab)))
        out = _label(target, kept[:n] + [("pad", None)] * (n - len(kept)), deleted, ids)
        if out.tokens != target:
            return out


def _spaced(n: int, k: int, rng: random.Random) -> set[int]:
    """Up to k positions of range(n), no two adjacent (each gap misses at most one token)."""
    chosen: set[int] = set()
    for i in rng.sample(range(n), n):
        if len(chosen) == k:
            break
        if i - 1 not in chosen and i + 1 not in chosen:
            chosen.add(i)
    return chosen


def _extra(target: list[int], rng: random.Random, cfg: IndelConfig, ids: EditIds, vocab: int) -> int:
    if rng.random() >= cfg.uniform_extra:
        return rng.choice(target)
    special = {ids.mask, ids.delete, ids.split}
    token = rng.randrange(vocab)
    while token in special:
        token = rng.randrange(vocab)
    return token


def _label(target: list[int], items: list[tuple], deleted: set[int], ids: EditIds) -> Labelled:
    """Labels from the alignment: extra -> DELETE, kept after a missing token -> SPLIT, pads -> the tail.

    A pad that stands for nothing (more pads than tail tokens) is labelled MASK: it stays a mask and the
    loss skips it (`corrupt22` gives it weight 0)."""
    n = len(target)
    last = max((v for kind, v in items if kind == "keep"), default=-1)  # the last kept target position
    tokens, labels, tail = [], [], last
    for kind, value in items:
        if kind == "extra":
            tokens.append(value)
            labels.append(ids.delete)
        elif kind == "keep":
            tokens.append(target[value])
            labels.append(ids.split if value - 1 in deleted else target[value])
        else:  # a pad mask stands for the next target token after the last kept one, if any is left
            tail += 1
            tokens.append(ids.mask)
            labels.append(target[tail] if tail < n else ids.mask)
    missing = sorted({i for i in deleted if i < last} | set(range(tail + 1, n)))
    return Labelled(tokens, labels, missing)


def corrupt22(batch: Batch, block: int, ids: EditIds, vocab: int, noise: NoiseConfig, cfg: IndelConfig,
              gen_rng: torch.Generator, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noisy copy (N, L), labels (N, L) and loss weights (N, L) for the 2.2 objective.

    Rows drawn for indel (`cfg.share`) get `indel_block` on the generated part of every block and the
    block's M2T masking on top; the other rows get the 2.1 corruption (`objective.corrupt`)."""
    noisy, masked, replaced = corrupt(batch, block, ids.mask, vocab, noise, gen_rng)
    labels = batch.ids.clone()
    weight = torch.where(masked | replaced, 1.0, noise.keep_weight)
    if batch.segment is not None:  # packed rows: items would move across each other; 2.1 noise only
        return noisy, labels, weight * batch.generated()
    gen = batch.generated()
    rows, ids_list, gen_list = noisy.tolist(), batch.ids.tolist(), gen.tolist()
    labels_list, weight_list = labels.tolist(), weight.tolist()
    for r in range(len(rows)):
        if rng.random() >= cfg.share:
            continue
        for start in range(0, len(rows[r]), block):
            span = [i for i in range(start, start + block) if gen_list[r][i]]
            if len(span) < 2:
                continue
            s, e = span[0], span[-1] + 1
            out = indel_block(ids_list[r][s:e], rng, cfg, ids, vocab)
            level = noise.min_t + (1 - noise.min_t) * rng.random()
            for off, (tok, lab) in enumerate(zip(out.tokens, out.labels)):
                mask_it = tok != ids.mask and lab not in (ids.split, ids.delete) and rng.random() < level
                rows[r][s + off] = ids.mask if mask_it else tok
                labels_list[r][s + off] = lab
                touched = mask_it or tok == ids.mask or lab != tok
                weight_list[r][s + off] = 0.0 if lab == ids.mask else 1.0 if touched else noise.keep_weight
    dev = batch.ids.device
    as_tensor = lambda x, dt: torch.tensor(x, dtype=dt, device=dev)  # noqa: E731
    return (as_tensor(rows, batch.ids.dtype), as_tensor(labels_list, torch.long),
            as_tensor(weight_list, torch.float32) * gen)


def levenshtein_loss(model, batch: Batch, block: int, ids: EditIds, noise: NoiseConfig, cfg: IndelConfig,
                     gen_rng: torch.Generator, rng: random.Random) -> torch.Tensor:
    """Weighted cross-entropy of the labels (target tokens, DELETE, SPLIT) at the noisy generated positions."""
    noisy, labels, weight = corrupt22(batch, block, ids, model.config.vocab_size, noise, cfg, gen_rng, rng)
    logits = noisy_logits(model, batch.ids, noisy, block, batch.segment)  # (N, L, V)
    ce = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # (N, L)
    return (ce * weight).sum() / weight.sum().clamp(min=1.0)
