"""LLaDA2.2's block routing (`llada.model.block_topk`, the fast path's `FusedBlockRouter`), its config and replica.

The routing is checked against the formula written out below with Python loops over blocks and tokens
(`direct_routing`); ties go to the lower expert id, both when a block chooses its allowed experts and when a
token chooses among them. Odd tiny sizes (vocab 99, hidden 24, 16 experts, top-4, capacity 6) so that a
shape bug fails loudly; real sizes: 256 experts, top-8, capacity 48, routing blocks of 32 tokens.
"""

from __future__ import annotations

import json

import pytest
import torch

from llada.config import ConfigError, DecodeConfig, ModelConfig
from llada.decode import generate
from llada.fast.engine import _plain_router, check_decode_config, routable
from llada.fast.kernels.reference import add_rms_norm
from llada.fast.quantize import FusedBlockRouter, FusedRouter, fast_router
from llada.model import LLaDA2MoE, Router, RoutingError, RowInput, block_topk
from llada.norm_rope import RMSNorm
from llada.weights import memory, replica
from llada.weights.checkpoint import load_model

TINY_22 = dict(vocab_size=99, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
               head_dim=12, intermediate_size=40, moe_intermediate_size=8, num_experts=16, num_experts_per_tok=4,
               first_k_dense_replace=1, num_shared_experts=1, expert_capacity=6, block_size=32,
               delete_token_id=90, split_token_id=91)


def config(**changes) -> ModelConfig:
    return ModelConfig.from_dict(TINY_22 | changes)


def direct_routing(scores: list[list[float]], biased: list[list[float]], capacity: int, block: int, top_k: int,
                   scale: float) -> tuple[list[list[int]], list[list[float]]]:
    """The LLaDA2.2 rule, plainly: per block, the `capacity` experts of highest max-over-tokens r = s + bias
    (`biased`, summed in fp32 as the model sums it) are allowed; each token picks its top_k of r among them
    (ties: lower id); weights = s at the picks, normalised, times scale."""
    T, E = len(scores), len(scores[0])
    ids, weights = [], []
    for first in range(0, T, block):
        r = biased[first:first + block]
        block_max = [max(r[i][e] for i in range(block)) for e in range(E)]
        allowed = sorted(range(E), key=lambda e: (-block_max[e], e))[:capacity]
        for i in range(block):
            picks = sorted(allowed, key=lambda e: (-r[i][e], e))[:top_k]
            s = [scores[first + i][e] for e in picks]
            ids.append(picks)
            weights.append([v / sum(s) * scale for v in s])
    return ids, weights


def random_router(cfg: ModelConfig, seed: int = 0) -> Router:
    g = torch.Generator().manual_seed(seed)
    router = Router(cfg)
    router.weight.data = torch.randn(router.weight.shape, generator=g)
    router.expert_bias = torch.randn(cfg.num_experts, generator=g) * 0.1
    return router


@pytest.mark.parametrize("tokens", [32, 96])  # one routing block; several in one forward
def test_block_routing_is_the_direct_formula(tokens):
    cfg = config()
    router = random_router(cfg)
    h = torch.randn(tokens, cfg.hidden_size, generator=torch.Generator().manual_seed(tokens))
    ids, w = router(h)
    scores = torch.sigmoid(h.float() @ router.weight.float().T)  # (T, E): s in fp32
    biased = scores + router.expert_bias  # (T, E): r
    want_ids, want_w = direct_routing(scores.tolist(), biased.tolist(), 6, 32, 4, 2.5)
    assert ids.tolist() == want_ids
    torch.testing.assert_close(w, torch.tensor(want_w), rtol=1e-6, atol=1e-6)  # fp32 sums vs Python's doubles
    blocks = ids.reshape(tokens // 32, -1)
    assert all(len(set(b.tolist())) <= 6 for b in blocks)  # no block uses more experts than its capacity


def test_ties_go_to_the_lower_expert_id():
    # r in halves (exact in fp32): experts 3, 5 and 9 tie for the block's best; 1 and 12 tie for the last place
    E, R = 16, 32
    r = torch.zeros(R, E)
    r[0, [3, 5, 9]] = 0.75
    r[1, [1, 12]] = 0.5
    r[2, [0, 2]] = 0.25  # below the tie: not allowed with capacity 4
    r[3, [2, 12]], r[3, 9] = 0.375, 0.125  # token 3 would take 2 and 12 first, were they allowed
    ids = block_topk(r, capacity=4, block=R, top_k=2)  # allowed: 3, 5, 9, then 1 before 12
    assert ids[3].tolist() == [9, 1]  # 12 lost the block's tie to 1; 2 was never among the best
    assert ids[0].tolist() == [3, 5]  # a three-way tie: the two lowest ids
    assert ids[1].tolist() == [1, 3]  # 1 leads its row; then the row's zeros tie: the lowest allowed id
    assert ids[5].tolist() == [1, 3]  # an all-zero token: the lowest allowed ids
    want, _ = direct_routing((r + 1).tolist(), r.tolist(), 4, R, 2, 1.0)
    assert ids.tolist() == want


def test_the_bias_steers_the_choice_never_the_weights():
    cfg = config()
    router = random_router(cfg)
    h = torch.randn(32, cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    ids, w = router(h)
    scores = torch.sigmoid(h.float() @ router.weight.float().T).gather(1, ids)
    torch.testing.assert_close(w, scores / scores.sum(-1, keepdim=True) * 2.5)


def test_grouped_routing_keys_do_not_override_block_routing():
    h = torch.randn(64, 24, generator=torch.Generator().manual_seed(2))
    a, b = (random_router(config(n_group=g, topk_group=k)) for g, k in ((8, 4), (2, 1)))
    assert torch.equal(a(h)[0], b(h)[0])
    assert config().version == "2.2" and ModelConfig.from_dict(TINY_22 | {"expert_capacity": 0, "delete_token_id": None,
                                                                          "split_token_id": None,
                                                                          "block_size": None}).version == "2.1"


def test_tokens_that_are_not_whole_routing_blocks_are_refused():
    cfg = config()
    with pytest.raises(RoutingError, match="whole routing blocks of 32 tokens; this forward routes 40 tokens"):
        random_router(cfg)(torch.randn(40, cfg.hidden_size))
    model = LLaDA2MoE(cfg).init_weights(seed=0)
    with pytest.raises(RoutingError, match="a forward of 16 tokens from position 0: decode with a block_length"):
        model(torch.zeros(1, 16, dtype=torch.long))
    cache = model.new_cache(64)
    with pytest.raises(RoutingError, match="from position 16"):
        model(torch.zeros(1, 32, dtype=torch.long), start=16, cache=cache)
    # two rows of 16: 32 tokens flattened, a whole routing block by count, yet each row's block is cut in half
    rows = [RowInput(torch.zeros(16, dtype=torch.long)), RowInput(torch.ones(16, dtype=torch.long))]
    with pytest.raises(RoutingError, match="a forward of 16 tokens"):
        model.forward_rows(rows)


def test_aligned_rows_route_as_they_do_alone():
    model = LLaDA2MoE(config()).init_weights(seed=0)
    a, b = (torch.randint(0, 99, (64,), generator=torch.Generator().manual_seed(s)) for s in (3, 4))
    model.requires_grad_(False)
    together = model.forward_rows([RowInput(a), RowInput(b[:32])])
    torch.testing.assert_close(together[0], model(a[None])[0])
    torch.testing.assert_close(together[1], model(b[None, :32])[0])


def test_the_fast_router_is_the_reference():
    cfg = config()
    ref = random_router(cfg)
    assert not FusedRouter.supports(ref)  # the 2.1 kernel never routes a 2.2 model
    fast = fast_router(ref)
    assert isinstance(fast, FusedBlockRouter)
    h = torch.randn(64, cfg.hidden_size, generator=torch.Generator().manual_seed(5))
    ids, w = ref(h)
    fast_ids, fast_w = fast(h, shared=True)  # (T, K + 1): the shared expert last, id E, weight 1
    assert torch.equal(fast_ids[:, :-1], ids) and torch.equal(fast_w[:, :-1], w)
    assert set(fast_ids[:, -1].tolist()) == {16} and set(fast_w[:, -1].tolist()) == {1.0}
    norm, residual = RMSNorm(cfg.hidden_size, 1e-6), torch.randn(h.shape)
    got_ids, got_w, s, x = fast(h, residual=residual, norm=norm)
    want_s, want_x = add_rms_norm(residual, h, norm.weight, norm.eps)
    assert torch.equal(s, want_s) and torch.equal(x, want_x) and torch.equal(got_ids, ref(want_x)[0])
    back = _plain_router(fast)
    assert (back.capacity, back.routing_block) == (6, 32) and torch.equal(back(h)[0], ids)


def test_the_engine_checks_route_whole_blocks():
    model = LLaDA2MoE(config()).init_weights(seed=0)
    assert routable(model, (1, 32)) == (32,)
    assert check_decode_config(model).block_length == 32
    plain = LLaDA2MoE(ModelConfig.from_dict(replica.replica_config("tiny", vocab_size=99)))
    assert routable(plain, (1, 32)) == (1, 32)


BAD_22 = [
    ({"expert_capacity": 3}, "expert_capacity \\(3\\) is smaller than num_experts_per_tok \\(4\\)"),
    ({"expert_capacity": 17}, "expert_capacity \\(17\\) is larger than num_experts \\(16\\)"),
    ({"expert_capacity": -1}, "'expert_capacity' must be an integer >= 0"),
    ({"delete_token_id": None}, "needs delete_token_id"),
    ({"delete_token_id": None, "split_token_id": None}, "needs delete_token_id and split_token_id"),
    ({"split_token_id": 90}, "delete_token_id and split_token_id are both 90"),
    ({"delete_token_id": 99}, "'delete_token_id' \\(99\\) is outside the vocabulary"),
    ({"block_size": 0}, "'block_size' \\(the routing block, tokens\\) must be a positive integer"),
    ({"block_size": -32}, "'block_size'.*positive integer"),
    ({"eos_token_id": "156892"}, "'eos_token_id' must be a token id or a list"),
    ({"expert_capacity": 0}, "delete_token_id, split_token_id, block_size belong to LLaDA2.2"),
]


@pytest.mark.parametrize("changes, message", BAD_22)
def test_bad_22_configs_are_refused_with_their_message(changes, message):
    with pytest.raises(ConfigError, match=message):
        config(**changes)


def test_the_22_config_round_trips_and_names_its_version():
    cfg = config(eos_token_id=[1, 2])
    out = cfg.to_dict()
    assert (out["expert_capacity"], out["block_size"], out["eos_token_id"]) == (6, 32, [1, 2])
    assert ModelConfig.from_dict(out) == cfg and cfg.stop_token_ids == (1, 2)
    plain = ModelConfig.from_dict(replica.replica_config("tiny")).to_dict()
    assert not {"expert_capacity", "block_size", "delete_token_id", "routing_block"} & plain.keys()


def test_sizing_of_22_mini_and_flash():
    gib = {}
    for shape in ("mini", "flash"):
        cfg = ModelConfig.from_dict(replica.replica_config(shape, "2.2"))
        old = ModelConfig.from_dict(replica.replica_config(shape))
        assert (cfg.version, cfg.expert_capacity, cfg.routing_block) == ("2.2", 48, 32)
        assert cfg.parameter_counts() == old.parameter_counts()  # block routing adds no tensor
        gib[shape] = [round(memory.weight_bytes(cfg, torch.bfloat16, q) / memory.GIB, 1) for q in (None, "fp8")]
    assert gib == {"mini": [30.3, 16.0], "flash": [191.6, 98.7]}  # the table in docs/llada22.md


@pytest.fixture(scope="module")
def replica_22(tmp_path_factory):
    out = tmp_path_factory.mktemp("replica22") / "LLaDA2.2-mini"
    assert replica.main([str(out), "--shape", "tiny", "--version", "2.2"]) == 0
    return out


def test_a_22_replica_is_in_the_real_format(replica_22):
    raw = json.loads((replica_22 / "config.json").read_text())
    assert (raw["expert_capacity"], raw["block_size"], raw["delete_token_id"], raw["split_token_id"]) == (
        6, 32, 156930, 156931)
    assert json.loads((replica_22 / "generation_config.json").read_text())["eos_token_id"] == [156892, 156900]
    vocab = json.loads((replica_22 / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in vocab}
    assert (ids["<|endoftext|>"], ids["<|mask|>"], ids["<|role_end|>"], ids["<|delete|>"], ids["<|split|>"]) == (
        156892, 156895, 156900, 156930, 156931)


def test_a_22_replica_loads_and_decodes_alike_with_and_without_the_cache(replica_22):
    model = load_model(replica_22)
    assert model.config.version == "2.2" and model.config.stop_token_ids == (156892, 156900)
    assert all(layer.mlp.gate.capacity == 6 for layer in model.layers[1:])
    logits = model(torch.arange(64)[None])
    assert logits.shape == (1, 64, replica.VOCAB) and logits.isfinite().all()
    cfg = DecodeConfig(threshold=0.0, editing_threshold=None, max_post_steps=1, block_length=32, gen_length=32)
    prompt = list(range(100, 140))  # 40 tokens: the prompt's tail shares the first decoded block with masks
    on, off = (generate(model, prompt, cfg.with_(use_cache=c), replica.MASK_ID, replica.EOS_ID) for c in (True, False))
    assert on.output_ids == off.output_ids and len(on.output_ids) == 32

