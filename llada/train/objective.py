"""The LLaDA2.1 training objective: draft (M2T) and edit (T2T) under the block-causal layout.

Layout. A batch of sequences x (N, L) is cut into blocks of B tokens from position 0, as the decoder
cuts it. The model reads the clean sequence and a noisy copy side by side, 2L tokens whose RoPE
positions repeat 0..L-1, under a mask that reproduces what the decoder sees:

                 keys: clean block j        noisy block j
    clean  i     j <= i  (block-causal)     never
    noisy  i     j <  i  (finished blocks)  j == i  (the active block, bidirectional)

so one forward trains every block at once, each as the active block of a decoding run whose earlier
blocks are final. Loss is read only at noisy positions of the generated part (after the prompt).

Noise. Each (sequence, block) draws a level t ~ U(0, 1]; each generated token is masked with
probability t (M2T: learn the original under `<|mask|>`). In a T2T sequence, some of the unmasked
tokens are also replaced by a wrong but plausible token (another token of the same answer, sometimes
any token): the model learns to restore them while keeping the correct ones, which is what the
editing rule (argmax differs from the current token) needs. Multi-turn forward goes one step further:
the model drafts the masks itself (no gradient), and learns to repair its own draft.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model import LLaDA2MoE


@dataclass(frozen=True)
class NoiseConfig:
    t2t_prob: float = 0.5  # fraction of sequences that also get wrong tokens
    max_replace: float = 0.3  # in a T2T sequence, up to this fraction of unmasked tokens is replaced
    uniform_replace: float = 0.2  # share of replacements drawn from the whole vocabulary
    keep_weight: float = 0.5  # loss weight of tokens that were left untouched
    min_t: float = 0.05


@dataclass
class Batch:
    ids: torch.Tensor  # (N, L) clean tokens, EOS-padded
    prompt_len: torch.Tensor  # (N,) tokens of prompt at the start of each row
    answer_len: torch.Tensor  # (N,) generated tokens that carry content (answer + first EOS)
    segment: torch.Tensor | None = None  # (N, L) packed rows: which item each position belongs to
    gen: torch.Tensor | None = None  # bool (N, L) packed rows: generated positions (every item's answer)

    def generated(self) -> torch.Tensor:
        """bool (N, L): positions after the prompt (of their own item, in a packed row)."""
        if self.gen is not None:
            return self.gen
        pos = torch.arange(self.ids.shape[1], device=self.ids.device)
        return pos[None, :] >= self.prompt_len[:, None]

    def to(self, device) -> "Batch":
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Batch(*(move(t) for t in (self.ids, self.prompt_len, self.answer_len, self.segment, self.gen)))


def layout_mask(length: int, block: int, device=None) -> torch.Tensor:
    """bool (2L, 2L) attention mask of the [clean ; noisy] layout (True = may attend)."""
    blk = torch.arange(length, device=device) // block  # (L,)
    qb, kb = blk[:, None], blk[None, :]
    top = torch.cat([kb <= qb, torch.zeros(length, length, dtype=torch.bool, device=device)], dim=1)
    bottom = torch.cat([kb < qb, kb == qb], dim=1)
    return torch.cat([top, bottom], dim=0)


def packed_layout_mask(segment: torch.Tensor, block: int) -> torch.Tensor:
    """bool (N, 1, 2L, 2L): the layout mask, and a position sees only its own item of a packed row.

    Items start on block boundaries (`data.packed_rows`), so their blocks are the row's blocks, and
    RoPE depends only on distances, so an item reads exactly as it would at the start of a row."""
    N, L = segment.shape
    seg = torch.cat([segment, segment], dim=1)  # (N, 2L)
    same = seg[:, :, None] == seg[:, None, :]  # (N, 2L, 2L)
    return (layout_mask(L, block, segment.device)[None] & same)[:, None]


def layout_positions(length: int, device=None) -> torch.Tensor:
    """(2L,) RoPE positions: the noisy copy reuses the clean positions."""
    pos = torch.arange(length, device=device)
    return torch.cat([pos, pos])


def _plausible_tokens(batch: Batch, gen: torch.Tensor, vocab: int, mask_id: int, cfg: NoiseConfig,
                      gen_rng: torch.Generator) -> torch.Tensor:
    """(N, L) wrong-but-plausible replacements: mostly another token of the same answer."""
    N, L = batch.ids.shape
    u = torch.rand(N, L, generator=gen_rng, device=batch.ids.device)
    span = batch.answer_len.clamp(min=1)[:, None].float()
    src = batch.prompt_len[:, None] + (u * span).long()  # a position inside the row's answer
    same_answer = batch.ids.gather(1, src.clamp(max=L - 1))
    uniform = torch.randint(0, vocab, (N, L), generator=gen_rng, device=batch.ids.device)
    uniform = torch.where(uniform == mask_id, (uniform + 1) % vocab, uniform)
    pick_uniform = torch.rand(N, L, generator=gen_rng, device=batch.ids.device) < cfg.uniform_replace
    return torch.where(pick_uniform, uniform, same_answer)


def corrupt(batch: Batch, block: int, mask_id: int, vocab: int, cfg: NoiseConfig,
            gen_rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Noisy copy (N, L), and bool (N, L) masks of masked and replaced positions."""
    ids, gen = batch.ids, batch.generated()
    N, L = ids.shape
    dev = ids.device
    t = torch.rand(N, L // block, generator=gen_rng, device=dev).repeat_interleave(block, dim=1)
    t = cfg.min_t + (1 - cfg.min_t) * t  # (N, L) per-block noise level
    masked = gen & (torch.rand(N, L, generator=gen_rng, device=dev) < t)
    t2t = torch.rand(N, 1, generator=gen_rng, device=dev) < cfg.t2t_prob
    rate = torch.rand(N, 1, generator=gen_rng, device=dev) * cfg.max_replace
    replaced = gen & ~masked & t2t & (torch.rand(N, L, generator=gen_rng, device=dev) < rate)
    wrong = _plausible_tokens(batch, gen, vocab, mask_id, cfg, gen_rng)
    replaced &= wrong != ids
    noisy = torch.where(masked, torch.full_like(ids, mask_id), torch.where(replaced, wrong, ids))
    return noisy, masked, replaced


def noisy_logits(model: LLaDA2MoE, clean: torch.Tensor, noisy: torch.Tensor, block: int,
                 segment: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 logits (N, L, V) of the noisy copy under the [clean ; noisy] block layout (per item if packed)."""
    N, L = clean.shape
    mask = layout_mask(L, block, clean.device) if segment is None else packed_layout_mask(segment, block)
    hidden = model(torch.cat([clean, noisy], dim=1), mask=mask, positions=layout_positions(L, clean.device),
                   hidden_only=True)  # (N, 2L, H)
    return model.lm_head(hidden[:, L:]).float()


@torch.no_grad()
def self_draft(model: LLaDA2MoE, clean: torch.Tensor, noisy: torch.Tensor, masked: torch.Tensor,
               block: int, gen_rng: torch.Generator,
               segment: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn forward: fill masks with the model's own argmax where p > a random threshold.

    Returns the drafted copy and bool (N, L) of positions still masked."""
    was_training = model.training
    model.eval()
    with torch.compiler.set_stance("force_eager"):  # compiled layers run eagerly here: no extra graph variants
        probs = torch.softmax(noisy_logits(model, clean, noisy, block, segment), dim=-1)
    model.train(was_training)
    p, x0 = probs.max(dim=-1)  # (N, L)
    tau = torch.rand(clean.shape[0], 1, generator=gen_rng, device=clean.device)
    fill = masked & (p > tau)
    return torch.where(fill, x0, noisy), masked & ~fill


def diffusion_loss(model: LLaDA2MoE, batch: Batch, block: int, mask_id: int, cfg: NoiseConfig,
                   gen_rng: torch.Generator, multi_turn: bool = False) -> torch.Tensor:
    """Weighted cross-entropy of the originals at the noisy generated positions."""
    noisy, masked, replaced = corrupt(batch, block, mask_id, model.config.vocab_size, cfg, gen_rng)
    if multi_turn:
        noisy, masked = self_draft(model, batch.ids, noisy, masked, block, gen_rng, batch.segment)
        replaced = (noisy != batch.ids) & ~masked
    logits = noisy_logits(model, batch.ids, noisy, block, batch.segment)  # (N, L, V)
    ce = F.cross_entropy(logits.transpose(1, 2), batch.ids, reduction="none")  # (N, L)
    gen = batch.generated()
    weight = torch.where(masked | replaced, 1.0, cfg.keep_weight) * gen
    return (ce * weight).sum() / weight.sum().clamp(min=1.0)
