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
