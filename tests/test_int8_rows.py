"""The int8 experts' kernel follows the rows (`llada.fast.int8.Int8Experts`): an expert one row sends few tokens
runs the pack kernel, many tokens `int8_linear_intmm`; both within int8's bound of the float experts, a token's
bits never depending on the rows beside it; and the per-row-count benchmark (`llada.bench.int8_rows`)."""

import json

import pytest
import torch

from llada.fast.int8 import Int8Experts, int8_linear_ref, int8_linear_intmm, quantize_int8
from llada.fast.kernels.reference import rel_rmse
from llada.model import Experts
from llada.row_exact import row_exact

# as tests/test_int8.py: a kernel against the reference on the same int8 weights (bf16 roundings, ~0.3%; x's
# two int8 digits add ~1e-5), and int8 weights against the float ones (~0.6% per product)
KERNEL_TOLERANCE = 1e-2
WEIGHT_TOLERANCE = 1.5e-2
E, H, I, K = 6, 32, 48, 2  # H, I multiples of 16: the pack kernel runs the few


def _experts(many_rows=4) -> tuple[Experts, Int8Experts]:
    torch.manual_seed(0)
    experts = Experts(E, H, I)
    torch.nn.init.normal_(experts.w13, std=0.05)
    torch.nn.init.normal_(experts.w2, std=0.05)
    i8 = Int8Experts.from_experts(experts)
    i8.many_rows = many_rows
    return experts, i8


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_intmm_is_close_to_the_reference_and_a_row_is_alone_bit_for_bit(dtype):
    q, s = quantize_int8(torch.randn(40, 37) * 0.02)  # any K
    x = torch.randn(21, 37, dtype=dtype)
    x0 = x.clone()
    out = int8_linear_intmm(x, q, s)
    assert torch.equal(x, x0) and out.dtype == dtype  # x is read, never written
    # fp32: x's two digits are all the error there is (~1e-5); bf16 adds its output rounding
    bound = 1e-4 if dtype == torch.float32 else KERNEL_TOLERANCE
    assert rel_rmse(out, int8_linear_ref(x, q, s)) < bound
    for m in (1, 2, 5, 21):
        assert torch.equal(int8_linear_intmm(x[:m], q, s), out[:m]), m


def test_an_expert_with_many_tokens_of_one_row_runs_intmm_and_stays_within_int8s_bound():
    experts, i8 = _experts(many_rows=4)
    T = 10
    ids = torch.tensor([[0, 1]] * 5 + [[2, 3], [2, 4], [5, 3], [4, 5], [1, 2]])  # expert 0: 5, 1: 6, others < 4
    many = i8.many_pairs(ids)
    assert many.tolist() == [[True, True]] * 5 + [[False, False]] * 4 + [[True, False]]
    x, w = torch.randn(T, H), torch.rand(T, K)
    want = experts(x, ids, w).detach()
    out = i8(x, ids, w)
    assert rel_rmse(out, want) < WEIGHT_TOLERANCE
    i8.many_rows = None  # every pair on the pack kernel: another path, the same numbers within the bound
    assert not i8.many_pairs(ids).any()
    pack = i8(x, ids, w)
    assert rel_rmse(pack, out) < KERNEL_TOLERANCE and not torch.equal(pack, out)


def test_the_choice_counts_one_rows_tokens_so_a_row_gets_its_lone_bits():
    """Two rows each send expert 0 three tokens: six together, three each. With many_rows = 4 each row's
    tokens stay on the pack kernel, as when that row runs alone; the padding is a row of its own."""
    _, i8 = _experts(many_rows=4)
    ids = torch.tensor([[0, 1], [0, 2], [0, 3], [5, 4]] * 2 + [[0, 5]] * 4)  # rows of 4, 4, then 4 padding
    x, w = torch.randn(12, H), torch.rand(12, K)
    with row_exact((4, 4)):
        both = i8(x, ids, w)
        assert not i8.many_pairs(ids)[:8].any() and i8.many_pairs(ids)[8:, 0].all()
    for a in (0, 4):
        with row_exact((4,)):
            alone = i8(x[a:a + 4], ids[a:a + 4], w[a:a + 4])
        assert torch.equal(both[a:a + 4], alone)
    with row_exact((4, 4)), pytest.raises(ValueError, match="rows hold 8 tokens, more than the 4"):
        i8.many_pairs(ids[:4])


def test_the_rows_bench_times_each_kernel_per_row_count(tmp_path):
    from llada.bench import int8_rows

    out = tmp_path / "rows.json"
    assert int8_rows.main(["--shapes", "load", "--rows", "1", "21", "--experts", "2", "--repeats", "1",
                           "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["load"]["by_rows"]
    assert [r["rows"] for r in rows] == [1, 21] and report["load"]["hidden"] == 1024
    assert set(rows[0]["median_us_per_expert"]) == {"bf16", "pack", "tiles", "scratch", "intmm"}
    assert all(v > 0 for r in rows for v in r["over_bf16"].values()) and report["commit"]


def test_the_configs_bench_times_before_and_after_and_finds_the_same_logits(tmp_path, tiny_model_dir):
    from llada.bench import int8_configs
    from llada.fast import int8

    kept, kept_split = (int8.Int8Experts.forward, int8.KERNELS["intmm"]), int8.int8_digits
    out = tmp_path / "configs.json"
    assert int8_configs.main(["--model", str(tiny_model_dir), "--prefix", "16", "--block", "8", "--rounds", "2",
                              "--iters", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert (int8.Int8Experts.forward, int8.KERNELS["intmm"]) == kept  # the stepwise swap is undone
    assert len(report["rounds"]) == 2 and all(len(r["seconds"]["int8"]["cpu"]) == 1 for r in report["rounds"])
    assert set(report["over_default_per_round"]) == set(report["cpu_over_default_per_round"]) == {"int8 stepwise",
                                                                                                 "int8"}
    assert report["commit"]
    logits = report["logits"]
    assert logits["int8_equals_stepwise_bit_for_bit"] and logits["positions"] == 24
    assert 0 < logits["int8"]["logits_rel_rmse"] < 0.5 and logits["int8"] == logits["int8 stepwise"]
    digits = report["digits_of_x"]  # x's digits in the experts' many rows and in the linears, each way
    assert list(digits) == ["two everywhere", "as it runs", "one everywhere"]
    assert digits["as it runs"]["logits_rel_rmse"] == logits["int8"]["logits_rel_rmse"]
    assert digits["one everywhere"]["logits_rel_rmse"] != digits["two everywhere"]["logits_rel_rmse"]
    assert int8.EXPERT_DIGITS == 1 and int8.int8_digits is kept_split  # the swaps are undone
