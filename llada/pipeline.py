"""A loaded model ready to decode: weights, tokenizer, special token ids and the model's presets.

    pipe = Pipeline.load("assets/model")
    ids = pipe.encode("def fibonacci(n):")
    trace = pipe.new_trace(ids, pipe.config("S", gen_length=64))
    for record in trace.follow(pipe.stream(ids, trace.settings)):   # one StepRecord per forward
        ...
    trace = pipe.generate(ids, pipe.config("Q", mbe=True))           # the finished Trace

Modes come from `llada.presets`: the official table, overridden by the model's own presets.json;
a named mode sets the settings it names and explicit settings override them (`config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

from .checkpoint import CheckpointError, load_model
from .config import DecodeConfig
from .decode import decode, generate
from .model import LLaDA2MoE
from .presets import PresetError, load_presets, merged, resolve
from .tokenizer import Tokenizer, load_tokenizer
from .trace import StepRecord, Trace

MASK_TEXT, EOS_TEXT = "[MASK]", "<|endoftext|>"


@dataclass
class Pipeline:
    model: LLaDA2MoE
    tokenizer: Tokenizer | None
    mask_id: int
    eos_id: int
    presets: dict[str, dict] = field(default_factory=lambda: merged({}))
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
        try:
            presets = load_presets(root)
        except PresetError as err:
            raise CheckpointError(str(err)) from None
        return cls(model, tokenizer, mask, eos, presets, raw.get("name", root.name), root)

    def config(self, mode: str = "S", **explicit) -> DecodeConfig:
        """Decode settings of a mode of this model (S, Q, M2T, or its own), explicit settings on top."""
        return resolve(mode, self.presets, **explicit)

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
            return [self._special(t) or str(t) for t in ids]
        return [self._special(t) or s for t, s in zip(ids, self.tokenizer.pieces(ids))]

    def token_bytes(self, ids: list[int]) -> list[bytes | None]:
        """Raw bytes of every token where the tokenizer knows them (for joining split characters)."""
        return self.tokenizer.token_bytes(ids) if self.tokenizer is not None else [None] * len(ids)

    def _special(self, token: int) -> str | None:
        return MASK_TEXT if token == self.mask_id else EOS_TEXT if token == self.eos_id else None

    def new_trace(self, prompt_ids: list[int], cfg: DecodeConfig, prompt: str = "", mode: str = "") -> Trace:
        """An empty Trace of a run of this model (fill it with `trace.follow(self.stream(...))`)."""
        return Trace(prompt_ids=list(prompt_ids), settings=cfg, mask_id=self.mask_id, eos_id=self.eos_id,
                     model=self.name, prompt=prompt, mode=mode)

    def stream(self, prompt_ids: list[int], cfg: DecodeConfig) -> Iterator[StepRecord]:
        """The run's records, one per forward; bad settings or a prompt that does not fit raise here."""
        return decode(self.model, prompt_ids, cfg, self.mask_id, self.eos_id)

    def generate(self, prompt_ids: list[int], cfg: DecodeConfig, prompt: str = "", mode: str = "") -> Trace:
        """Decode to the end; the finished Trace (with the output's text when the model has a tokenizer)."""
        trace = generate(self.model, prompt_ids, cfg, self.mask_id, self.eos_id,
                         self.new_trace(prompt_ids, cfg, prompt, mode))
        trace.text = self.decode_text(trace.output_ids) if self.tokenizer is not None else None
        return trace


def _quantize(model: LLaDA2MoE, scheme: str) -> None:
    if scheme not in ("fp8", "fp8-dense"):
        raise ValueError(f"unknown quantization {scheme!r}; choose fp8 or fp8-dense")
    from .quantize import quantize_model_fp8  # imports the kernels only when asked for

    quantize_model_fp8(model, dense=scheme == "fp8-dense")


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
