"""The draft-and-edit decoder: one loop, a generator that yields a `StepRecord` per forward.

The sequence (prompt + gen_length masks, padded to whole blocks) is decoded block by block from the
block holding the prompt's tail. Each decode forward scores the active block and, per the official
LLaDA2.1 rule:

* DRAFT (M2T): masked positions whose confidence p > threshold are filled; if none passes, the single
  most confident mask is filled instead;
* EDIT (T2T): written, non-prompt positions whose argmax differs from the current token and whose
  p > editing_threshold are replaced (editing_threshold 0.0 replaces every changed token; None = off).

A block stops when a step starts without masks and edits nothing, or after `max_post_steps` mask-free
steps. With Multi-Block Editing (MBE) the last `mbe_window` finished blocks stay in the forward, see
the active block, and take T2T edits (recorded as `mbe`). The KV cache holds finished blocks that left
the window, computed from their final tokens; forwards that only fill it are `cache` records.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch

from .model import LLaDA2MoE, block_causal_mask
from .sampling import sample_tokens

PRESETS: dict[str, dict] = {
    "S": {"threshold": 0.5, "editing_threshold": 0.0},
    "Q": {"threshold": 0.7, "editing_threshold": 0.5},
    "M2T": {"threshold": 0.95, "editing_threshold": None},
}


@dataclass(frozen=True)
class DecodeConfig:
    threshold: float = 0.5  # tau_mask: a mask is drafted when p > threshold
    editing_threshold: float | None = 0.0  # tau_edit: a token is edited when p > this; None = editing off
    max_post_steps: int = 16
    block_length: int = 32
    gen_length: int = 128
    eos_early_stop: bool = False
    num_to_transfer: int = 1
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    use_cache: bool = True
    mbe: bool = False
    mbe_window: int = 1

    def __post_init__(self) -> None:
        _check_range("threshold", self.threshold, 0.0, 1.0)
        if self.editing_threshold is not None:
            _check_range("editing_threshold", self.editing_threshold, 0.0, 1.0)
        for name in ("block_length", "gen_length", "num_to_transfer", "mbe_window"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.max_post_steps, int) or self.max_post_steps < 0:
            raise ValueError(f"max_post_steps must be an integer >= 0, got {self.max_post_steps!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 or unset, got {self.top_k}")
        if self.top_p is not None:
            _check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)

    @classmethod
    def preset(cls, name: str, presets: dict[str, dict] | None = None, **overrides) -> "DecodeConfig":
        """A named mode (S, Q, M2T) with `overrides`; `presets` may replace the official values."""
        table = presets or PRESETS
        key = {"M2T ONLY": "M2T", "M2T_ONLY": "M2T"}.get(name.upper(), name.upper())
        if key not in table:
            raise ValueError(f"unknown mode {name!r}; choose one of {', '.join(table)}")
        return cls(**(table[key] | overrides))

    def with_(self, **changes) -> "DecodeConfig":
        return replace(self, **changes)


def _check_range(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    if not number or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}")


@dataclass
class StepRecord:
    """What one forward did. Positions are absolute (0-based, prompt included)."""

    kind: str  # "decode" (drafts/edits) or "cache" (only fills the KV cache)
    phase: str  # decode: "draft" (the block had masks) or "verify"; cache: "prefill" or "refresh"
    step: int  # decode forwards so far, this one included (cache records: decode forwards before it)
    block: int  # active block index
    block_step: int  # decode forwards inside this block, this one included
    prompt_length: int
    window: tuple[int, int]  # [start, end) scored by this forward (MBE window + active block)
    active: tuple[int, int]  # [start, end) of the active block
    tokens: list[int]  # the whole sequence after this step (prompt + generation, whole blocks)
    active_before: list[int] = field(default_factory=list)  # active block before the forward
    drafted: list[int] = field(default_factory=list)  # filled from a mask (M2T)
    edited: list[int] = field(default_factory=list)  # replaced inside the active block (T2T)
    mbe_edited: list[int] = field(default_factory=list)  # replaced inside an earlier block (MBE)
    previous: dict[int, int] = field(default_factory=dict)  # position -> token it replaced
    guesses: list[int] = field(default_factory=list)  # the model's token for every window position
    confidence: list[float] = field(default_factory=list)  # its probability p, same order
    threshold: float = 0.0
    editing_threshold: float | None = None
    seconds: float = 0.0  # wall time of this forward and its decision
    elapsed: float = 0.0  # seconds since the run started
    decode_forwards: int = 0
    cache_forwards: int = 0
    output_length: int = 0  # tokens the output would hold if the run stopped here

    def p_at(self, pos: int) -> float:
        return self.confidence[pos - self.window[0]]


@dataclass
class GenerateResult:
    prompt_ids: list[int]
    output_ids: list[int]
    num_decode_forwards: int
    num_cache_forwards: int
    block_states_before_each_forward: list[list[int]]
    drafts: int
    edits: int
    mbe_edits: int
    seconds: float
    records: list[StepRecord]

    @property
    def forwards(self) -> int:
        return self.num_decode_forwards + self.num_cache_forwards

    @property
    def tpf(self) -> float:
        return len(self.output_ids) / max(self.forwards, 1)

    @property
    def tps(self) -> float:
        return len(self.output_ids) / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        return {"output_ids": self.output_ids, "num_decode_forwards": self.num_decode_forwards,
                "num_cache_forwards": self.num_cache_forwards,
                "block_states_before_each_forward": self.block_states_before_each_forward,
                "tpf": self.tpf, "tps": self.tps, "drafts": self.drafts, "edits": self.edits,
                "mbe_edits": self.mbe_edits, "seconds": self.seconds}


def output_ids(tokens: list[int], prompt_length: int, gen_length: int, mask_id: int, eos_id: int) -> list[int]:
    """The generated tokens, cut after the first EOS (inclusive) and before the first mask."""
    out = []
    for t in tokens[prompt_length:prompt_length + gen_length]:
        if t == mask_id:
            break
        out.append(t)
        if t == eos_id:
            break
    return out


class _Run:
    """Mutable state of one decoding run (the sequence, the cache, the counters)."""

    def __init__(self, model: LLaDA2MoE, prompt: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int):
        self.model, self.cfg, self.mask_id, self.eos_id = model, cfg, mask_id, eos_id
        self.P, B = len(prompt), cfg.block_length
        self.n_blocks = math.ceil((self.P + cfg.gen_length) / B)
        self.first = self.P // B
        self.x = torch.full((1, self.n_blocks * B), mask_id, dtype=torch.long, device=model.device)
        self.x[0, :self.P] = torch.tensor(prompt, dtype=torch.long)
        self.cache = model.new_cache(self.n_blocks * B) if cfg.use_cache else None
        self.generator = torch.Generator(device=model.device)
        if cfg.seed is not None:
            self.generator.manual_seed(cfg.seed)
        self.decode_forwards = self.cache_forwards = 0
        self.t0 = time.perf_counter()

    def forward(self, lo: int, hi: int, groups_hi: int) -> torch.Tensor:
        """Logits (hi-lo, V) for positions [lo, hi); positions >= groups_hi*B form one bidirectional group."""
        B = self.cfg.block_length
        if self.cache is not None:
            n = hi - lo
            groups = torch.arange(lo, hi, device=self.x.device) // B
            groups = groups.clamp(max=groups_hi)
            mask = None
            if groups[0] != groups[-1]:  # several strict blocks in one call (prefill / refresh)
                keys = torch.cat([torch.full((lo,), -1, device=groups.device), groups])
                mask = block_causal_mask(groups, keys)
            return self.model(self.x[:, lo:hi], start=lo, mask=mask, cache=self.cache)[0, -n:]
        groups = (torch.arange(hi, device=self.x.device) // B).clamp(max=groups_hi)
        return self.model(self.x[:, :hi], mask=block_causal_mask(groups))[0, lo:hi]

    def output_length(self) -> int:
        return len(output_ids(self.x[0].tolist(), self.P, self.cfg.gen_length, self.mask_id, self.eos_id))


def _cache_record(run: _Run, phase: str, block: int, lo: int, hi: int, seconds: float) -> StepRecord:
    return StepRecord(kind="cache", phase=phase, step=run.decode_forwards, block=block, block_step=0,
                      prompt_length=run.P, window=(lo, hi), active=(lo, hi), tokens=run.x[0].tolist(),
                      threshold=run.cfg.threshold, editing_threshold=run.cfg.editing_threshold,
                      seconds=seconds, elapsed=time.perf_counter() - run.t0,
                      decode_forwards=run.decode_forwards, cache_forwards=run.cache_forwards,
                      output_length=run.output_length())


def _fill_cache(run: _Run, upto: int, phase: str, block: int) -> Iterator[StepRecord]:
    """Compute strict block-causal keys/values of [cache.length, upto) and commit them."""
    cache = run.cache
    if cache is None or cache.length >= upto:
        return
    t = time.perf_counter()
    lo = cache.length
    run.forward(lo, upto, groups_hi=upto // run.cfg.block_length)  # no merged group: strict block-causal
    cache.commit(upto)
    run.cache_forwards += 1
    yield _cache_record(run, phase, block, lo, upto, time.perf_counter() - t)


def _draft(masked: torch.Tensor, x0: torch.Tensor, p: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
    """M2T: which masked positions of the active block to fill (bool, like `masked`)."""
    take = masked & (p > cfg.threshold)
    n_masked = int(masked.sum())
    if n_masked and int(take.sum()) < cfg.num_to_transfer:
        conf = torch.where(masked, p, torch.full_like(p, -torch.inf))
        take = torch.zeros_like(masked)
        take[conf.topk(min(cfg.num_to_transfer, n_masked)).indices] = True
    return take


def _edit(editable: torch.Tensor, current: torch.Tensor, x0: torch.Tensor, p: torch.Tensor,
          cfg: DecodeConfig) -> torch.Tensor:
    """T2T: which written positions to replace (editing_threshold 0.0 = every changed token)."""
    if cfg.editing_threshold is None:
        return torch.zeros_like(editable)
    return editable & (x0 != current) & (p > cfg.editing_threshold)


def _step(run: _Run, block: int, lo: int, block_step: int) -> StepRecord:
    """One decode forward over window [lo, end of `block`); applies drafts and edits to run.x."""
    cfg, B = run.cfg, run.cfg.block_length
    a0, hi = block * B, (block + 1) * B
    t = time.perf_counter()
    current = run.x[0, lo:hi].clone()  # (W,)
    masked = current == run.mask_id
    logits = run.forward(lo, hi, groups_hi=lo // B)  # (W, V)
    x0, p = sample_tokens(logits, cfg.temperature, cfg.top_k, cfg.top_p, run.generator)
    pos = torch.arange(lo, hi, device=current.device)
    in_active = pos >= a0
    drafted = torch.zeros_like(masked)
    drafted[in_active] = _draft(masked[in_active], x0[in_active], p[in_active], cfg)
    changed = _edit(~masked & (pos >= run.P), current, x0, p, cfg)
    change = drafted | changed
    run.x[0, lo:hi] = torch.where(change, x0, current)
    run.decode_forwards += 1
    seconds = time.perf_counter() - t
    return _decode_record(run, block, lo, block_step, current, masked, drafted, changed, in_active, x0, p, seconds)


def _decode_record(run, block, lo, block_step, current, masked, drafted, changed, in_active, x0, p, seconds):
    cfg, B = run.cfg, run.cfg.block_length
    idx = lambda m: (torch.nonzero(m).flatten() + lo).tolist()  # noqa: E731 - positions of a mask
    edited, mbe_edited = idx(changed & in_active), idx(changed & ~in_active)
    prev = current.tolist()
    return StepRecord(
        kind="decode", phase="draft" if bool(masked[in_active].any()) else "verify",
        step=run.decode_forwards, block=block, block_step=block_step, prompt_length=run.P,
        window=(lo, (block + 1) * B), active=(block * B, (block + 1) * B), tokens=run.x[0].tolist(),
        active_before=prev[-B:], drafted=idx(drafted), edited=edited, mbe_edited=mbe_edited,
        previous={q: prev[q - lo] for q in edited + mbe_edited}, guesses=x0.tolist(), confidence=p.tolist(),
        threshold=cfg.threshold, editing_threshold=cfg.editing_threshold, seconds=seconds,
        elapsed=time.perf_counter() - run.t0, decode_forwards=run.decode_forwards,
        cache_forwards=run.cache_forwards, output_length=run.output_length())


def _decode_block(run: _Run, block: int) -> Iterator[StepRecord]:
    """The official per-block loop; yields each decode forward's record."""
    cfg, B = run.cfg, run.cfg.block_length
    lo = max(run.first, block - cfg.mbe_window) * B if cfg.mbe else block * B
    yield from _fill_cache(run, lo, "prefill" if run.decode_forwards == 0 else "refresh", block)
    post, block_step, saw_final = 0, 0, False
    while True:
        if not bool((run.x[0, block * B:(block + 1) * B] == run.mask_id).any()):
            post += 1
        if post > cfg.max_post_steps:
            break
        block_step += 1
        rec = _step(run, block, lo, block_step)
        yield rec
        if rec.phase == "verify" and not rec.edited and not rec.mbe_edited:
            saw_final = True
            break
    if run.cache is not None and saw_final and not cfg.mbe:
        run.cache.commit((block + 1) * B)  # the last forward saw the final tokens: its K/V are exact


def _eos_stop(run: _Run, block: int) -> bool:
    gen = run.x[0, run.P:(block + 1) * run.cfg.block_length]
    return bool(run.cfg.eos_early_stop and not (gen == run.mask_id).any() and (gen == run.eos_id).any())


def decode(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int) -> Iterator[StepRecord]:
    """Decode `prompt_ids`, yielding a StepRecord for every forward (decode and cache)."""
    _check_prompt(model, prompt_ids, cfg)
    run = _Run(model, list(prompt_ids), cfg, mask_id, eos_id)
    with torch.inference_mode():
        for block in range(run.first, run.n_blocks):
            yield from _decode_block(run, block)
            if block + 1 < run.n_blocks and _eos_stop(run, block):
                break


def _check_prompt(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig) -> None:
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: give at least one token")
    vocab = model.config.vocab_size
    bad = [t for t in prompt_ids if not 0 <= int(t) < vocab]
    if bad:
        raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab})")
    total = math.ceil((len(prompt_ids) + cfg.gen_length) / cfg.block_length) * cfg.block_length
    limit = model.config.max_position_embeddings
    if total > limit:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) + gen_length ({cfg.gen_length}), padded to whole "
                         f"blocks of {cfg.block_length}, needs {total} positions; the model allows {limit}")


def generate(model: LLaDA2MoE, prompt_ids: list[int], cfg: DecodeConfig, mask_id: int, eos_id: int) -> GenerateResult:
    """Drain `decode` and summarise the run."""
    t0 = time.perf_counter()
    records = list(decode(model, prompt_ids, cfg, mask_id, eos_id))
    seconds = time.perf_counter() - t0
    decodes = [r for r in records if r.kind == "decode"]
    final = records[-1].tokens
    return GenerateResult(
        prompt_ids=list(prompt_ids),
        output_ids=output_ids(final, len(prompt_ids), cfg.gen_length, mask_id, eos_id),
        num_decode_forwards=len(decodes), num_cache_forwards=len(records) - len(decodes),
        block_states_before_each_forward=[r.active_before for r in decodes],
        drafts=sum(len(r.drafted) for r in decodes), edits=sum(len(r.edited) for r in decodes),
        mbe_edits=sum(len(r.mbe_edited) for r in decodes), seconds=seconds, records=records)
