"""The int8 SwiGLU (`llada.fast.int8_mlp.Int8SwiGLU`): gate and up on one digit split of x, bit for bit the three
`Int8Linear` layers run one by one (`forward_ref`, what `llada.model.SwiGLU` does); the int8 MoE (`Int8MoE`): the
shared and routed experts on one split, bit for bit `llada.model.MoE.forward`; both swapped in by the int8 load
without changing the state dict."""

import pytest
import torch

from llada.config import ModelConfig
from llada.fast.int8 import Int8Linear
from llada.fast.int8_mlp import Int8MoE, Int8SwiGLU, int8_mlps, quantize_model_int8
from llada.model import LLaDA2MoE, SwiGLU
from llada.row_exact import row_exact

H, I = 48, 40  # odd sizes (real: 2048, 512 for a shared expert, 5120 dense)


def _swiglu() -> Int8SwiGLU:
    torch.manual_seed(0)
    mlp = SwiGLU(H, I)
    for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        torch.nn.init.normal_(lin.weight, std=0.05)
    layers = [Int8Linear.from_linear(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)]
    return Int8SwiGLU(*layers)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(1, H), (7, H), (2, 17, H)])
def test_one_split_for_gate_and_up_is_the_three_layers_bit_for_bit(dtype, shape):
    mlp = _swiglu()
    x = (torch.randn(shape) * 3).to(dtype)
    x.view(-1, H)[0, :3] = torch.tensor([127.0, 0.5, -2.5])  # x / sx lands on halves: ties round to even
    x.view(-1, H)[-1] = 0  # an all-zero row (its scale clamps)
    with torch.inference_mode():
        got = mlp(x)
        assert got.shape == shape and got.dtype == dtype
        assert torch.equal(got, mlp.forward_ref(x))


def test_a_row_keeps_its_bits_among_any_rows():
    mlp = _swiglu()
    x = torch.randn(24, H, dtype=torch.bfloat16)
    with torch.inference_mode(), row_exact():
        alone = mlp(x[:1])
        for m in (2, 5, 24):
            assert torch.equal(mlp(x[:m])[:1], alone), m


def test_the_scales_are_read_as_they_are_now():
    """gate's and up's scales, replaced or changed in place after a forward, are the ones the next one uses."""
    mlp = _swiglu()
    x = torch.randn(5, H)
    before = mlp(x)
    mlp.up_proj.scale = mlp.up_proj.scale * 2  # a new buffer
    assert torch.equal(mlp(x), mlp.forward_ref(x)) and not torch.equal(mlp(x), before)
    mlp.gate_proj.scale.mul_(2)  # the same buffer, changed in place
    assert torch.equal(mlp(x), mlp.forward_ref(x))


def _tiny(shared: int) -> LLaDA2MoE:
    cfg = ModelConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, intermediate_size=48, moe_intermediate_size=16, num_experts=8,
                      num_experts_per_tok=2, n_group=4, topk_group=2, num_shared_experts=shared,
                      first_k_dense_replace=1)
    return LLaDA2MoE(cfg).init_weights(seed=0)


def _stepwise(model: LLaDA2MoE) -> None:
    """Every swapped module of `model` runs its step-by-step forward (these instances only)."""
    for m in model.modules():
        if isinstance(m, (Int8SwiGLU, Int8MoE)):
            m.forward = m.forward_ref


@pytest.mark.parametrize("shared", [1, 0])
@pytest.mark.parametrize("many_rows", [None, 2])  # 2: most pairs run intmm on the layer's split
def test_the_int8_model_swaps_the_mlps_keeping_the_state_dict_and_the_bits(shared, many_rows):
    plain = _tiny(shared)
    keys = list(plain.state_dict())
    model = quantize_model_int8(plain)
    moe = model.layers[1].mlp
    assert isinstance(model.layers[0].mlp, Int8SwiGLU) and isinstance(moe, Int8MoE)
    assert isinstance(moe.shared_experts, Int8SwiGLU) if shared else moe.shared_experts is None
    assert [k for k in model.state_dict() if not k.endswith(".scale") and not k.endswith("_scale")] == keys
    assert int8_mlps(model) == 0  # nothing left to swap
    for layer in model.layers[1:]:
        layer.mlp.experts.many_rows = many_rows
    ids = torch.randint(0, 99, (2, 9))
    with torch.inference_mode():
        fused = model(ids)
        _stepwise(model)
        assert torch.equal(fused, model(ids))
