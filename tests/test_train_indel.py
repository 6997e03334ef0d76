"""The LLaDA2.2 objective's labels (llada/train/indel.py) against the Levenshtein rule's moves."""

import random

import pytest
import torch

from llada.rule import Candidates, Levenshtein, levenshtein_step, start_block
from llada.train.indel import EditIds, IndelConfig, corrupt22, indel_block
from llada.train.objective import Batch, NoiseConfig

IDS = EditIds(mask=1, delete=60, split=61)
VOCAB = 62
LEV = Levenshtein(mask_id=IDS.mask, delete_id=IDS.delete, split_id=IDS.split)


def after_moves(tokens: list[int], labels: list[int]) -> list[int]:
    """The block after one rule step whose every candidate is its label, sure of it (p = 1)."""
    n = len(tokens)
    block, frozen = torch.tensor(tokens), torch.zeros(n, dtype=torch.bool)
    lab = torch.tensor(labels)
    plain = torch.full((n,), 2)  # the final round's writes: never reached here
    cand = Candidates(lab, torch.ones(n), torch.zeros(n, dtype=torch.long), plain)
    return levenshtein_step(block, cand, frozen, start_block(block, frozen, IDS.mask), LEV).tokens.tolist()


def test_the_worked_example():
    """[a b c d e f], b deleted, x inserted after c: labels [a S D d e f]; the moves give [a M c d e f]."""
    a, b, c, d, e, f, x = 10, 11, 12, 13, 14, 15, 16
    from llada.train.indel import _label

    items = [("keep", 0), ("keep", 2), ("extra", x), ("keep", 3), ("keep", 4), ("keep", 5)]
    out = _label([a, b, c, d, e, f], items, {1}, IDS)
    assert out.tokens == [a, c, x, d, e, f]
    assert out.labels == [a, IDS.split, IDS.delete, d, e, f]
    assert after_moves(out.tokens, out.labels) == [a, IDS.mask, c, d, e, f]
    assert out.missing == [1]


def test_pads_stand_for_the_tail():
    """Two tokens deleted, none inserted: two pads at the end, labelled with the tokens they stand for."""
    from llada.train.indel import _label

    t = [10, 11, 12, 13, 14, 15]
    items = [("keep", 0), ("keep", 2), ("keep", 3), ("keep", 5), ("pad", None), ("pad", None)]
    out = _label(t, items, {1, 4}, IDS)
    assert out.tokens == [10, 12, 13, 15, IDS.mask, IDS.mask]
    assert out.labels == [10, IDS.split, 13, IDS.split, IDS.mask, IDS.mask]  # no tail left: pads stay masks
    assert after_moves(out.tokens, out.labels) == [10, IDS.mask, 12, 13, IDS.mask, 15]  # the pads are cut
    assert out.missing == [1, 4]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 32])
def test_random_blocks_become_the_target_with_masks(n):
    """Whatever the draws: after the moves each position holds its target token, or a mask exactly where
    a missing token goes; the labels hold only target tokens, DELETE, SPLIT (and MASK for bare pads)."""
    rng = random.Random(n)
    cfg = IndelConfig(max_deletes=0.4, max_inserts=0.4)
    for _ in range(300):
        target = [rng.randrange(2, 60) for _ in range(n)]
        out = indel_block(target, rng, cfg, IDS, VOCAB)
        assert len(out.tokens) == len(out.labels) == n
        assert out.tokens != target, "a corrupted block differs from its target"
        moved = after_moves(out.tokens, out.labels)
        expected = [IDS.mask if i in out.missing else t for i, t in enumerate(target)]
        assert moved == expected, (target, out)
        assert set(out.labels) <= set(target) | {IDS.delete, IDS.split, IDS.mask}


def test_corrupt22_keeps_the_prompt_and_weights():
    """Prompt positions are untouched and carry no weight; indel rows hold DELETE/SPLIT labels."""
    N, L, B = 8, 32, 16
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 60, (N, L), generator=g)
    prompt = torch.full((N,), 5)
    batch = Batch(ids, prompt, torch.full((N,), L - 5))
    noisy, labels, weight = corrupt22(batch, B, IDS, VOCAB, NoiseConfig(), IndelConfig(share=1.0), g,
                                      random.Random(0))
    assert noisy.shape == labels.shape == weight.shape == (N, L)
    assert torch.equal(noisy[:, :5], ids[:, :5]) and torch.equal(labels[:, :5], ids[:, :5])
    assert float(weight[:, :5].abs().sum()) == 0.0
    assert (labels == IDS.delete).any() and (labels == IDS.split).any()
    assert not (noisy == IDS.delete).any() and not (noisy == IDS.split).any()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="indel share"):
        IndelConfig(share=1.5)


def test_upgrade_makes_a_2_2_model_with_two_more_rows():
    """--expert-capacity: the embedded 2.1 model becomes 2.2; its old rows and other weights are kept."""
    from llada.train.bpe import load_fast
    from llada.train.upgrade22 import EDIT_TOKENS, upgrade_model, upgrade_tokenizer
    from llada.weights.checkpoint import load_model

    old = load_model("assets/model")
    hf = load_fast("assets/model")
    delete_id, split_id = upgrade_tokenizer(hf)
    assert (delete_id, split_id) == (old.config.vocab_size, old.config.vocab_size + 1)
    assert hf.convert_tokens_to_ids(list(EDIT_TOKENS)) == [delete_id, split_id]
    new = upgrade_model(old, delete_id, split_id, capacity=8, routing_block=16)
    cfg, v = new.config, old.config.vocab_size  # v: the embedded model's vocabulary (4,096 tokens)
    assert (cfg.version, cfg.vocab_size, cfg.delete_token_id, cfg.split_token_id) == ("2.2", v + 2, v, v + 1)
    assert (cfg.expert_capacity, cfg.routing_block) == (8, 16)
    old_state, new_state = old.state_dict(), new.state_dict()
    assert torch.equal(new_state["word_embeddings.weight"][:v], old_state["word_embeddings.weight"])
    assert not new_state["lm_head.weight"][v:].any()
    assert all(torch.equal(v, new_state[k]) for k, v in old_state.items() if k not in
               ("word_embeddings.weight", "lm_head.weight"))
    with pytest.raises(ValueError, match="already 2.2"):
        upgrade_model(new, delete_id, split_id, capacity=8, routing_block=16)
