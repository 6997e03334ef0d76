"""Sampling and a round's decisions: logits to (x0, p), and the step rule for every row at once.

Turning logits into a token and its confidence p: greedy, or temperature / top-k / top-p sampling
(`sample_tokens`); greedy rows of one forward in one pass (`greedy_rows`).

After a row-batched forward, each decode row needs x0 and p from its logits and the
rule's decision on its window (`llada.rule.step`). `decide` makes them for all rows together: greedy
rows share one softmax over the forward's logits in place (`greedy_joined`), rows that sample draw from
their own generator one by one, and rows with windows of one length share one call of the rule, with
their own settings. Nothing is applied here: each row's loop applies its `WindowUpdate` and records it.

Which rule a run follows (`levenshtein_of`): its checkpoint's, LLaDA2.1's joint draft-and-edit rule or
LLaDA2.2's Levenshtein rule (`llada.rule.levenshtein`), unless `DecodeConfig.rule` names one. Levenshtein
rows are decided apart, in groups of one `Levenshtein` settings object and one block length, each group
by one `levenshtein_rows` call (equal, row by row, to the row alone). Their MBE blocks, if any, get 2.1
edits (T2T) with the `plain` candidates, never the mask, DELETE or SPLIT (docs/llada22.md, "MBE under 2.2").
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import rule


def sample_tokens(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                  top_p: float | None = None, generator: torch.Generator | None = None):
    """logits (N, V) fp32 -> tokens (N,) and their probabilities p (N,) under the sampling distribution.

    temperature 0 is greedy: the argmax and its softmax probability."""
    if temperature == 0:
        p, x0 = torch.softmax(logits.float(), dim=-1).max(dim=-1)
        return x0, p
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    if top_p is not None and top_p < 1.0:
        logits = _nucleus(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (N, V)
    x0 = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return x0, probs.gather(-1, x0[:, None]).squeeze(-1)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches top_p (the best token always stays)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    drop_sorted = cum - torch.softmax(sorted_logits, dim=-1) >= top_p  # mass before this token already enough
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, -torch.inf)


CHUNK = 1 << 22  # greedy_rows takes the softmax of at most this many logits at once (16 MiB in fp32)


def greedy_rows(logits: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Greedy (x0, p) of several (T_i, V) logits at once, each as `sample_tokens` gives it alone: the
    softmax and the max work row by row, so rows side by side change nothing. Logits that lie in one
    stretch of one tensor (a row-batched forward's) are read there, without a copy, `CHUNK` logits at a
    time (a large vocabulary's softmax is not held for every row at once); others one tensor at a time."""
    joined = greedy_joined(logits)
    if joined is None:
        return [sample_tokens(t) for t in logits]
    x0, p, offsets = joined
    return [(x0[at:at + t.shape[0]], p[at:at + t.shape[0]]) for t, at in zip(logits, offsets)]


def greedy_joined(logits: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[int]] | None:
    """`greedy_rows` of logits that share one stretch of one tensor: x0, p (rows of the stretch,) and where
    each logits' rows start in them; None when they do not share one."""
    region, offsets = _shared_region(logits)
    if region is None:
        return None
    step = max(1, CHUNK // region.shape[1])
    parts = [torch.softmax(region[a:a + step].float(), dim=-1).max(dim=-1) for a in range(0, region.shape[0], step)]
    p, x0 = (parts[0].values, parts[0].indices) if len(parts) == 1 else \
        (torch.cat([part.values for part in parts]), torch.cat([part.indices for part in parts]))  # (rows,) each
    return x0, p, offsets


def _shared_region(logits: list[torch.Tensor]) -> tuple[torch.Tensor | None, list[int]]:
    """The stretch of rows of one tensor that holds every (T_i, V) logits, and where each starts in it;
    (None, []) when they do not share one, or it holds more than twice their rows (plus 8)."""
    first = logits[0]
    V = first.shape[-1]
    if not all(t.dim() == 2 and t.shape[1] == V and t.is_contiguous() and t.dtype == first.dtype
               and t.device == first.device and t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
               for t in logits):
        return None, []
    starts = [t.storage_offset() for t in logits]
    lo = min(starts)
    hi = max(start + t.numel() for start, t in zip(starts, logits))
    rows = (hi - lo) // V
    if any((start - lo) % V for start in starts) or (hi - lo) % V or rows > 2 * sum(t.shape[0] for t in logits) + 8:
        return None, []
    return first.as_strided((rows, V), (V, 1), lo), [(start - lo) // V for start in starts]



class WindowUpdate(NamedTuple):
    """The rule's decision on one row's window [lo, hi), with what the step's record lists."""

    tokens: torch.Tensor  # (W,) the window after the step
    after: list[int]  # the same, as a list
    old: list[int]  # the window before it
    new: list[int]  # x0 at every position
    conf: list[float]  # p at every position
    drafted: list[bool]
    edited: list[bool]
    mbe_edited: list[bool]
    written: list[int] | None = None  # Levenshtein: the window after the writes, before the moves
    levenshtein: rule.LevenshteinStep | None = None  # Levenshtein: the active block's step (moves, book, done)


class Window(NamedTuple):
    """A decode forward's window [lo, hi) of a row; its active block is the window's last `block_length`."""

    lo: int
    hi: int


def levenshtein_of(model_config, cfg, mask_id: int) -> rule.Levenshtein | None:
    """The Levenshtein settings of a run of `cfg` on a model of `model_config`, None when it follows the joint
    (2.1) rule; ValueError when the Levenshtein rule cannot run there."""
    name = cfg.rule or ("levenshtein" if model_config.version == "2.2" else "joint")
    if name == "joint":
        return None
    delete, split = model_config.delete_token_id, model_config.split_token_id
    if delete is None or split is None:
        raise ValueError(f"rule 'levenshtein' needs a LLaDA2.2 checkpoint (delete_token_id and split_token_id in "
                         f"config.json); this model is LLaDA{model_config.version}: use rule 'joint'")
    if cfg.temperature != 0:
        raise ValueError(f"rule 'levenshtein' decodes greedily: temperature must be 0, got {cfg.temperature}")
    if mask_id in (delete, split):
        raise ValueError(f"the mask id {mask_id} is the model's DELETE or SPLIT id ({delete}, {split})")
    return rule.Levenshtein(mask_id, delete, split, cfg.threshold, cfg.editing_threshold, cfg.steps,
                            cfg.max_post_steps, post_count=cfg.post_count, escape=cfg.escape)


def decide(runs: list, windows: list[Window], logits: list[torch.Tensor]) -> list[WindowUpdate]:
    """Each run's `WindowUpdate` on its window, from its logits (W, V) (`runs`: `llada.loop.Run`s)."""
    out: list[WindowUpdate | None] = [None] * len(runs)
    joint = [i for i, run in enumerate(runs) if run.lev is None]
    if joint:
        decided = _joint([runs[i] for i in joint], [windows[i] for i in joint], [logits[i] for i in joint])
        for i, decision in zip(joint, decided):
            out[i] = decision
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        if run.lev is not None:
            groups.setdefault((run.lev, run.cfg.block_length), []).append(i)
    for rows in groups.values():
        for i, decision in zip(rows, _levenshtein(runs, windows, logits, rows)):
            out[i] = decision
    return out


def _joint(runs: list, windows: list[Window], logits: list[torch.Tensor]) -> list[WindowUpdate]:
    """The joint (2.1) rule's updates of rows that follow it."""
    x0p = _Sampled(runs, logits)
    out: list[WindowUpdate | None] = [None] * len(runs)
    by_width: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by_width.setdefault(w.hi - w.lo, []).append(i)
    for rows in by_width.values():
        for i, decision in zip(rows, _rule(runs, windows, x0p, rows)):
            out[i] = decision
    return out


class _Sampled:
    """x0 and p of every row: greedy rows together (`greedy_joined`), sampling rows each from its own
    generator; `rows` gives those of rows with windows of one length as (R, W) tensors."""

    def __init__(self, runs: list, logits: list[torch.Tensor]):
        greedy = [i for i, run in enumerate(runs) if run.cfg.temperature == 0]
        joined = greedy_joined([logits[i] for i in greedy]) if greedy else None
        self.joined, self.at = (None, {}) if joined is None else (joined[:2], dict(zip(greedy, joined[2])))
        self.pairs = {}  # row -> (x0, p) of a row not read from the joined tensors
        for i, run in enumerate(runs):
            if i not in self.at:
                cfg = run.cfg
                self.pairs[i] = sample_tokens(logits[i]) if cfg.temperature == 0 else \
                    sample_tokens(logits[i], cfg.temperature, cfg.top_k, cfg.top_p, run.generator)

    def rows(self, rows: list[int], W: int) -> tuple[torch.Tensor, torch.Tensor]:
        """x0, p (R, W) of `rows`: a view of the joined tensors where the rows lie one after another there."""
        at = [self.at.get(i) for i in rows]
        if at[0] is not None and all(a == at[0] + k * W for k, a in enumerate(at)):
            return tuple(t.narrow(0, at[0], len(rows) * W).view(len(rows), W) for t in self.joined)
        pairs = [self.pairs[i] if a is None else (self.joined[0][a:a + W], self.joined[1][a:a + W])
                 for i, a in zip(rows, at)]
        return torch.stack([x0 for x0, _ in pairs]), torch.stack([p for _, p in pairs])


def _rule(runs: list, windows: list[Window], x0p: _Sampled, rows: list[int]) -> list[WindowUpdate]:
    """One call of the rule for `rows`, whose windows have one length W."""
    W = windows[rows[0]].hi - windows[rows[0]].lo
    lo = [windows[i].lo for i in rows]
    cfgs = [runs[i].cfg for i in rows]
    tokens = torch.stack([runs[i].seq[windows[i].lo:windows[i].hi] for i in rows])  # (R, W)
    x0, p = x0p.rows(rows, W)  # (R, W) each
    positions = torch.arange(W, device=tokens.device)[None, :] + torch.tensor(lo, device=tokens.device)[:, None]
    frozen = positions < torch.tensor([runs[i].P for i in rows], device=tokens.device)[:, None]  # prompt
    d = rule.step(tokens, x0, p, frozen, mask_id=runs[rows[0]].mask_id,
                  threshold=[c.threshold for c in cfgs], editing_threshold=[c.editing_threshold for c in cfgs],
                  active_start=[windows[i].hi - c.block_length - windows[i].lo for i, c in zip(rows, cfgs)],
                  num_to_transfer=[c.num_to_transfer for c in cfgs])
    old, new, conf, after = tokens.tolist(), x0.tolist(), p.tolist(), d.tokens.tolist()
    drafted, edited, mbe = torch.stack([d.drafted, d.edited, d.mbe_edited]).tolist()
    return [WindowUpdate(d.tokens[r], after[r], old[r], new[r], conf[r], drafted[r], edited[r], mbe[r])
            for r in range(len(rows))]


def _levenshtein(runs: list, windows: list[Window], logits: list[torch.Tensor], rows: list[int]) -> list[WindowUpdate]:
    """One `levenshtein_rows` call for `rows` (one Levenshtein settings object, one block length B) on their
    active blocks; the window's earlier blocks (MBE) get T2T edits with the plain candidates."""
    lev, B = runs[rows[0]].lev, runs[rows[0]].cfg.block_length
    cands = [rule.levenshtein_candidates(logits[i][-B:], lev) for i in rows]  # one row at a time: (B, V) fp32
    cand = rule.Candidates(*(torch.stack([getattr(c, f) for c in cands]) for f in ("token", "p", "runner_up", "plain")))
    tokens = torch.stack([runs[i].seq[windows[i].hi - B:windows[i].hi] for i in rows])  # (R, B)
    starts = torch.tensor([windows[i].hi - B for i in rows], device=tokens.device)[:, None]
    frozen = torch.arange(B, device=tokens.device) + starts < torch.tensor([runs[i].P for i in rows],
                                                                           device=tokens.device)[:, None]
    generators = [runs[i].generator for i in rows] if lev.escape is rule.Escape.RANDOM else None
    s = rule.levenshtein_rows(tokens, cand, frozen, rule.BlockBooks.of([runs[i].book for i in rows]), lev, generators)
    out = []
    for r, i in enumerate(rows):
        step = s.row(r)
        x0, p, mbe, earlier = _mbe22(runs[i], windows[i], logits[i][:-B], lev)
        moving = torch.isin(step.written, torch.tensor([lev.delete_id, lev.split_id], device=tokens.device))
        moving &= ~frozen[r]  # a written DELETE or SPLIT is recorded as a move, not as a draft or an edit
        window = torch.cat([earlier, step.tokens])
        none = [False] * len(mbe)
        out.append(WindowUpdate(
            window, window.tolist(), runs[i].seq[windows[i].lo:windows[i].hi].tolist(), x0 + cand.token[r].tolist(),
            p + cand.p[r].tolist(), none + (step.drafted & ~moving).tolist(), none + (step.edited & ~moving).tolist(),
            mbe + [False] * B, earlier.tolist() + step.written.tolist(), step))
    return out


def _mbe22(run, window: Window, logits: torch.Tensor, lev: rule.Levenshtein):
    """The MBE part of a Levenshtein row's window (the blocks before the active one): plain candidates x0 and
    their p (the softmax with the mask logit suppressed), which positions T2T edits, the tokens after."""
    tokens = run.seq[window.lo:window.lo + logits.shape[0]]
    if not logits.shape[0]:
        return [], [], [], tokens
    probs = torch.softmax(logits.float().index_fill(-1, torch.tensor([lev.mask_id], device=logits.device),
                                                    -torch.inf), dim=-1)  # (W', V)
    p, x0 = probs.index_fill(-1, torch.tensor([lev.delete_id, lev.split_id], device=logits.device), 0).max(-1)
    frozen = torch.arange(window.lo, window.lo + logits.shape[0], device=tokens.device) < run.P
    edited = rule.edit(~frozen & (tokens != lev.mask_id), tokens, x0, p, lev.editing_threshold)
    return x0.tolist(), p.tolist(), edited.tolist(), torch.where(edited, x0, tokens)
