"""The router's split path (expert tiles, then the top-k) against its one-program path.

`router.plan_route` picks the split path for T <= SPLIT_MAX_T; both are forced here. Compiled kernels on
a CUDA device when there is one, Triton's CPU interpreter otherwise.

Under the interpreter the two paths give the same bits. On a GPU they are held to a derived bound
(`assert_same_routes`): s and x bit for bit (elementwise, and rstd summed by a fixed tree on both); each
logit within LOGIT_BOUND of the other path's, so each score within a quarter of that (sigmoid's slope
<= 1/4) plus the sigmoid's own roundings; ids equal except for tokens whose float64 biased scores hold a
near-tie closer than twice that score bound (counted; an exact tie is no near-tie: both paths keep the
lower index); weights within the relative change those scores allow plus the roundings of the sum of K
picks, a division and a scale on each path. A fault (a wrong expert tile, a lost K step, a wrong group
kept) moves logits by orders more than the bound: the tests at the end inject each on the CPU and see the
bound fail.
"""

import math

import pytest
import torch

from llada.fast import kernels
from llada.fast.kernels.launch import run

needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def router_module():
    from llada.fast.kernels import router  # triton is imported only where the tests run

    return router


MINI = dict(E=256, K=8, n_group=8, topk_group=4)  # the mini's routing; its hidden 2048 is cut to 64 here
ODD = dict(E=6, K=2, n_group=2, topk_group=1)  # groups of 3, padded to 4


def inputs(T, H=64, E=256, seed=0, dtype=torch.float32):
    """h (T, H), router weight (E, H), bias (E,), and a norm's residual (T, H) and weight (H,)."""
    g = torch.Generator().manual_seed(seed)
    h, weight = torch.randn(T, H, generator=g), torch.randn(E, H, generator=g) * 0.3
    bias, residual = torch.randn(E, generator=g) * 0.1, torch.randn(T, H, generator=g)
    norm_w = torch.rand(H, generator=g) + 0.5
    return [t.to(DEVICE, dtype if t is not bias else torch.float32) for t in (h, weight, bias, residual, norm_w)]


def both_paths(h, weight, bias, routing, shared=False, norm=None):
    """(outputs of the one-program path, outputs of the split path, the split path's kernel names)."""
    out = []
    for split in (False, True):
        ids, w, launches, normed = router_module().plan_route(
            h, weight, bias, routing["K"], routing["n_group"], routing["topk_group"], 2.5, shared, norm, split)
        run(launches)
        out.append((ids, w, *normed))
    return out[0], out[1], [launch.name for launch in launches]


def assert_same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x.view(-1).view(torch.uint8) if x.is_floating_point() else x,
                                                  y.view(-1).view(torch.uint8) if y.is_floating_point() else y)


U = 2.0 ** -24  # fp32's unit roundoff


def logit_bound(x, weight):
    """(T, E) float64: how far one path's fp32 logit x @ W^T may sit from the other's on a GPU. Each path sums
    H products as an fp32 chain over k in order, rounding at most once per tensor-core step of 16 products
    (a Hopper MMA's k) plus once going in and out: per path |error| <= (ceil(H / 16) + 2) u sum_k |x_k W_ek|,
    and the two paths differ by at most twice that (~5e-6 relative to sum |x_k W_ek| at H = 64)."""
    steps = math.ceil(x.shape[1] / 16) + 2
    return 2 * steps * U * (x.double().abs() @ weight.double().abs().T)


def reference_picks(x, weight, bias, routing):
    """float64 biased scores (T, E), scores (T, E), kept-group masks (T, E) and group scores (T, n_group)."""
    E, G = weight.shape[0], routing["n_group"]
    score = torch.sigmoid(x.double() @ weight.double().T)
    biased = score + bias.double()
    top2 = biased.view(-1, G, E // G).topk(min(2, E // G), dim=-1).values.sum(-1)  # (T, G)
    kept = torch.zeros_like(top2, dtype=torch.bool).scatter(1, top2.topk(routing["topk_group"], dim=1).indices,
                                                            True)
    return biased, score, kept.repeat_interleave(E // G, dim=1), top2


def near_ties(x, weight, bias, routing, score_bound):
    """bool (T,): tokens whose picks could differ between the paths: two neighbours among the best K + 1
    candidates of the kept groups, or the last kept and the first dropped group, closer than the bounds
    allow (an exact tie is none: both paths round it alike and keep the lower index)."""
    K, kept_groups = routing["K"], routing["topk_group"]
    biased, _, kept, groups = reference_picks(x, weight, bias, routing)
    best = biased.masked_fill(~kept, float("-inf")).topk(min(K + 1, int(kept[0].sum())), dim=1).values
    gaps = best[:, :-1] - best[:, 1:]  # (T, K)
    close = ((gaps > 0) & (gaps < 2 * score_bound[:, None])).any(1)
    if kept_groups < groups.shape[1]:
        ranked = groups.sort(dim=1, descending=True).values
        gap = ranked[:, kept_groups - 1] - ranked[:, kept_groups]
        close |= (gap > 0) & (gap < 4 * score_bound)
    return close


def assert_same_routes(one, split, x, weight, bias, routing, exact=None):
    """The two paths' (ids, weights[, s, x]) agree: bit for bit where `exact` (the interpreter, by default
    there), else within the GPU's bound (module doc). x: the router's input (the normed x with a norm).
    Returns the number of near-tie tokens whose ids were allowed to differ."""
    if exact if exact is not None else DEVICE.type == "cpu":
        assert_same_bits(one, split)
        return 0
    assert_same_bits(one[2:], split[2:])  # s and x: elementwise, rstd by the same tree
    (ids1, w1), (ids2, w2), K = one[:2], split[:2], routing["K"]
    x, weight, bias = x.cpu(), weight.cpu(), bias.cpu()
    nan = torch.isnan(x).any(1)
    assert torch.equal(ids1[nan.to(ids1.device)], ids2[nan.to(ids2.device)])  # NaN tokens: the same fallback
    score_bound = logit_bound(x, weight).max(1).values / 4 + 4 * U  # (T,) sigmoid's slope, its roundings
    differ = (ids1 != ids2).any(1).cpu()
    allowed = near_ties(x, weight, bias, routing, score_bound) & ~nan
    assert not (differ & ~allowed).any(), f"ids differ beyond near-ties at tokens {torch.where(differ & ~allowed)}"
    _, score, _, _ = reference_picks(x, weight, bias, routing)
    same = ~differ & ~nan
    picked = score.gather(1, ids1.cpu()[:, :K].clamp(max=weight.shape[0] - 1))[same]  # (n, K) float64
    rel = score_bound[same, None] / picked + K * score_bound[same, None] / picked.sum(1, keepdim=True)
    rel = rel + 2 * (K + 2) * U  # the sum of K picks, a division and a scale, on each path
    a, b = w1.cpu()[same][:, :K].double(), w2.cpu()[same][:, :K].double()
    assert ((a - b).abs() <= rel * a.abs()).all(), f"weights apart by {((a - b).abs() / a.abs()).max():.3g}"
    assert torch.equal(w1[:, K:], w2[:, K:]) and torch.isnan(w2[nan.to(w2.device), :K]).all()
    return int((differ & allowed).sum())


@needs_triton
@pytest.mark.parametrize("T", [1, 5, 16, 32, 33])
@pytest.mark.parametrize("with_norm,shared", [(False, False), (True, True), (False, True), (True, False)])
def test_split_path_gives_the_one_program_routes(T, with_norm, shared):
    h, weight, bias, residual, norm_w = inputs(T, seed=T)
    norm = (residual, norm_w, 1e-6) if with_norm else None
    one, split, names = both_paths(h, weight, bias, MINI, shared, norm)
    assert names == ["_route_logits_kernel", "_route_select_kernel"]
    assert_same_routes(one, split, split[3] if with_norm else h, weight, bias, MINI)
    ids = split[0]
    assert ids.shape == (T, 8 + shared) and ((ids >= 0) & (ids <= 256)).all()
    if shared:
        assert (ids[:, -1] == 256).all() and (split[1][:, -1] == 1).all()


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_path_routes_with_odd_groups_and_dtypes(dtype):
    h, weight, bias, residual, norm_w = inputs(21, H=72, E=6, seed=7, dtype=dtype)
    one, split, _ = both_paths(h, weight, bias, ODD, True, (residual, norm_w, 1e-5))
    assert_same_routes(one, split, split[3], weight, bias, ODD)


@needs_triton
def test_split_path_nan_rows_and_ties():
    """Ties built to survive any rounding: experts 4 and 5 have zero weight rows (logit 0 on any path and
    order, score 1/2) and a bias that makes them every finite token's two best, 4 first; experts 40 and 41
    have the same row, so each path computes the same bits for both and must keep 40 first."""
    h, weight, bias, residual, norm_w = inputs(18, seed=3)
    weight[4:6] = 0.0
    bias[4:6] = 1.0
    weight[41], bias[41] = weight[40], bias[40]
    h[2] = float("nan")
    residual[17, 3] = float("nan")  # a NaN in the residual: the norm's whole row is NaN
    one, split, _ = both_paths(h, weight, bias, MINI, True, (residual, norm_w, 1e-6))
    assert_same_routes(one, split, split[3], weight, bias, MINI)
    one, split, _ = both_paths(h, weight, bias, MINI)
    assert_same_routes(one, split, h, weight, bias, MINI)
    ids, w = split[0].cpu(), split[1].cpu()
    finite = torch.isfinite(w).all(1)
    assert ((ids >= 0) & (ids < 256)).all() and torch.isnan(w[2]).all() and finite.sum() == 17
    assert (ids[finite, 0] == 4).all() and (ids[finite, 1] == 5).all()
    picked = ids[finite]
    assert not ((picked == 41).any(1) & ~(picked == 40).any(1)).any()  # 41 never chosen without 40
    both = (picked == 40).any(1) & (picked == 41).any(1)
    assert (torch.where(picked[both] == 40)[1] < torch.where(picked[both] == 41)[1]).all()


@needs_triton
def test_split_path_runs_again_to_the_same_bits():
    """Its launches replayed (as a CUDA graph replays them) over new inputs in the same buffers."""
    h, weight, bias, residual, norm_w = inputs(9, seed=11)
    ids, w, launches, (s, x) = router_module().plan_route(h, weight, bias, 8, 8, 4, 2.5, True,
                                                         (residual, norm_w, 1e-6), split=True)
    run(launches)
    first = [t.clone() for t in (ids, w, s, x)]
    run(launches)
    assert_same_bits(first, (ids, w, s, x))
    h.copy_(torch.flip(h, [0]))
    residual.copy_(torch.flip(residual, [0]))
    run(launches)
    assert_same_bits([torch.flip(t, [0]) for t in first], (ids, w, s, x))  # each token routed on its own


@needs_triton
def test_the_path_is_chosen_from_the_token_count():
    SPLIT_MAX_T = router_module().SPLIT_MAX_T
    for T, names in ((SPLIT_MAX_T, ["_route_logits_kernel", "_route_select_kernel"]),
                     (SPLIT_MAX_T + 1, ["_route_kernel"])):
        h, weight, bias = torch.empty(T, 32), torch.empty(12, 32), torch.empty(12)
        launches = router_module().plan_route(h, weight, bias, 2, 4, 2, 1.0)[2]
        assert [launch.name for launch in launches] == names

@needs_triton
def test_the_top_k_runs_a_token_a_program_and_gives_the_same_bits_so(monkeypatch):
    """On a GPU one token, one warp a program; the interpreter runs 16 tokens a program (its programs are
    slow) unless told otherwise: the bits are the same either way (every reduction is row by row)."""
    router = router_module()
    h, weight, bias, residual, norm_w = inputs(5, seed=13)
    for interpret, tokens in ((False, router.SELECT_BLOCK_T), (True, router.INTERPRETED_SELECT_BLOCK_T)):
        monkeypatch.setattr(router.knobs.runtime, "interpret", interpret)  # the plan alone: nothing runs here
        select = router.plan_route(h, weight, bias, 8, 8, 4, 2.5)[2][1]
        assert select.grid == (-(-5 // tokens),) and select.meta["BLOCK_T"] == tokens
        assert select.meta["num_warps"] == 1
    monkeypatch.undo()
    if DEVICE.type == "cpu":
        with monkeypatch.context() as m:
            m.setattr(router, "INTERPRETED_SELECT_BLOCK_T", router.SELECT_BLOCK_T)
            alone = both_paths(h, weight, bias, MINI, True, (residual, norm_w, 1e-6))[1]
        assert_same_bits(alone, both_paths(h, weight, bias, MINI, True, (residual, norm_w, 1e-6))[1])


@needs_triton
def test_router_sizes_that_do_not_fit_are_refused():
    h, weight, bias = torch.empty(4, 32), torch.empty(12, 32), torch.empty(12)
    with pytest.raises(ValueError, match="expected \\(12, 32\\)"):
        router_module().plan_route(h, torch.empty(12, 31), bias, 2, 4, 2, 1.0)
    with pytest.raises(ValueError, match="12 experts in 5 groups"):
        router_module().plan_route(h, weight, bias, 2, 5, 2, 1.0)
    with pytest.raises(ValueError, match="norm: residual"):
        router_module().plan_route(h, weight, bias, 2, 4, 2, 1.0, norm=(torch.empty(3, 32), torch.empty(32), 1e-6))


def split_with_fault(h, weight, bias, fault=None, topk_group=MINI["topk_group"]):
    """The split path's (ids, weights) with `fault(logits)` applied to its (T, E) fp32 logits between the two
    launches."""
    ids, w, launches, _ = router_module().plan_route(h, weight, bias, MINI["K"], MINI["n_group"], topk_group, 2.5,
                                                     split=True)
    run(launches[:1])
    if fault is not None:
        fault(launches[0].args[2])  # `part`, the logits launch's output
    run(launches[1:])
    return ids, w


def ulp_up(logits):
    logits.copy_(torch.nextafter(logits, torch.full_like(logits, float("inf"))))


def wrong_tile(logits):
    logits[:, 16:48] = torch.cat([logits[:, 32:48], logits[:, 16:32]], dim=1)  # expert tiles 1 and 2 swapped


@needs_triton
def test_the_gpu_bound_passes_logits_an_ulp_apart_and_no_fault():
    h, weight, bias = inputs(32, seed=5)[:3]
    one = split_with_fault(h, weight, bias)  # the split path itself: the bound's own check of equal outputs
    ties = assert_same_routes(one, split_with_fault(h, weight, bias, ulp_up), h, weight, bias, MINI, exact=False)
    assert ties <= 2  # an ulp moves a pick only where two scores sit an ulp apart
    with pytest.raises(AssertionError):
        assert_same_routes(one, split_with_fault(h, weight, bias, ulp_up), h, weight, bias, MINI, exact=True)


@needs_triton
@pytest.mark.parametrize("fault", ["a wrong expert tile", "a lost K step", "a wrong group kept"])
def test_the_gpu_bound_fails_on_a_real_fault(fault):
    h, weight, bias = inputs(32, seed=5)[:3]
    one = split_with_fault(h, weight, bias)
    lost_k = lambda logits: logits.sub_(h[:, 32:64] @ weight[:, 32:64].T)  # features 32..63 never summed  # noqa: E731
    faulty = {"a wrong expert tile": lambda: split_with_fault(h, weight, bias, wrong_tile),
              "a lost K step": lambda: split_with_fault(h, weight, bias, lost_k),
              "a wrong group kept": lambda: split_with_fault(h, weight, bias, topk_group=3)}[fault]()
    with pytest.raises(AssertionError):
        assert_same_routes(one, faulty, h, weight, bias, MINI, exact=False)
