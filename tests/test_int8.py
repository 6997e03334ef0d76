"""Int8 weight-only quantization on the CPU (`llada.fast.int8`): the format, the two kernels against the
reference on odd shapes, row-exactness, the experts, the model swap and quantizing while loading."""

import pytest
import torch

from llada.config import ModelConfig
from llada.fast.int8 import (Int8Experts, Int8Linear, KERNELS, dequantize_int8, int8_linear_pack, int8_linear_ref,
                             quantize_int8, resolve_impl)
from llada.fast.int8_mlp import quantize_model_int8
from llada.fast.kernels.reference import rel_rmse
from llada.model import Experts, LLaDA2MoE
from llada.row_exact import row_exact
from llada.weights.checkpoint import load_model

# a kernel against the reference on the same int8 weights: the reference runs in fp32, the kernels take
# bf16 activations (x rounded by up to 2^-9) and give bf16 outputs (another 2^-9): ~0.3% RMSE, never 1%
KERNEL_TOLERANCE = 1e-2
# int8 weights against the float ones: each weight is off by at most half a step, absmax / 254 of its row;
# for Gaussian rows of >= 16 values that is ~0.6% of the row's RMS, and a product sums such independent
# errors to about the same relative size (plus the kernel's bf16 roundings): 1.5% leaves room, a wrong
# scale or a transposed row is off by O(1)
WEIGHT_TOLERANCE = 1.5e-2
# the routed experts' many rows round x to one int8 digit (`llada.fast.int8.EXPERT_DIGITS`): up to 1/254 of
# its row's maximum, ~0.5% of a 32-value row's RMS per product here, two products: 2.5% for either bound above
ONE_DIGIT_TOLERANCE = 2.5e-2
SHAPES = [(1, 13, 32), (3, 99, 48), (7, 1, 16), (33, 40, 64), (4, 17, 80)]  # (M, N, K): K a multiple of 16


def _weights(N, K, seed=0):
    return torch.randn(N, K, generator=torch.Generator().manual_seed(seed)) * 0.02


def test_scales_are_bf16_and_no_weight_clips():
    w = _weights(37, 29)
    w[3] = 0  # an all-zero row
    w[5, 7] = 5.0  # an outlier: its row's step grows, no code leaves [-127, 127]
    q, s = quantize_int8(w)
    assert q.dtype == torch.int8 and s.dtype == torch.bfloat16 and s.shape == (37,)
    assert q.abs().max() <= 127 and (q[3] == 0).all()
    assert q[5, 7] >= 126  # the scale rounded up to bf16 (< 2^-8 relative) moves the largest code by < 1
    assert (s.float() >= w.abs().amax(-1) / 127).all()  # rounded up: the largest weight fits
    assert ((dequantize_int8(q, s) - w).abs() <= s.float()[:, None] / 2 + 1e-12).all()  # half a step at most


@pytest.mark.parametrize("shape", [(37, 29), (3, 5, 40), (1, 7), (0, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fast_quantizer_is_the_definition_bit_for_bit(shape, dtype, monkeypatch):
    import llada.fast.int8 as int8

    monkeypatch.setattr(int8, "QUANT_CHUNK", 64)  # several chunks, one of them short
    w = torch.randn(shape, generator=torch.Generator().manual_seed(1)).mul(0.02).to(dtype)
    if w.numel():
        w.view(-1, shape[-1])[0] = 0  # an all-zero row
        w.view(-1)[-1] = -3.0  # a negative outlier sets its row's maximum
    (q, s), (q_ref, s_ref) = int8.quantize_int8(w), int8.quantize_int8_ref(w)
    assert q.shape == w.shape and s.shape == w.shape[:-1]
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)


@pytest.mark.parametrize("M, N, K", SHAPES)
@pytest.mark.parametrize("impl", ["pack", "tiles"])
def test_kernels_match_the_reference_on_odd_shapes(M, N, K, impl):
    q, s = quantize_int8(_weights(N, K, seed=M))
    x = torch.randn(M, K, dtype=torch.bfloat16)
    out = KERNELS[impl](x, q, s)
    assert out.shape == (M, N) and out.dtype == torch.bfloat16
    assert rel_rmse(out.float(), int8_linear_ref(x, q, s).float()) < KERNEL_TOLERANCE


def test_tiles_take_any_k_and_fp32_activations_and_pack_refuses_other_k():
    q, s = quantize_int8(_weights(21, 37))
    x = torch.randn(2, 5, 37)  # fp32, a leading batch dim, K = 37
    out = KERNELS["tiles"](x, q, s)
    assert out.shape == (2, 5, 21) and out.dtype == torch.float32
    assert rel_rmse(out, int8_linear_ref(x, q, s)) < 1e-5  # fp32 throughout: only the order of sums differs
    with pytest.raises(AssertionError, match="K % 16"):  # the kernel would compute wrong values (or crash) there
        int8_linear_pack(x, q, s)
    assert resolve_impl("pack", 37) == "tiles" and resolve_impl("pack", 48) == "pack"
    with pytest.raises(ValueError, match="impl must be one of"):
        resolve_impl("int4", 48)


@pytest.mark.parametrize("impl", ["pack", "tiles", "intmm"])
def test_a_row_gets_the_same_bits_among_any_number_of_rows(impl):
    """The row-exact path (`llada.row_exact`): a row's output must not depend on the rows beside it."""
    q, s = quantize_int8(_weights(99, 64))
    x = torch.randn(40, 64, dtype=torch.bfloat16)
    with row_exact():
        alone = KERNELS[impl](x[:1], q, s)
        for m in (2, 3, 5, 8, 13, 40):
            assert torch.equal(KERNELS[impl](x[:m], q, s)[:1], alone), m


def test_linear_keeps_its_bias_and_contract():
    lin = torch.nn.Linear(48, 13, bias=True)
    i8 = Int8Linear.from_linear(lin)
    x = torch.randn(2, 3, 48)
    assert i8.in_features == 48 and i8.out_features == 13 and i8.impl == "intmm"
    assert rel_rmse(i8(x), lin(x).detach()) < WEIGHT_TOLERANCE


@pytest.mark.parametrize("T, route", [(1, "spread"), (7, "spread"), (9, "one expert"), (12, "some idle")])
def test_experts_match_the_float_experts(T, route):
    E, H, I, K = 6, 32, 48, 2  # H, I multiples of 16: the pack kernel runs both products
    torch.manual_seed(0)  # fixed draws: with one token, about 6% of random draws err above the tolerance
    experts = Experts(E, H, I)
    torch.nn.init.normal_(experts.w13, std=0.05)
    torch.nn.init.normal_(experts.w2, std=0.05)
    x = torch.randn(T, H)
    ids = {"spread": torch.randint(0, E, (T, K)), "one expert": torch.full((T, K), 4),
           "some idle": torch.randint(0, 2, (T, K))}[route]
    w = torch.rand(T, K)
    i8 = Int8Experts.from_experts(experts)
    assert i8.impl == "pack"
    want = experts(x, ids, w).detach()
    one_digit = i8.many_pairs(ids).any()  # an expert with MANY_ROWS tokens or more: x to its first digit there
    assert rel_rmse(i8(x, ids, w), want) < (ONE_DIGIT_TOLERANCE if one_digit else WEIGHT_TOLERANCE)
    as_ref = Int8Experts(i8.w13, i8.w13_scale, i8.w2, i8.w2_scale, impl="torch")
    assert rel_rmse(i8(x, ids, w), as_ref(x, ids, w)) < (ONE_DIGIT_TOLERANCE if one_digit else KERNEL_TOLERANCE)
    odd = Int8Experts.from_experts(Experts(E, H, 40))  # I = 40: w2's K rules the pack kernel out
    assert odd.impl == "tiles"


def _tiny() -> LLaDA2MoE:
    cfg = ModelConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, intermediate_size=48, moe_intermediate_size=16, num_experts=8,
                      num_experts_per_tok=2, n_group=4, topk_group=2, num_shared_experts=1, first_k_dense_replace=1)
    return LLaDA2MoE(cfg).init_weights(seed=0)


def test_the_swap_takes_experts_and_linears_but_not_router_head_or_embeddings():
    model = quantize_model_int8(_tiny())
    moe, dense = model.layers[1].mlp, model.layers[0].mlp
    assert isinstance(moe.experts, Int8Experts) and isinstance(moe.shared_experts.down_proj, Int8Linear)
    assert isinstance(dense.gate_proj, Int8Linear) and isinstance(model.layers[2].attention.query_key_value, Int8Linear)
    assert type(moe.gate).__name__ == "Router" and moe.gate.weight.dtype == torch.float32
    assert type(model.lm_head) is torch.nn.Linear and model.word_embeddings.weight.dtype == torch.float32


def test_quantizing_while_loading_equals_quantizing_after(fixture_dir):
    during = load_model(fixture_dir, quantize="int8")
    after = quantize_model_int8(load_model(fixture_dir, dtype=torch.bfloat16))
    a, b = during.state_dict(), after.state_dict()
    assert during.dtype == torch.bfloat16  # int8's default dtype: its kernel takes bf16 activations
    assert list(a) == list(b) and sum(t.dtype == torch.int8 for t in a.values()) == 3 * 2 + 3 + 2 * (2 + 3)
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_int8_is_refused_off_the_cpu(fixture_dir):
    with pytest.raises(Exception, match="int8 weights run on the CPU"):
        load_model(fixture_dir, quantize="int8", device="meta")
