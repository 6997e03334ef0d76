"""A round's decisions (`llada.decide`): rows read from one forward's logits equal rows decided alone."""

from types import SimpleNamespace

import torch

from llada.config import DecodeConfig
from llada.decide import Window, _Sampled, decide

M, V, W = 7, 11, 8


def _run(seed: int, cfg: DecodeConfig):
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, V, (3 * W,), generator=gen)
    seq[torch.rand(3 * W, generator=gen) < 0.5] = M
    generator = torch.Generator().manual_seed(100 + seed)
    return SimpleNamespace(cfg=cfg, seq=seq, P=3, mask_id=M, generator=generator, lev=None)  # lev None: the joint rule


def _decisions(logits_of, cfgs, windows):
    runs = [_run(i, cfg) for i, cfg in enumerate(cfgs)]
    return decide(runs, windows, logits_of(len(cfgs)))


def test_rows_of_one_logits_tensor_decide_as_rows_alone():
    """Rows whose logits lie in one tensor: greedy rows one after another (read as one view), rows out of
    order, a sampling row among them, windows of two lengths: each row's decision equals its own."""
    greedy = DecodeConfig(block_length=W, threshold=0.3, editing_threshold=0.2)
    sampling = DecodeConfig(block_length=W, threshold=0.3, editing_threshold=0.2, temperature=0.7, seed=1)
    cfgs = [greedy, greedy, sampling, greedy, greedy, greedy, greedy]
    windows = [Window(0, W), Window(W, 2 * W), Window(0, W), Window(W, 2 * W), Window(0, 2 * W), Window(W, 2 * W),
               Window(W, 3 * W)]
    sizes = [w.hi - w.lo for w in windows]
    joined = torch.randn(sum(sizes) + 5, V, generator=torch.Generator().manual_seed(3))
    joined[::3, 2] = joined[::3, 4]  # ties of the best logit
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    order = [0, 1, 2, 3, 5, 4, 6]  # width W: row 5 before row 4 and a sampling row among them; 2W: 4, 6 one view

    def one_tensor(n):
        out, at = [None] * n, 0
        for i in order:
            out[i] = joined[at:at + sizes[i]]
            at += sizes[i]
        return out

    def alone(n):
        return [t.clone() for t in one_tensor(n)]

    together, apart = _decisions(one_tensor, cfgs, windows), _decisions(alone, cfgs, windows)
    for i, (a, b) in enumerate(zip(together, apart)):
        assert torch.equal(a.tokens, b.tokens), i
        assert a._replace(tokens=None) == b._replace(tokens=None), i
        assert a.after == a.tokens.tolist()
    assert any(any(d.drafted) for d in together) and any(any(d.edited) for d in together)


def test_greedy_rows_one_after_another_are_read_as_one_view():
    """x0 and p of rows that lie one after another in the joined tensors come back as a view of them, and
    equal the rows stacked one by one."""
    greedy = DecodeConfig(block_length=W)
    runs = [_run(i, greedy) for i in range(4)]
    joined = torch.randn(4 * W, V, generator=torch.Generator().manual_seed(5))
    sampled = _Sampled(runs, [joined[i * W:(i + 1) * W] for i in range(4)])
    x0, p = sampled.rows([1, 2, 3], W)  # (3, W) each
    assert x0.shape == p.shape == (3, W) and x0.data_ptr() == sampled.joined[0][W:].data_ptr()
    loose = _Sampled(runs, [joined[i * W:(i + 1) * W].clone() for i in range(4)])
    x0_loose, p_loose = loose.rows([1, 2, 3], W)
    assert torch.equal(x0, x0_loose) and torch.equal(p, p_loose)
    assert x0_loose.data_ptr() != x0.data_ptr()
