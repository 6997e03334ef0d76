"""A round's decisions: every row's sampling and the step rule at once, each row's as it gets alone.

After a row-batched forward, each decode row needs x0 and p from its logits (`llada.sampling`) and the
rule's decision on its window (`llada.rule.step`). `decide` makes them for all rows together: greedy
rows share one softmax over the forward's logits in place (`greedy_joined`), rows that sample draw from
their own generator one by one, and rows with windows of one length share one call of the rule, with
their own settings. Nothing is applied here: each row's loop applies its `Decision` and records it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import rule
from .sampling import greedy_joined, sample_tokens


class Decision(NamedTuple):
    """The rule's decision on one row's window [lo, hi), with what the step's record lists."""

    tokens: torch.Tensor  # (W,) the window after the step
    after: list[int]  # the same, as a list
    old: list[int]  # the window before it
    new: list[int]  # x0 at every position
    conf: list[float]  # p at every position
    drafted: list[bool]
    edited: list[bool]
    mbe_edited: list[bool]


class Window(NamedTuple):
    """A decode forward's window [lo, hi) of a row; its active block is the window's last `block_length`."""

    lo: int
    hi: int


def decide(runs: list, windows: list[Window], logits: list[torch.Tensor]) -> list[Decision]:
    """Each run's `Decision` on its window, from its logits (W, V) (`runs`: `llada.decode._Run`s)."""
    x0p = _Sampled(runs, logits)
    out: list[Decision | None] = [None] * len(runs)
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


def _rule(runs: list, windows: list[Window], x0p: _Sampled, rows: list[int]) -> list[Decision]:
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
    return [Decision(d.tokens[r], after[r], old[r], new[r], conf[r], drafted[r], edited[r], mbe[r])
            for r in range(len(rows))]
