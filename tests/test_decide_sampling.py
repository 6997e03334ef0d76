"""Token choice: greedy confidence, top-k, the nucleus boundary, seeds."""

import pytest
import torch

from llada import decide
from llada.decide import greedy_rows, sample_tokens


def test_greedy_confidence_is_the_softmax_max():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    x0, p = sample_tokens(logits)
    assert x0.item() == 0 and p.item() == pytest.approx(torch.softmax(logits, -1).max().item(), abs=0)


def test_top_k_1_samples_the_argmax_with_certainty():
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    x0, p = sample_tokens(logits, temperature=0.8, top_k=1, generator=torch.Generator().manual_seed(1))
    assert torch.equal(x0, logits.argmax(-1)) and torch.equal(p, torch.ones(5))


@pytest.mark.parametrize("top_p, kept", [(0.25, 1), (0.5, 2), (0.51, 3), (1.0, 4)])
def test_nucleus_keeps_the_smallest_set_reaching_top_p(top_p, kept):
    # four equal tokens: probability 1/4 each, exact in binary, so the boundary top_p = 0.5 is exact
    logits = torch.zeros(1, 4)
    _, p = sample_tokens(logits, temperature=1.0, top_p=top_p, generator=torch.Generator().manual_seed(0))
    # the sampled token's probability after renormalising over the kept set (1/3 rounds in float32)
    assert p.item() == pytest.approx(1 / kept, rel=1e-6)


def test_same_seed_same_tokens():
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(2))
    a, b = (sample_tokens(logits, 1.0, top_p=0.9, generator=torch.Generator().manual_seed(4))[0] for _ in range(2))
    assert torch.equal(a, b)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("in_place", [True, False])
def test_greedy_rows_together_equal_each_alone(threads, in_place, monkeypatch):
    """Rows of one forward's logits (read in place, out of order, one row skipped; in one softmax or in
    chunks) or separate tensors: x0 and p bit for bit those of each alone, ties on the max included."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        logits = (torch.randint(-6, 7, (7 * 32 + 3, 1024), generator=gen) / 2).float()  # many equal maxima
        spans = [(64, 96), (0, 32), (160, 224), (32, 64)]  # rows 96-160 and the tail are not asked for
        parts = [logits[a:b] if in_place else logits[a:b].clone() for a, b in spans]
        for chunk in (1 << 22, 3000):  # one softmax over the rows, or 2 rows at a time
            monkeypatch.setattr(decide, "CHUNK", chunk)
            together = greedy_rows(parts)
            for part, (x0, p) in zip(parts, together):
                alone_x0, alone_p = sample_tokens(part.clone())
                assert torch.equal(x0, alone_x0) and torch.equal(p, alone_p)
    finally:
        torch.set_num_threads(before)
