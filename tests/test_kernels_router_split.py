"""The router's split path (expert tiles, then the top-k) against its one-program path: the same bits.

`router.plan_route` picks the split path for T <= SPLIT_MAX_T; both are forced here. Compiled kernels on
a CUDA device when there is one, Triton's CPU interpreter otherwise.
"""

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


@needs_triton
@pytest.mark.parametrize("T", [1, 5, 16, 32, 33])
@pytest.mark.parametrize("with_norm,shared", [(False, False), (True, True), (False, True), (True, False)])
def test_split_path_gives_the_one_program_bits(T, with_norm, shared):
    h, weight, bias, residual, norm_w = inputs(T, seed=T)
    norm = (residual, norm_w, 1e-6) if with_norm else None
    one, split, names = both_paths(h, weight, bias, MINI, shared, norm)
    assert names == ["_route_logits_kernel", "_route_select_kernel"]
    assert_same_bits(one, split)
    ids = split[0]
    assert ids.shape == (T, 8 + shared) and ((ids >= 0) & (ids <= 256)).all()
    if shared:
        assert (ids[:, -1] == 256).all() and (split[1][:, -1] == 1).all()


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_path_bits_with_odd_groups_and_dtypes(dtype):
    h, weight, bias, residual, norm_w = inputs(21, H=72, E=6, seed=7, dtype=dtype)
    one, split, _ = both_paths(h, weight, bias, ODD, True, (residual, norm_w, 1e-5))
    assert_same_bits(one, split)


@needs_triton
def test_split_path_nan_rows_and_ties():
    h, weight, bias, residual, norm_w = inputs(18, seed=3)
    weight[5] = weight[4]  # experts 4 and 5 tie exactly: the lower index wins on both paths
    bias[5] = bias[4]
    h[2] = float("nan")
    residual[17, 3] = float("nan")  # a NaN in the residual: the norm's whole row is NaN
    one, split, _ = both_paths(h, weight, bias, MINI, True, (residual, norm_w, 1e-6))
    assert_same_bits(one, split)
    one, split, _ = both_paths(h, weight, bias, MINI)
    assert_same_bits(one, split)
    ids, w = split[0], split[1]
    assert ((ids >= 0) & (ids < 256)).all() and torch.isnan(w[2]).all() and torch.isfinite(w[[0, 1, 3]]).all()
    picked = ids[torch.isfinite(w).all(1)]
    assert not ((picked == 5).any(1) & ~(picked == 4).any(1)).any()  # 5 never chosen without 4 before it


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
def test_router_sizes_that_do_not_fit_are_refused():
    h, weight, bias = torch.empty(4, 32), torch.empty(12, 32), torch.empty(12)
    with pytest.raises(ValueError, match="expected \\(12, 32\\)"):
        router_module().plan_route(h, torch.empty(12, 31), bias, 2, 4, 2, 1.0)
    with pytest.raises(ValueError, match="12 experts in 5 groups"):
        router_module().plan_route(h, weight, bias, 2, 5, 2, 1.0)
    with pytest.raises(ValueError, match="norm: residual"):
        router_module().plan_route(h, weight, bias, 2, 4, 2, 1.0, norm=(torch.empty(3, 32), torch.empty(32), 1e-6))
