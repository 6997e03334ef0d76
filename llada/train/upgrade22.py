"""Turn a LLaDA2.1-format model into a LLaDA2.2-format one to train further (`--expert-capacity N`).

Two things make a checkpoint 2.2 (docs/llada22.md): block routing (`expert_capacity` > 0 experts per
routing block of `routing_block` tokens) and the two edit tokens its decoding writes. Here:

    vocabulary   V -> V + 2: `<|delete|>` = V (delete_token_id), `<|split|>` = V + 1 (split_token_id),
                 added to the tokenizer as special tokens (never produced from text)
    embedding    the two new rows are the mean of the old rows (a neutral input)
    LM head      the two new rows are zero, so at the start the model writes them rarely and keeps
                 its 2.1 behaviour until the objective (`indel.py`) teaches them
    routing      the same router and experts; only the selection changes (2.1 group-limited top-k
                 becomes block routing), which training then adapts to

Every other weight is copied unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..model import LLaDA2MoE

EDIT_TOKENS = ("<|delete|>", "<|split|>")


def upgrade_tokenizer(hf):
    """Add the two edit tokens as special tokens; returns the ids they got (delete, split)."""
    before = len(hf)
    hf.add_special_tokens({"additional_special_tokens": list(EDIT_TOKENS)})
    ids = tuple(hf.convert_tokens_to_ids(t) for t in EDIT_TOKENS)
    if ids != (before, before + 1):
        raise ValueError(f"the edit tokens landed at {ids}, not at the end of the vocabulary ({before}, "
                         f"{before + 1}): the tokenizer already had one of {EDIT_TOKENS}")
    return ids


def upgrade_model(model: LLaDA2MoE, delete_id: int, split_id: int, capacity: int, routing_block: int) -> LLaDA2MoE:
    """A 2.2 copy of a 2.1 model: vocabulary grown to hold the edit ids, block routing on."""
    cfg = model.config
    if cfg.version != "2.1":
        raise ValueError(f"--expert-capacity upgrades a LLaDA2.1 model; this one is already {cfg.version}")
    vocab = max(cfg.vocab_size, delete_id + 1, split_id + 1)
    new_cfg = replace(cfg, vocab_size=vocab, expert_capacity=capacity, routing_block=routing_block,
                      delete_token_id=delete_id, split_token_id=split_id)
    new = LLaDA2MoE(new_cfg)
    state = model.state_dict()
    grown = vocab - cfg.vocab_size
    emb, head = state["word_embeddings.weight"], state["lm_head.weight"]  # (V, H) each
    state["word_embeddings.weight"] = torch.cat([emb, emb.mean(0, keepdim=True).expand(grown, -1)])
    state["lm_head.weight"] = torch.cat([head, torch.zeros(grown, head.shape[1], dtype=head.dtype)])
    new.load_state_dict(state)
    return new.to(emb.dtype)
