"""The two validated configurations: the model's (`ModelConfig`) and a decoding run's (`DecodeConfig`).

`ModelConfig.from_dict` accepts a real checkpoint's config (extra keys are ignored) and raises
`ConfigError` naming the missing or invalid key. Real sizes (LLaDA2.1-mini): hidden 2048, 20 layers,
16/4 heads of 128, 256 experts top-8 in 8 groups (4 kept), expert width 512, one shared expert.

`DecodeConfig` holds the settings of one run (thresholds, lengths, MBE, cache, sampling) and raises
`ValueError` naming the setting and its allowed range; named presets live in `llada.presets`.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

MODEL_TYPE = "llada2_moe"
MAX_TEMPERATURE = 10.0  # beyond this sampling is uniform noise for any model


class ConfigError(ValueError):
    """A config.json that cannot describe a LLaDA2 MoE model."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    moe_intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    head_dim: int | None = None
    partial_rotary_factor: float = 1.0
    rope_theta: float = 10000.0
    first_k_dense_replace: int = 0
    n_group: int = 1
    topk_group: int = 1
    num_shared_experts: int = 0
    routed_scaling_factor: float = 1.0
    rms_norm_eps: float = 1e-6
    use_qk_norm: bool = True
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    model_type: str = MODEL_TYPE

    def __post_init__(self) -> None:
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        self._validate()

    def _validate(self) -> None:
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "max_position_embeddings")
        for key in positive:
            if int(getattr(self, key)) <= 0:
                raise ConfigError(f"config key '{key}' must be a positive integer, got {getattr(self, key)!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                              f"num_key_value_heads ({self.num_key_value_heads})")
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}")
        if self.rotary_dim % 2:
            raise ConfigError(f"rotary dim head_dim*partial_rotary_factor = {self.rotary_dim} must be even")
        if self.has_moe:
            self._validate_moe()

    def _validate_moe(self) -> None:
        if self.num_experts % self.n_group:
            raise ConfigError(f"num_experts ({self.num_experts}) must be divisible by n_group ({self.n_group})")
        if not 1 <= self.topk_group <= self.n_group:
            raise ConfigError(f"topk_group must be in [1, n_group={self.n_group}], got {self.topk_group}")
        if self.num_experts // self.n_group < 2:
            raise ConfigError("each expert group needs at least 2 experts (a group scores its two best)")
        kept = self.topk_group * (self.num_experts // self.n_group)
        if not 1 <= self.num_experts_per_tok <= kept:
            raise ConfigError(f"num_experts_per_tok must be in [1, {kept}] (experts in the kept groups), "
                              f"got {self.num_experts_per_tok}")

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def has_moe(self) -> bool:
        return self.num_hidden_layers > self.first_k_dense_replace

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_k_dense_replace

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config.json") -> "ModelConfig":
        if raw.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ConfigError(f"{source}: unknown model_type {raw.get('model_type')!r}; "
                              f"this engine loads '{MODEL_TYPE}' checkpoints")
        known = {f.name: f for f in fields(cls)}
        required = [n for n, f in known.items() if f.default is MISSING]
        missing = [n for n in required if raw.get(n) is None]
        if missing:
            raise ConfigError(f"{source}: missing required key(s) {', '.join(missing)}")
        values = {k: v for k, v in raw.items() if k in known and v is not None}
        if values.get("num_shared_experts") is None:
            values["num_shared_experts"] = 0
        try:
            return cls(**values)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{source}: invalid value ({err})") from None

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: file not found (a model directory needs config.json)") from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(raw, source=str(path))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["architectures"] = ["LLaDA2MoeModelLM"]
        return out


@dataclass(frozen=True)
class DecodeConfig:
    """Settings of one decoding run (official S mode by default; see `llada.presets` for the modes)."""

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
            _check_int(name, getattr(self, name), 1)
        _check_int("max_post_steps", self.max_post_steps, 0)
        for name in ("eos_early_stop", "use_cache", "mbe"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        _check_range("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        if self.top_k is not None:
            _check_int("top_k", self.top_k, 1)
        if self.top_p is not None:
            _check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        if self.seed is not None:
            _check_int("seed", self.seed, 0)

    def with_(self, **changes) -> "DecodeConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_range(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}")


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def padded_length(prompt_length: int, gen_length: int, block_length: int) -> int:
    """Positions of a run: prompt + gen_length, rounded up to whole blocks counted from position 0."""
    return -(-(prompt_length + gen_length) // block_length) * block_length
