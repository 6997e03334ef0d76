"""A loaded model ready to decode: weights, tokenizer, special token ids and the model's presets.

    pipe = Pipeline.load("assets/model")
    ids = pipe.encode("def fibonacci(n):")
    trace = pipe.new_trace(ids, pipe.config("S", gen_length=64))
    for record in trace.follow(pipe.stream(ids, trace.settings)):   # one StepRecord per forward
        ...
    trace = pipe.generate(ids, pipe.config("Q", mbe=True))           # the finished Trace
    trace = pipe.generate(ids, pipe.config("S"), pokes=[Poke(step=3, pos=0, token=pipe.poke_token("mask"))])
    traces = pipe.generate_batch([ids, other], [pipe.config("S"), pipe.config("Q")])  # rows share forwards
    for row, record in pipe.stream_batch([ids, other], pipe.config("S")):            # (row, StepRecord)
        ...

A batch runs its rows together (`llada.decode`): every row's trace is the one it gets alone.

Modes come from `llada.presets`: the official table, overridden by the model's own presets.json;
a named mode sets the settings it names and explicit settings override them (`config`).

Special ids, first found wins: an explicit argument; the tokenizer's declared tokens (mask token,
EOS token); generation_config.json; config.json (`mask_token_id`; `eos_token_id`, then
`pad_token_id`, which LLaDA2.x sets to EOS); then the documented LLaDA2.x ids (mask 156895, EOS
156892) with a `DefaultIdWarning`. An id that is not an integer inside the vocabulary is a
`CheckpointError` naming where it came from; nothing falls back silently. A LLaDA2.2 directory's edit,
mask and stop ids must also be its tokenizer's tokens (`llada.weights.token_ids`).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch

from .weights import hub
from .weights.checkpoint import CheckpointError, load_model, read_config
from .config import DecodeConfig
from .decode import check_configs, decode_batch, generate_batch
from .decode import decode, generate
from .fast.engine import EngineReport, use_engine
from .model import LLaDA2MoE
from .presets import PresetError, load_presets, merged, resolve
from .weights.token_ids import DeclaredId, check_token_ids
from .weights.tokenizer import Tokenizer, load_tokenizer
from .trace import Poke, StepRecord, Trace

MASK_TEXT, EOS_TEXT = "[MASK]", "<|endoftext|>"
LLADA2_IDS = {"mask": 156895, "EOS": 156892}  # the LLaDA2.x tokenizer's <|mask|> and <|endoftext|> (model card)
GENERATION_CONFIG = "generation_config.json"


class DefaultIdWarning(UserWarning):
    """A special id was taken from the LLaDA2.x defaults because the directory names none."""


@dataclass
class Pipeline:
    model: LLaDA2MoE
    tokenizer: Tokenizer | None
    mask_id: int
    eos_id: int
    presets: dict[str, dict] = field(default_factory=lambda: merged({}))
    name: str = "model"
    path: Path | None = None
    engine: EngineReport | None = None  # which MoE engine runs and why (`llada.fast.engine`)

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype | None = None, device: str = "cpu",
             mask_id: int | None = None, eos_id: int | None = None, quantize: str | None = None,
             progress: bool = False, engine: str = "auto", decode_check: bool = True, ranks=None) -> "Pipeline":
        """path: a model directory, or a Hugging Face repo id (`inclusionAI/LLaDA2.1-mini`), downloaded into the
        hub cache first (`llada.weights.hub`). dtype None: the checkpoint's on CUDA, fp32 on the CPU for small
        models, bf16 with int8 weights (`llada.weights.memory`).

        quantize: None, "fp8" (routed experts, quantized while loading), "fp8-dense" (also the dense linears),
        "int8" (CPU: experts and linear layers, `llada.fast.int8`) or "auto" (int8 on a CPU where only it fits).
        engine: "auto", "fast" or "reference" (`llada.fast.engine.use_engine`; its report is `pipe.engine`);
        decode_check=False skips its decode check (random weights, where logits tie everywhere).
        ranks: this process's `llada.dist.group.Ranks` when the routed experts are split across ranks (torchrun,
        docs/distributed.md); they run on the reference engine, and rank 0's decisions are every rank's."""
        root = hub.model_path(path, progress)
        config, raw = read_config(root)  # the config's errors come first, before any weight is read
        try:
            presets = load_presets(root, config.version)  # a 2.2 model's official modes are 2.2's
        except PresetError as err:
            raise CheckpointError(str(err)) from None
        tokenizer = load_tokenizer(root)
        vocab = raw["vocab_size"]
        mask = special_id("mask", mask_id, root, raw, tokenizer, vocab)
        eos = special_id("EOS", eos_id, root, raw, tokenizer, vocab)
        if mask == eos:
            raise CheckpointError(f"{root}: the mask id and the EOS id are both {mask}; they must differ")
        declared = [] if mask_id is not None else declared_masks(root, raw)  # an explicit mask id overrides them
        check_token_ids(config, root, tokenizer, mask, declared)  # a 2.2 model's ids are its tokenizer's tokens
        if ranks is not None and engine == "fast":
            raise ValueError("the fast engine's fused experts hold every expert; across ranks use engine 'reference'")
        engine = "reference" if ranks is not None else engine
        model = load_model(root, dtype=dtype, device=device, quantize=quantize, progress=progress, ranks=ranks)
        report = use_engine(model, engine, ids=(mask, eos), decode=generate if decode_check else None)
        name = str(path) if hub.is_repo_id(str(path)) else root.name  # a hub snapshot's folder is a commit hash
        pipe = cls(model, tokenizer, mask, eos, presets, raw.get("name", name), root)
        pipe.engine = report
        return pipe

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

    def poke_token(self, text: str) -> int:
        """The token id a poke writes: `mask`, `#ID`, or a text that is exactly one token (ValueError otherwise)."""
        if text == "mask":
            return self.mask_id
        if text.startswith("#"):
            try:
                token = int(text[1:])
            except ValueError:
                raise ValueError(f"poke token {text!r} is not #ID with a whole number ID") from None
            vocab = self.model.config.vocab_size
            if not 0 <= token < vocab:
                raise ValueError(f"poke token id {token} is unknown: the vocabulary is [0, {vocab})")
            return token
        if self.tokenizer is None:
            raise ValueError(f"poke token {text!r}: {self.name} has no tokenizer, give #ID or mask")
        ids = self.tokenizer.encode(text, chat=False)
        if len(ids) != 1:
            raise ValueError(f"poke token {text!r} is {len(ids)} tokens, not one (give #ID for a token by its id)")
        return ids[0]

    def _special(self, token: int) -> str | None:
        return MASK_TEXT if token == self.mask_id else EOS_TEXT if token == self.eos_id else None

    def new_trace(self, prompt_ids: list[int], cfg: DecodeConfig, prompt: str = "", mode: str = "") -> Trace:
        """An empty Trace of a run of this model (fill it with `trace.follow(self.stream(...))`)."""
        return Trace(prompt_ids=list(prompt_ids), settings=cfg, mask_id=self.mask_id, eos_id=self.eos_id,
                     model=self.name, prompt=prompt, mode=mode, stop_ids=self.model.config.stop_token_ids)

    def stream(self, prompt_ids: list[int], cfg: DecodeConfig, pokes: Sequence[Poke] = ()) -> Iterator[StepRecord]:
        """The run's records, one per forward; bad settings, a prompt that does not fit or a bad poke raise here.

        `pokes` change the text between forwards (`llada.trace.Poke`; `poke_token` reads a token's text)."""
        return decode(self.model, prompt_ids, cfg, self.mask_id, self.eos_id, pokes=pokes)

    def generate(self, prompt_ids: list[int], cfg: DecodeConfig, prompt: str = "", mode: str = "",
                 pokes: Sequence[Poke] = ()) -> Trace:
        """Decode to the end; the finished Trace (with the output's text when the model has a tokenizer)."""
        trace = generate(self.model, prompt_ids, cfg, self.mask_id, self.eos_id,
                         self.new_trace(prompt_ids, cfg, prompt, mode), pokes=pokes)
        trace.text = self.decode_text(trace.output_ids) if self.tokenizer is not None else None
        return trace

    def stream_batch(self, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                     max_batch: int | None = None) -> Iterator[tuple[int, StepRecord]]:
        """(row, record) of every forward of every row, the rows sharing forwards (`max_batch` at once);
        bad settings or a prompt that does not fit raise here."""
        return decode_batch(self.model, prompts, configs, self.mask_id, self.eos_id, max_batch)

    def generate_batch(self, prompts: list[list[int]], configs: list[DecodeConfig] | DecodeConfig,
                       max_batch: int | None = None, texts: list[str] | None = None,
                       modes: list[str] | None = None, pokes: list[list[Poke]] | None = None) -> list[Trace]:
        """Decode every prompt, sharing forwards; the finished Traces in prompt order, each as `generate` gives
        (`pokes`: each prompt's own, one list per prompt; they stay in their row)."""
        configs = check_configs(prompts, configs)
        texts, modes = texts or [""] * len(prompts), modes or [""] * len(prompts)
        traces = [self.new_trace(ids, cfg, text, mode) for ids, cfg, text, mode in zip(prompts, configs, texts, modes)]
        generate_batch(self.model, prompts, configs, self.mask_id, self.eos_id, traces, max_batch, pokes)
        for trace in traces:
            trace.text = self.decode_text(trace.output_ids) if self.tokenizer is not None else None
        return traces


def special_id(kind: str, given: int | None, root: Path, raw: dict, tokenizer: Tokenizer | None, vocab: int) -> int:
    """The mask or EOS id of a directory (see the module docstring for the order)."""
    for source, value in _id_sources(kind, given, root, raw, tokenizer):
        if value is None:
            continue
        if isinstance(value, list) and value and kind == "EOS":
            value = value[0]  # several EOS ids: the decoder stops at the first one listed
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointError(f"{source}: the {kind} id must be an integer token id, got {value!r}")
        if not 0 <= value < vocab:
            raise CheckpointError(f"{source}: {kind} id {value} is outside the vocabulary [0, {vocab})")
        return value
    default = LLADA2_IDS[kind]
    if not 0 <= default < vocab:
        raise CheckpointError(f"{root}: no {kind} id: the directory names none (tokenizer, {GENERATION_CONFIG}, "
                              f"config.json) and the LLaDA2.x default {default} is outside the vocabulary "
                              f"[0, {vocab}); give it explicitly (--{kind.lower()}-id)")
    warnings.warn(f"{root}: no {kind} id in the tokenizer, {GENERATION_CONFIG} or config.json; "
                  f"using the LLaDA2.x default {default}", DefaultIdWarning, stacklevel=3)
    return default


def _id_sources(kind: str, given, root: Path, raw: dict, tokenizer: Tokenizer | None):
    """(where, value) pairs in priority order; value None when that source names nothing."""
    generation = _generation_config(root)
    yield f"{root}: the {kind} id given explicitly", given
    if kind == "mask":
        yield f"{root}: the tokenizer's mask token", tokenizer.mask_id if tokenizer else None
        yield f"{root / GENERATION_CONFIG}: mask_token_id", generation.get("mask_token_id")
        yield f"{root / 'config.json'}: mask_token_id", raw.get("mask_token_id")
    else:
        yield f"{root}: the tokenizer's EOS token", tokenizer.eos_id if tokenizer else None
        yield f"{root / GENERATION_CONFIG}: eos_token_id", generation.get("eos_token_id")
        yield f"{root / 'config.json'}: eos_token_id", raw.get("eos_token_id")
        yield f"{root / 'config.json'}: pad_token_id", raw.get("pad_token_id")


def declared_masks(root: Path, raw: dict) -> list[DeclaredId]:
    """The mask ids generation_config.json and config.json name (`mask_token_id`, where an integer)."""
    named = ((f"{root / GENERATION_CONFIG}: mask_token_id", _generation_config(root).get("mask_token_id")),
             (f"{root / 'config.json'}: mask_token_id", raw.get("mask_token_id")))
    return [DeclaredId(source, v) for source, v in named if isinstance(v, int) and not isinstance(v, bool)]


def _generation_config(root: Path) -> dict:
    path = root / GENERATION_CONFIG
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return raw
