"""What a run's inputs must be: the prompt, the special ids, the settings and the pokes, each refused with a
ValueError that names what is wrong, before anything is decoded (`BatchDecoder.add` and the entry points call
these)."""

from __future__ import annotations

from ..config import DecodeConfig, padded_length
from ..decide import levenshtein_of
from ..model import LLaDA2MoE
from ..records import POKE_KINDS
from ..trace import Poke


def check_inputs(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int) -> None:
    """ValueError when the settings, the special ids or the prompt do not fit the model."""
    if not isinstance(cfg, DecodeConfig):
        raise ValueError(f"settings must be a DecodeConfig, got {type(cfg).__name__}")
    vocab = model.config.vocab_size
    for name, value in (("mask id", mask_id), ("EOS id", eos_id)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise ValueError(f"{name} {value!r} is outside the vocabulary [0, {vocab})")
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [t for t in prompt_ids if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab]
    if bad:
        raise ValueError(f"prompt token id {bad[0]!r} is outside the vocabulary [0, {vocab})")
    if mask_id in prompt_ids:
        raise ValueError(f"prompt token {prompt_ids.index(mask_id)} is the mask id {mask_id}: a prompt holds no masks "
                         "(text that spells the mask token is tokenized as plain characters)")
    total = padded_length(len(prompt_ids), cfg.gen_length, cfg.block_length)
    limit = model.config.max_position_embeddings
    if total > limit:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) + gen_length ({cfg.gen_length}), padded to whole "
                         f"blocks of {cfg.block_length}, needs {total} positions; the model allows {limit}")
    levenshtein_of(model.config, cfg, mask_id)  # the rule the run follows can run on this model


def check_pokes(model: LLaDA2MoE, cfg: DecodeConfig, mask_id: int, pokes) -> None:
    """ValueError when a poke does not fit the run: a step below 1, a position outside the generated region,
    a token outside the vocabulary, an unknown kind, a delete or insert on a run of the joint (2.1) rule
    (only LLaDA2.2's rule moves tokens), or a written DELETE or SPLIT id on a LLaDA2.2 run (there it would act
    as the move: poke `delete` or `insert` instead)."""
    vocab = model.config.vocab_size
    lev = levenshtein_of(model.config, cfg, mask_id) if pokes else None
    for p in pokes:
        if not isinstance(p, Poke):
            raise ValueError(f"a poke must be a llada.trace.Poke, got {type(p).__name__}")
        if isinstance(p.step, bool) or not isinstance(p.step, int) or p.step < 1:
            raise ValueError(f"poke step {p.step!r} is below 1: a poke applies after decode forward 1 or later")
        if isinstance(p.pos, bool) or not isinstance(p.pos, int) or not 0 <= p.pos < cfg.gen_length:
            raise ValueError(f"poke position {p.pos!r} is outside the generated region [0, {cfg.gen_length})")
        if isinstance(p.token, bool) or not isinstance(p.token, int) or not 0 <= p.token < vocab:
            raise ValueError(f"poke token id {p.token!r} is outside the vocabulary [0, {vocab})")
        _check_poke_kind(p, lev, mask_id)


def _check_poke_kind(p: Poke, lev, mask_id: int) -> None:
    if p.kind not in POKE_KINDS:
        raise ValueError(f"poke kind {p.kind!r} is not one of {', '.join(POKE_KINDS)}")
    if p.kind != "write" and lev is None:
        raise ValueError(f"a poke may {p.kind} only on a run of LLaDA2.2's rule (Levenshtein); this run follows "
                         f"the joint (2.1) rule, which never moves tokens: write a token or mask instead")
    if p.kind != "write" and p.token != mask_id:
        raise ValueError(f"a {p.kind} poke opens a mask: its token must be the mask id {mask_id}, got {p.token}")
    if p.kind == "write" and lev is not None and p.token in (lev.delete_id, lev.split_id):
        move = "delete" if p.token == lev.delete_id else "insert"
        raise ValueError(f"poke token id {p.token} is {move.upper() if move == 'delete' else 'SPLIT'}, which this "
                         f"LLaDA2.2 run would act on as a move: poke {move!r} instead")


def check_configs(prompts, configs) -> list[DecodeConfig]:
    """One DecodeConfig per prompt (one given for all is repeated); ValueError when the counts differ."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id lists")
    if isinstance(configs, DecodeConfig):
        return [configs] * len(prompts)
    configs = list(configs)
    if len(configs) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(configs)} settings: give one DecodeConfig or one per prompt")
    return configs
