"""Turning logits into a token and its confidence p: greedy, or temperature / top-k / top-p sampling."""

from __future__ import annotations

import torch


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
