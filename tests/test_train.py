"""The training objective, the grouped-GEMM experts and the loop on tiny configs (hidden 32, 2 layers).

Shipped model: hidden 192, 4 layers, 16 experts top-2 in 4 groups; the `code` preset: hidden 256,
8 layers, 32 experts top-2 in 4 groups. The presets, the sharded export and whole runs of the
command are in tests/test_train_run.py."""

from __future__ import annotations

import pytest
import torch

from llada.config import ModelConfig
from llada.model import LLaDA2MoE
from llada.train.objective import (Batch, NoiseConfig, corrupt, diffusion_loss, layout_mask, layout_positions,
                                   packed_layout_mask,
                                   noisy_logits, self_draft)
from llada.train.experts import ALIGN, GroupedExperts, padded_rows, use_grouped_experts
from llada.train.loop import ExpertBalancer

TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, partial_rotary_factor=0.5, intermediate_size=48, moe_intermediate_size=12,
            num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, num_shared_experts=1,
            first_k_dense_replace=1, routed_scaling_factor=2.5, max_position_embeddings=64)
MASK, EOS = 60, 0


def tiny_model(seed: int = 0) -> LLaDA2MoE:
    return LLaDA2MoE(ModelConfig(**TINY)).init_weights(std=0.1, seed=seed)


def tiny_batch() -> Batch:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (4, 12), generator=g)  # (N=4, L=12): 3 blocks of 4
    return Batch(ids, torch.tensor([3, 5, 2, 4]), torch.tensor([9, 7, 10, 8]))


def test_layout_mask_matches_the_decoder_view():
    m = layout_mask(6, 2)  # (12, 12): clean 0..5 then noisy 6..11, blocks of 2
    assert m[:6, :6].equal(torch.tensor([[j // 2 <= i // 2 for j in range(6)] for i in range(6)]))
    assert not m[:6, 6:].any()  # clean never sees noisy
    assert m[6 + 4, :6].tolist() == [True] * 4 + [False] * 2  # noisy block 2 sees clean blocks 0, 1
    assert m[6 + 4, 6:].tolist() == [False] * 4 + [True] * 2  # ... and itself, not other noisy blocks
    assert layout_positions(3).tolist() == [0, 1, 2, 0, 1, 2]


def test_corruption_spares_the_prompt_and_marks_what_changed():
    batch = tiny_batch()
    cfg = NoiseConfig(t2t_prob=1.0, max_replace=0.9)
    noisy, masked, replaced = corrupt(batch, 4, MASK, 61, cfg, torch.Generator().manual_seed(0))
    gen = batch.generated()
    assert noisy[~gen].equal(batch.ids[~gen])
    assert (noisy[masked] == MASK).all() and not (masked & replaced).any()
    assert (noisy[replaced] != batch.ids[replaced]).all()
    assert noisy[gen & ~masked & ~replaced].equal(batch.ids[gen & ~masked & ~replaced])
    assert replaced.any() and masked.any()


def test_loss_falls_when_overfitting_one_batch():
    model, batch = tiny_model(), tiny_batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    losses = []
    for step in range(40):
        loss = diffusion_loss(model, batch, 4, MASK, NoiseConfig(), g, multi_turn=step % 2 == 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5  # measured ~0.2x: halving leaves room for noise


def test_router_and_experts_get_gradients():
    model, batch = tiny_model(), tiny_batch()
    diffusion_loss(model, batch, 4, MASK, NoiseConfig(), torch.Generator().manual_seed(0)).backward()
    moe = model.layers[1].mlp
    assert moe.gate.weight.grad.abs().sum() > 0 and moe.experts.w13.grad.abs().sum() > 0


def test_balancer_raises_the_bias_of_idle_experts_and_lowers_busy_ones():
    model, batch = tiny_model(), tiny_batch()
    (experts,) = use_grouped_experts(model, "loop")
    balancer = ExpertBalancer(model, rate=0.01)
    diffusion_loss(model, batch, 4, MASK, NoiseConfig(), torch.Generator().manual_seed(0))
    router = model.layers[1].mlp.gate
    load = experts.load.clone()  # tokens routed to each expert in that forward
    assert load.sum() == 2 * batch.ids.numel() * 2  # (clean + noisy) tokens x top-2
    before = router.expert_bias.clone()
    balancer.step()
    moved = router.expert_bias - before
    assert torch.equal(moved, 0.01 * torch.sign(load.mean() - load))  # below-average load: bias up
    assert (moved[load < load.mean()] > 0).all() and (moved[load > load.mean()] < 0).all()


def test_inference_forwards_do_not_count_as_load():
    model = tiny_model()
    (experts,) = use_grouped_experts(model, "grouped")
    with torch.no_grad():
        model(torch.ones(1, 5, dtype=torch.long))
    assert experts.load.sum() == 0  # the self-draft forward runs without gradients: not balanced on


def test_padded_rows_by_hand():
    ids = torch.tensor([[0, 2], [2, 1]])  # pairs (token, k) -> experts 0, 2, 2, 1; expert 3 gets nothing
    rows, ends, total = padded_rows(ids, num_experts=4)
    assert ALIGN == 16 and total == 4 + 4 * 16
    assert rows.tolist() == [0, 32, 33, 16]  # expert e's rows start at 16 * (rows of the experts before it)
    assert ends.tolist() == [16, 32, 48, total]  # expert 3's empty group runs to the end of the buffer


@pytest.mark.parametrize("case", ["mixed", "one_token", "one_expert"])
def test_grouped_experts_equal_the_reference_loop(case):
    """Same outputs and gradients as the engine's expert loop (fp32 on CPU), including empty experts."""
    g = torch.Generator().manual_seed(0)
    experts = GroupedExperts(8, 32, 12, "loop")
    with torch.no_grad():
        experts.w13.normal_(0, 0.2, generator=g)
        experts.w2.normal_(0, 0.2, generator=g)
    T = 1 if case == "one_token" else 23
    ids = torch.randint(0, 8, (T, 2), generator=g) if case != "one_expert" else torch.full((T, 2), 5)
    x, weights = torch.randn(T, 32, generator=g), torch.rand(T, 2, generator=g)
    r = torch.randn(T, 32, generator=g)
    outs = {}
    for impl in ("loop", "grouped"):
        experts.impl = impl
        experts.zero_grad()
        xi = x.clone().requires_grad_(True)
        y = experts(xi, ids, weights)
        (y * r).sum().backward()
        outs[impl] = (y.detach(), xi.grad, experts.w13.grad.clone(), experts.w2.grad.clone())
    for ref, got in zip(outs["loop"], outs["grouped"]):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)  # fp32, different summation order only


def test_grouped_experts_keep_the_checkpoint_keys():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    use_grouped_experts(model, "grouped")
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    with pytest.raises(ValueError, match="experts impl must be one of grouped, loop"):
        GroupedExperts(8, 4, 2, "triton")


def test_loss_weighs_untouched_tokens_by_keep_weight():
    """The loss is the mean CE over generated positions, masked/replaced ones weighted 1, the rest keep_weight."""
    model, batch = tiny_model(), tiny_batch()
    cfg = NoiseConfig(t2t_prob=1.0, keep_weight=0.25)
    noisy, masked, replaced = corrupt(batch, 4, MASK, 61, cfg, torch.Generator().manual_seed(3))
    ce = torch.nn.functional.cross_entropy(noisy_logits(model, batch.ids, noisy, 4).transpose(1, 2), batch.ids,
                                           reduction="none")
    weight = torch.where(masked | replaced, 1.0, 0.25) * batch.generated()
    expect = (ce * weight).sum() / weight.sum()
    got = diffusion_loss(model, batch, 4, MASK, cfg, torch.Generator().manual_seed(3))
    assert got.item() == pytest.approx(expect.item(), rel=1e-6)  # same draws, same forward: equal up to fp32 sums
    ones = NoiseConfig(t2t_prob=1.0, keep_weight=1.0)
    # the same draws with every token weighted 1 give another loss (well beyond float rounding)
    assert diffusion_loss(model, batch, 4, MASK, ones, torch.Generator().manual_seed(3)).item() != pytest.approx(
        got.item(), rel=1e-3)


def test_self_draft_fills_only_masks_above_the_random_threshold():
    model, batch = tiny_model(), tiny_batch()
    with torch.no_grad():
        model.lm_head.weight.mul_(5)  # peaked predictions: some masks pass the random threshold, some do not
    noisy, masked, _ = corrupt(batch, 4, MASK, 61, NoiseConfig(), torch.Generator().manual_seed(0))
    drafted, still = self_draft(model, batch.ids, noisy, masked, 4, torch.Generator().manual_seed(7))
    p, x0 = torch.softmax(noisy_logits(model, batch.ids, noisy, 4), -1).max(-1)
    tau = torch.rand(batch.ids.shape[0], 1, generator=torch.Generator().manual_seed(7))  # the draw self_draft made
    fill = masked & (p > tau)
    assert torch.equal(still, masked & ~fill) and still.any() and fill.any()
    assert torch.equal(drafted, torch.where(fill, x0, noisy))


def test_a_packed_item_reads_exactly_as_it_would_alone():
    model = tiny_model().eval()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(1, 50, (8,), generator=g), torch.randint(1, 50, (4,), generator=g)  # 2 blocks, 1 block
    packed = torch.cat([a, b])[None]  # (1, 12): a on blocks 0-1, b on block 2
    segment = torch.tensor([[0] * 8 + [1] * 4])
    noisy = packed.clone()
    noisy[0, [2, 5, 9, 10]] = MASK
    with torch.no_grad():
        together = noisy_logits(model, packed, noisy, 4, segment)[0]  # (12, V)
        alone_a = noisy_logits(model, a[None], noisy[:, :8], 4)[0]
        alone_b = noisy_logits(model, b[None], noisy[:, 8:], 4)[0]
    torch.testing.assert_close(together, torch.cat([alone_a, alone_b]), atol=2e-4, rtol=1e-4)
    mask = packed_layout_mask(segment, 4)  # (1, 1, 24, 24)
    assert not mask[0, 0, 12 + 8:, :8].any() and not mask[0, 0, 12:12 + 8, 8:12].any()  # b never sees a, nor a b


def test_packed_batches_train():
    model = tiny_model()
    ids = torch.randint(1, 50, (2, 12), generator=torch.Generator().manual_seed(4))
    segment = torch.tensor([[0] * 8 + [1] * 4, [0] * 12])
    gen = torch.ones(2, 12, dtype=torch.bool)
    gen[:, 0] = gen[0, 8] = False  # each item's first token is its prompt
    batch = Batch(ids, torch.zeros(2, dtype=torch.long), torch.full((2,), 12), segment, gen)
    loss = diffusion_loss(model, batch, 4, MASK, NoiseConfig(), torch.Generator().manual_seed(0), multi_turn=True)
    loss.backward()
    assert torch.isfinite(loss) and model.lm_head.weight.grad is not None
