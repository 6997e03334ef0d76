"""LLaDA2.2 runs whose blocks really move, for the canvas's tests (render tests and the browser).

A model with random weights rarely proposes DELETE or SPLIT where a viewer would see it. `Nudged` wraps a
real 2.2 model (the decode loop, the drivers and the Levenshtein rule under it stay the real ones) and
adds a large logit to DELETE at some positions and to SPLIT at others wherever they hold a written token,
as tests/test_decode22.py does for the engine: those blocks then delete a token, and open a mask before
another, at steps a viewer can scrub to.
"""

from __future__ import annotations

import torch

from llada.config import DecodeConfig
from llada.decode import generate
from llada.trace import Trace

NUDGE = 100.0  # logits of random weights stay within a few units: this wins wherever it is added


class Nudged:
    """`model` with DELETE favoured at `delete_at` and SPLIT at `split_at` (absolute positions) wherever a
    written token sits there. Everything else is the wrapped model's."""

    def __init__(self, model, delete_at: tuple[int, ...], split_at: tuple[int, ...]):
        self.model, self.delete_at, self.split_at = model, tuple(delete_at), tuple(split_at)
        cfg = model.config
        self.mask_id, self.delete_id, self.split_id = None, cfg.delete_token_id, cfg.split_token_id

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward_rows(self, rows):
        out = self.model.forward_rows(rows)
        for row, logits in zip(rows, out):
            if logits is None:
                continue
            T = logits.shape[0]  # logits (T, V) of the row's last T positions
            pos = torch.arange(row.start, row.start + len(row.ids))[-T:]
            written = row.ids[-T:] != self.mask_id
            logits[torch.isin(pos, torch.tensor(self.delete_at)) & written, self.delete_id] += NUDGE
            logits[torch.isin(pos, torch.tensor(self.split_at)) & written, self.split_id] += NUDGE
        return out


def nudged(model, mask_id: int, delete_at, split_at) -> Nudged:
    wrapped = Nudged(model, delete_at, split_at)
    wrapped.mask_id = mask_id
    return wrapped


def small_model():
    """The small 2.2 model of tests/test_decode22.py (vocabulary 99, routing blocks of 8)."""
    from test_decode22 import small_22

    return small_22()


MASK, EOS, DEL_AT, SPLIT_AT = 98, 3, 10, 13  # test_decode22's ids; positions in the first decoded block
SMALL = DecodeConfig(block_length=8, gen_length=16, steps=4, max_post_steps=2)
TEXTS = {t: f"w{t}" for t in range(99)} | {MASK: "[MASK]", EOS: "<eos>"}


def moving_trace(cfg: DecodeConfig = SMALL) -> Trace:
    """A finished run of the small 2.2 model that deletes at DEL_AT and splits at SPLIT_AT, its tokens named."""
    model = nudged(small_model(), MASK, (DEL_AT,), (SPLIT_AT,))
    trace = generate(model, [11, 12, 13, 14, 15], cfg, MASK, EOS)
    trace.texts = dict(TEXTS)
    trace.model, trace.mode = "small-2.2", "S"
    return trace.finish("done")
