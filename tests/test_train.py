"""The training objective and loop on a tiny config (hidden 32, 2 layers, 8 experts, vocab ~300).

Shipped model: hidden 192, 4 layers, 16 experts top-2 in 4 groups."""

from __future__ import annotations

import json

import pytest
import torch

from llada.checkpoint import load_model
from llada.config import ModelConfig
from llada.model import LLaDA2MoE
from llada.train.objective import (Batch, NoiseConfig, corrupt, diffusion_loss, layout_mask, layout_positions,
                                   noisy_logits, self_draft)
from llada.train.loop import ExpertBalancer, TrainConfig, train

TINY = dict(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=16, partial_rotary_factor=0.5, intermediate_size=48, moe_intermediate_size=12,
            num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, num_shared_experts=1,
            first_k_dense_replace=1, routed_scaling_factor=2.5, max_position_embeddings=64)
MASK, EOS = 60, 0


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls on shared cores: one thread avoids OpenMP threads waiting on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
    balancer = ExpertBalancer(model, rate=0.01)
    diffusion_loss(model, batch, 4, MASK, NoiseConfig(), torch.Generator().manual_seed(0))
    router = model.layers[1].mlp.gate
    load = balancer.counts[router].clone()  # tokens routed to each expert in that forward
    before = router.expert_bias.clone()
    balancer.step()
    moved = router.expert_bias - before
    assert torch.equal(moved, 0.01 * torch.sign(load.mean() - load))  # below-average load: bias up
    assert (moved[load < load.mean()] > 0).all() and (moved[load > load.mean()] < 0).all()


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


def test_train_command_writes_a_loadable_model_dir(tmp_path):
    tc = TrainConfig(out=str(tmp_path), steps=4, minutes=5, vocab_size=300, hidden=32, layers=2, heads=2,
                     kv_heads=1, experts=8, groups=4, expert_width=12, dense_width=48, task_batch=4, code_batch=2,
                     code_functions=30, code_length=64, warmup=2, multi_turn=0.5)
    summary = train(tc, progress=False)
    assert summary["steps"] == 4
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "presets.json",
                 "loss.csv", "loss.png", "training.json"):
        assert (tmp_path / name).exists(), name
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "llada2_moe" and config["mask_token_id"] != config["eos_token_id"]
    assert load_model(tmp_path).config.num_experts == 8
