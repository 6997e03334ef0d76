"""A loaded model ready to decode: weights, tokenizer, special token ids and the model's presets.

    pipe = Pipeline.load("assets/model")
    ids = pipe.encode("def fibonacci(n):")
    for record in pipe.stream(ids, pipe.config("S", gen_length=64)):
        ...
    result = pipe.generate(ids, pipe.config("Q"))

A model directory may ship `presets.json` ({"S": {"threshold": .., "editing_threshold": .., ...}, ...})
with modes tuned for it; otherwise the official LLaDA2.1 values apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from .checkpoint import CheckpointError, load_model
from .decode import PRESETS, DecodeConfig, GenerateResult, StepRecord, decode, generate
from .model import LLaDA2MoE
from .tokenizer import Tokenizer, load_tokenizer

PRESETS_FILE = "presets.json"


@dataclass
class Pipeline:
    model: LLaDA2MoE
    tokenizer: Tokenizer | None
    mask_id: int
    eos_id: int
    presets: dict[str, dict] = field(default_factory=lambda: dict(PRESETS))
    name: str = "model"
    path: Path | None = None

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu",
             mask_id: int | None = None, eos_id: int | None = None, quantize: str | None = None) -> "Pipeline":
        """quantize: None, "fp8" (routed experts) or "fp8-dense" (experts and the layers' linears)."""
        root = Path(path)
        model = load_model(root, dtype=dtype, device=device)
        if quantize:
            _quantize(model, quantize)
        tokenizer = load_tokenizer(root)
        raw = json.loads((root / "config.json").read_text())
        mask = mask_id if mask_id is not None else _mask_id(raw, tokenizer, model.config.vocab_size)
        eos = eos_id if eos_id is not None else _eos_id(raw, tokenizer, root)
        for name, value in (("mask id", mask), ("EOS id", eos)):
            if not 0 <= value < model.config.vocab_size:
                raise CheckpointError(f"{root}: {name} {value} is outside the vocabulary [0, {model.config.vocab_size})")
        return cls(model, tokenizer, mask, eos, load_presets(root), raw.get("name", root.name), root)

    def config(self, mode: str = "S", **overrides) -> DecodeConfig:
        """Decode settings of a mode (S, Q, M2T) of this model, with overrides."""
        return DecodeConfig.preset(mode, self.presets, **overrides)

    def encode(self, text: str, chat: bool | None = None) -> list[int]:
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no tokenizer: give token ids instead of text")
        return self.tokenizer.encode(text, chat=chat)

    def decode_text(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(ids)

    def token_texts(self, ids: list[int]) -> list[str]:
        """A display string for every token id (mask and EOS by name)."""
        if self.tokenizer is None:
            return [_special(t, self.mask_id, self.eos_id) or str(t) for t in ids]
        return [_special(t, self.mask_id, self.eos_id) or s for t, s in zip(ids, self.tokenizer.pieces(ids))]

    def stream(self, prompt_ids: list[int], cfg: DecodeConfig) -> Iterator[StepRecord]:
        return decode(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)

    def generate(self, prompt_ids: list[int], cfg: DecodeConfig) -> GenerateResult:
        return generate(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)


def _quantize(model: LLaDA2MoE, scheme: str) -> None:
    if scheme not in ("fp8", "fp8-dense"):
        raise ValueError(f"unknown quantization {scheme!r}; choose fp8 or fp8-dense")
    from .quantize import quantize_model_fp8  # imports the kernels only when asked for

    quantize_model_fp8(model, dense=scheme == "fp8-dense")


def _special(token: int, mask_id: int, eos_id: int) -> str | None:
    return "[MASK]" if token == mask_id else "<|endoftext|>" if token == eos_id else None


def _mask_id(raw: dict, tokenizer: Tokenizer | None, vocab: int) -> int:
    """config's mask_token_id, else the tokenizer's <|mask|>, else the last vocabulary id."""
    if raw.get("mask_token_id") is not None:
        return int(raw["mask_token_id"])
    if tokenizer is not None and tokenizer.mask_id is not None:
        return tokenizer.mask_id
    return vocab - 1


def _eos_id(raw: dict, tokenizer: Tokenizer | None, root: Path) -> int:
    for key in ("eos_token_id", "pad_token_id"):
        if isinstance(raw.get(key), int):
            return raw[key]
    if tokenizer is not None and tokenizer.eos_id is not None:
        return tokenizer.eos_id
    raise CheckpointError(f"{root / 'config.json'}: no eos_token_id or pad_token_id, and no tokenizer names EOS; "
                          "pass the EOS id explicitly")


def load_presets(root: Path) -> dict[str, dict]:
    """Official presets, overridden by the model's own `presets.json` when it has one."""
    path = root / PRESETS_FILE
    if not path.exists():
        return dict(PRESETS)
    try:
        table = json.loads(path.read_text())
        for name, values in table.items():
            DecodeConfig(**values)  # validates every preset
    except (json.JSONDecodeError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{path}: invalid presets ({err})") from None
    return dict(PRESETS) | {name.upper(): values for name, values in table.items()}
