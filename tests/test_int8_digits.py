"""x's two int8 digits made once (`llada.fast.int8_digits.int8_digits`) and shared by several experts' products
(`grouped_intmm`, `Int8Experts._many`): bit for bit what the step-by-step definitions give
(`int8_linear_intmm_ref`, `Int8Experts.forward_ref`), ties and odd shapes included."""

import pytest
import torch

from llada.fast import int8
from llada.fast.int8 import Int8Experts, quantize_int8
from llada.fast.int8_digits import (grouped_intmm, int8_digits, int8_linear_intmm, int8_linear_intmm_ref,
                                    round_half_even)
from llada.model import Experts
from llada.row_exact import row_exact

E, H, I, K = 7, 48, 40, 3  # odd sizes; I = 40: the few pairs run the tiles (pack needs a multiple of 16)


def test_rounding_by_adding_is_torch_rounding_ties_to_even():
    u = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 127.0, 0.49999997, -0.0, 3.2, -3.7])
    u = torch.cat([u, torch.randn(10_000) * 60])
    got = round_half_even(u)
    assert torch.equal(got, u.round()) and got.data_ptr() != u.data_ptr()  # -0.0 == 0.0 for equal


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("M, N, Kin", [(1, 8, 16), (5, 13, 37), (33, 64, 100)])
def test_intmm_on_digits_is_the_definition_bit_for_bit(dtype, M, N, Kin):
    torch.manual_seed(M)
    q, s = quantize_int8(torch.randn(N, Kin) * 0.02)
    x = (torch.randn(M, Kin) * 3).to(dtype)
    x[0, :4] = torch.tensor([127.0, 0.5, 1.5, -2.5])  # x / sx lands on halves: the ties round to even
    x[-1] = 0  # an all-zero row (its scale clamps)
    assert torch.equal(int8_linear_intmm(x, q, s), int8_linear_intmm_ref(x, q, s))
    d = int8_digits(x)
    assert d.codes.shape == (2, M, Kin) and d.codes.dtype == torch.int8 and d.scale.shape == (M, 1)
    assert d.codes.abs().max() <= 127


def test_grouped_products_are_each_experts_own_bit_for_bit():
    torch.manual_seed(1)
    q, s = quantize_int8(torch.randn(E, 24, H) * 0.05)  # (E, N, K)
    x = torch.randn(10, H, dtype=torch.bfloat16)
    rows = torch.tensor([3, 3, 0, 9, 1, 4, 4, 4])  # sorted by expert: 2 rows for expert 5, 1 for 0, 5 for 2
    sizes, experts = [2, 1, 5], [5, 0, 2]
    out = grouped_intmm(int8_digits(x), rows, sizes, experts, q, s, x.dtype)  # (8, 24)
    at = 0
    for e, n in zip(experts, sizes):
        assert torch.equal(out[at:at + n], int8_linear_intmm(x[rows[at:at + n]], q[e], s[e])), e
        at += n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_digit_products_are_the_first_digits_definition_bit_for_bit(dtype):
    """A split of one digit (the routed experts' many rows) is the two-digit split's first; its grouped products
    are `int8_linear_intmm_ref(..., digits=1)` of each expert's rows, and nearer x than none (within int8's
    step) but not the two digits' bits."""
    torch.manual_seed(2)
    q, s = quantize_int8(torch.randn(E, 24, H) * 0.05)  # (E, N, K)
    x = torch.randn(10, H, dtype=dtype)
    one, two = int8_digits(x, digits=1), int8_digits(x)
    assert one.count == 1 and torch.equal(one.codes[0], two.codes[0]) and torch.equal(one.scale, two.scale)
    assert torch.equal(two.first().codes, one.codes)
    rows, sizes, experts = torch.tensor([3, 3, 0, 9, 1, 4, 4, 4]), [2, 1, 5], [5, 0, 2]
    out = grouped_intmm(one, rows, sizes, experts, q, s, x.dtype)  # (8, 24)
    at = 0
    for e, n in zip(experts, sizes):
        xs = x[rows[at:at + n]]
        assert torch.equal(out[at:at + n], int8_linear_intmm_ref(xs, q[e], s[e], digits=1)), e
        assert not torch.equal(out[at:at + n], int8_linear_intmm(xs, q[e], s[e])), e
        exact = xs.float() @ (q[e].float() * s[e].float()[:, None]).T
        assert (out[at:at + n].float() - exact).abs().max() < 0.02 * exact.abs().max(), e
        at += n


def _experts(many_rows: int) -> Int8Experts:
    torch.manual_seed(0)
    experts = Experts(E, H, I)
    torch.nn.init.normal_(experts.w13, std=0.05)
    torch.nn.init.normal_(experts.w2, std=0.05)
    i8 = Int8Experts.from_experts(experts)
    i8.many_rows = many_rows  # the tiles resolve impl to "tiles", which sets it None: set it back to test the mix
    return i8


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("route", ["mixed", "one expert", "all few", "T=1"])
def test_experts_forward_is_the_per_expert_loop_bit_for_bit(dtype, route):
    i8 = _experts(many_rows=6)
    T = 1 if route == "T=1" else 17
    spread = [torch.randperm(4)[:K] + 3 for _ in range(5)]  # experts 3-6: at most 5 pairs each
    ids = {"mixed": torch.stack([torch.tensor([0, 1, 2])] * 12 + spread),  # experts 0-2: 12 pairs each
           "one expert": torch.stack([torch.tensor([2, 5, 6])] * T),
           "all few": torch.arange(18).remainder(E).view(6, K),  # at most 3 pairs per expert
           "T=1": torch.tensor([[6, 0, 3]])}[route]
    T = ids.shape[0]
    x, w = torch.randn(T, H, dtype=dtype), torch.rand(T, K)
    many = i8.many_pairs(ids)
    assert {"mixed": many.any() and not many.all(), "one expert": many.all(), "all few": not many.any(),
            "T=1": not many.any()}[route]  # "mixed": both paths in one call
    assert torch.equal(i8(x, ids, w), i8.forward_ref(x, ids, w))


def test_experts_on_the_row_exact_path_keep_each_rows_bits():
    i8 = _experts(many_rows=3)
    ids = torch.stack([torch.randperm(4)[:K] for _ in range(16)])  # 4 experts, ~4 pairs each per row of 8
    x, w = torch.randn(16, H, dtype=torch.bfloat16), torch.rand(16, K)
    with row_exact((8, 8)):
        both = i8(x, ids, w)
        assert torch.equal(both, i8.forward_ref(x, ids, w))
    for a in (0, 8):
        with row_exact((8,)):
            assert torch.equal(i8(x[a:a + 8], ids[a:a + 8], w[a:a + 8]), both[a:a + 8])


def test_experts_in_small_groups_keep_their_bits(monkeypatch):
    """A long prefill's many pairs run in groups of experts (`GROUP_PAIRS`); the group never changes a pair's bits."""
    i8 = _experts(many_rows=2)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(40)])
    x, w = torch.randn(40, H, dtype=torch.bfloat16), torch.rand(40, K)
    whole = i8(x, ids, w)
    monkeypatch.setattr(int8, "GROUP_PAIRS", 20)  # ~17 pairs per expert: one or two experts per group
    assert torch.equal(i8(x, ids, w), whole) and torch.equal(whole, i8.forward_ref(x, ids, w))
    assert int8._expert_groups([0, 3, 0, 5, 2, 9, 1], 7) == [[1], [3, 4], [5], [6]]
