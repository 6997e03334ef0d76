"""The fast engine's MoE layers (`llada.fast.layers`): one layer's k-sum hands the next its input norm, safely.

A tiny bf16 model with the mini's structure (`llada.bench.census.mini_like`: a dense layer, then two MoE
layers with a shared expert) on the fast engine, its kernels under the interpreter.
"""

import pytest
import torch

from llada.fast import kernels
from llada.fast.engine import use_engine
from llada.fast.layers import FusedLayer, FusedMoE, Handoff, HandoffNorm
from llada.bench.census import mini_like
from llada.model import Layer, MoE
from llada.norm_rope import rope_cos_sin

pytestmark = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")


@pytest.fixture(scope="module")
def model():
    return mini_like()


def _inputs(model, T=5):
    x = torch.randn(1, T, model.config.hidden_size, generator=torch.Generator().manual_seed(0)).to(model.dtype)
    cos, sin = rope_cos_sin(torch.arange(T), model.config.rotary_dim, model.config.rope_theta)
    return x.to(model.device), cos.to(model.device), sin.to(model.device)


def test_handoff_gives_a_norm_only_for_its_tensor_and_its_module():
    handoff, norm, other = Handoff(), torch.nn.Identity(), torch.nn.Identity()
    x, normed = torch.ones(2), torch.zeros(2)
    handoff.put(x, normed, norm)
    assert handoff.take(x.clone(), norm) is None  # another tensor with the same values: not this one
    handoff.put(x, normed, norm)
    assert handoff.take(x, other) is None  # another norm module
    handoff.put(x, normed, norm)
    assert handoff.take(x, norm) is normed and handoff.take(x, norm) is None  # taken once


def test_moe_layers_are_fused_and_put_back(model):
    keys = list(model.state_dict())
    assert [type(layer) for layer in model.layers] == [Layer, FusedLayer, FusedLayer]
    assert isinstance(model.layers[1].mlp, FusedMoE) and isinstance(model.norm, HandoffNorm)
    use_engine(model, "reference")
    assert [type(layer) for layer in model.layers] == [Layer, Layer, Layer] and type(model.layers[1].mlp) is MoE
    assert list(model.state_dict()) == keys  # the same parameters under the same names
    use_engine(model, "fast", check=False)
    assert [type(layer) for layer in model.layers] == [Layer, FusedLayer, FusedLayer]


@torch.no_grad()
def test_a_layer_run_on_its_own_makes_its_input_norm(model):
    x, cos, sin = _inputs(model)
    first, second = model.layers[1], model.layers[2]
    out = first(x, cos, sin, None, None, 0)  # its k-sum made the second layer's input norm
    handed = second(out, cos, sin, None, None, 0)  # takes it
    own = second(out.clone(), cos, sin, None, None, 0)  # another tensor: makes the norm itself
    # the k-sum's norm and the RMSNorm kernel: the same ops on the same row
    torch.testing.assert_close(handed, own, rtol=0, atol=0)


@torch.no_grad()
def test_fast_forward_stays_near_the_reference(model):
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 8]], device=model.device)
    fast = model(ids)
    use_engine(model, "reference")
    try:
        ref = model(ids)
    finally:
        use_engine(model, "fast", check=False)
    # bf16 through 3 layers: the experts' and the shared expert's products rounded in other places
    assert (fast - ref).abs().max() < 0.05 * ref.abs().max(), ((fast - ref).abs().max(), ref.abs().max())
    assert (fast.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.85


@torch.no_grad()
def test_the_router_module_still_runs_and_hooks_see_its_ids(model):
    seen = []  # `llada.bench.forward` counts the experts a forward touches with hooks like this one
    hook = model.layers[2].mlp.gate.register_forward_hook(lambda m, i, out: seen.append(out[0]))
    try:
        model(torch.tensor([[3, 14, 15, 92, 65]], device=model.device))
    finally:
        hook.remove()
    (ids,) = seen
    E, K = model.config.num_experts, model.config.num_experts_per_tok
    assert ids.shape == (5, K + 1) and (ids[:, -1] == E).all() and (ids[:, :-1] < E).all()


def test_the_layer_check_sees_a_shared_expert_left_out(model, monkeypatch):
    from llada.fast.engine import LAYER_TOLERANCE

    g = torch.Generator().manual_seed(1)
    x, h = (torch.randn(32, model.config.hidden_size, generator=g).to(model.dtype) for _ in range(2))  # (M, H)
    layer = model.layers[1]
    assert layer.moe_error(x, h) < LAYER_TOLERANCE
    real = kernels.fused_moe_bf16
    monkeypatch.setattr(kernels, "fused_moe_bf16",  # the shared expert's down weight read as zeros
                        lambda *a, shared=None, **kw: real(*a, shared=(shared[0], torch.zeros_like(shared[1])), **kw))
    assert layer.moe_error(x, h) > LAYER_TOLERANCE
