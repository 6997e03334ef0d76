"""The forward pass against the reference fixture, and its parts against hand-checked cases."""

import math

import torch
from safetensors.torch import load_file

from llada.config import ModelConfig
from llada.model import LLaDA2MoE, Router, block_causal_mask
from llada.norm_rope import apply_rope, rope_cos_sin


def test_fixture_logits_match(ref_model, fixture_dir, golden):
    g = load_file(str(fixture_dir / "golden_forward.safetensors"))
    ids, ref = g["forward.input_ids"], g["forward.logits"]
    B = golden["forward"]["block_length"]
    logits = ref_model(ids, mask=block_causal_mask(torch.arange(ids.shape[1]) // B))
    # fp32 end to end; the reference ran the same math in a different op order
    assert torch.allclose(logits, ref, atol=1e-4, rtol=1e-4), (logits - ref).abs().max()


def test_block_causal_earlier_blocks_never_see_later_ones(ref_model):
    B, T = 8, 32
    ids = torch.randint(0, 250, (1, T), generator=torch.Generator().manual_seed(0))
    mask = block_causal_mask(torch.arange(T) // B)
    base = ref_model(ids, mask=mask)
    changed = ids.clone()
    changed[0, 20:] = (changed[0, 20:] + 7) % 250  # touch blocks 2 and 3 only
    out = ref_model(changed, mask=mask)
    # blocks 0-1 unaffected; only float rounding differs (expert matmuls batch other tokens together)
    assert torch.allclose(out[0, :16], base[0, :16], atol=1e-5)
    assert not torch.allclose(out[0, 16:20], base[0, 16:20])  # block 2 sees its own later tokens


def test_kv_cache_window_equals_full_forward(ref_model):
    B, T = 8, 32
    ids = torch.randint(0, 250, (1, T), generator=torch.Generator().manual_seed(1))
    full = ref_model(ids, mask=block_causal_mask(torch.arange(T) // B))
    cache = ref_model.new_cache(T)
    ref_model(ids[:, :24], mask=block_causal_mask(torch.arange(24) // B), cache=cache)
    cache.commit(24)
    window = ref_model(ids[:, 24:], start=24, cache=cache)
    # same math, different batching of the attention over keys
    assert torch.allclose(window, full[:, 24:], atol=1e-4)


def test_rope_rotates_only_the_rotary_dims():
    x = torch.arange(1, 9, dtype=torch.float32).view(1, 1, 1, 8)  # (B, h, T, D), D = 8, rotary 4
    cos, sin = rope_cos_sin(torch.tensor([3]), rotary_dim=4, theta=100.0)
    out = apply_rope(x, cos, sin)
    # NeoX pairing: dim j with j+2; inv_freq = [1, 100^-0.5 = 0.1]
    a0, a1 = 3 * 1.0, 3 * 0.1
    expect = [1 * math.cos(a0) - 3 * math.sin(a0), 2 * math.cos(a1) - 4 * math.sin(a1),
              3 * math.cos(a0) + 1 * math.sin(a0), 4 * math.cos(a1) + 2 * math.sin(a1), 5, 6, 7, 8]
    assert torch.allclose(out.flatten(), torch.tensor(expect), atol=1e-6)  # fp32 tables vs float64 math


def test_rope_scores_depend_only_on_distance():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)

    def score(pq, pk):
        cq, sq = rope_cos_sin(torch.tensor([pq]), 8, 600000.0)
        ck, sk = rope_cos_sin(torch.tensor([pk]), 8, 600000.0)
        return (apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum()

    assert torch.allclose(score(10, 7), score(110, 107), atol=1e-4)  # fp32 angles lose digits at larger positions


def _router(weight, bias, n_group, topk_group, top_k, scale=2.5):
    cfg = ModelConfig(vocab_size=11, hidden_size=2, num_hidden_layers=2, num_attention_heads=1,
                      num_key_value_heads=1, head_dim=2, intermediate_size=4, moe_intermediate_size=3,
                      num_experts=weight.shape[0], num_experts_per_tok=top_k, n_group=n_group,
                      topk_group=topk_group, routed_scaling_factor=scale, first_k_dense_replace=1)
    r = Router(cfg)
    with torch.no_grad():
        r.weight.copy_(weight)
        r.expert_bias.copy_(bias)
    return r


LOGITS = torch.tensor([3.0, -3.0, 1.0, 1.0])  # sigmoid: 0.953, 0.047, 0.731, 0.731


def test_router_limits_experts_to_the_best_group():
    # 4 experts in 2 groups, keep 1 group; h = (1, 0) so the logits are the first weight column.
    # group scores: g0 = 0.953 + 0.047 = 1.0 < g1 = 1.462, so expert 0 (the best alone) is out
    r = _router(torch.stack([LOGITS, torch.zeros(4)], dim=1), torch.zeros(4), n_group=2, topk_group=1, top_k=2)
    ids, w = r(torch.tensor([[1.0, 0.0]]))
    assert sorted(ids[0].tolist()) == [2, 3]
    assert torch.allclose(w[0], torch.tensor([1.25, 1.25]), atol=1e-6)  # equal scores, normalised x 2.5


def test_router_bias_selects_but_unbiased_scores_weigh():
    bias = torch.tensor([0.0, 1.0, 0.0, 0.0])  # g0 = 0.953 + 1.047 = 2.0 > 1.462: group 0 wins
    r = _router(torch.stack([LOGITS, torch.zeros(4)], dim=1), bias, n_group=2, topk_group=1, top_k=2)
    ids, w = r(torch.tensor([[1.0, 0.0]]))
    order = ids[0].argsort()
    assert ids[0][order].tolist() == [0, 1]
    s = torch.sigmoid(LOGITS[:2])
    assert torch.allclose(w[0][order], s / s.sum() * 2.5, atol=1e-6)  # the bias never enters the weights


def test_moe_layer_matches_dense_per_token_loop():
    cfg = ModelConfig(vocab_size=19, hidden_size=12, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=6, intermediate_size=10, moe_intermediate_size=5,
                      num_experts=6, num_experts_per_tok=3, n_group=3, topk_group=2, num_shared_experts=1,
                      first_k_dense_replace=1)
    torch.manual_seed(0)
    m = LLaDA2MoE(cfg).init_weights(std=0.3, seed=0)
    moe = m.layers[1].mlp
    h = torch.randn(1, 7, 12)
    out = moe(h)
    ids, w = moe.gate(h[0])
    expect = []
    for t in range(7):
        acc = moe.shared_experts(h[0, t])
        for k in range(3):
            e = ids[t, k]
            gate, up = (moe.experts.w13[e] @ h[0, t]).chunk(2)
            acc = acc + w[t, k] * (moe.experts.w2[e] @ (torch.nn.functional.silu(gate) * up))
        expect.append(acc)
    assert torch.allclose(out[0], torch.stack(expect), atol=1e-5)  # batched vs per-token matmul summation order


def test_row_attention_is_grouped_query_attention_with_its_mask(ref_model):
    """The row path's attention (two batched products on the CPU) against torch's SDPA, masked and not."""
    attn = ref_model.layers[0].attention
    g = torch.Generator().manual_seed(0)
    R, T, S, D = 3, 5, 9, attn.head_dim
    q = torch.randn(R, attn.n_head, T, D, generator=g)
    k, v = (torch.randn(R, attn.n_kv, S, D, generator=g) for _ in range(2))
    groups = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2, 2])  # keys' blocks; the queries are the last 5 positions
    for mask in (None, block_causal_mask(groups[-T:], groups)):
        expect = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=D ** -0.5, enable_gqa=attn.n_head != attn.n_kv)
        assert torch.allclose(attn.attend_rows(q, k, v, mask), expect, atol=1e-5)
        half = attn.attend_rows(*(t.to(torch.bfloat16) for t in (q, k, v)), mask)  # softmax in fp32
        wide = [t.double() for t in (q, k, v)]  # float64 stays float64 throughout
        expect64 = torch.nn.functional.scaled_dot_product_attention(
            *wide, attn_mask=mask, scale=D ** -0.5, enable_gqa=attn.n_head != attn.n_kv)
        assert torch.allclose(attn.attend_rows(*wide, mask), expect64, rtol=0, atol=1e-12)
        assert half.dtype == torch.bfloat16 and torch.allclose(half.float(), expect, atol=3e-2)
    assert attn.n_head != attn.n_kv  # the fixture's heads share keys, so the grouping is exercised
