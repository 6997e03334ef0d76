"""The two validated configurations: the model's (`ModelConfig`) and a decoding run's (`DecodeConfig`).

`ModelConfig.from_dict` reads a real checkpoint's config.json the way the public LLaDA2 reference code
does: a key it leaves out takes the reference's default (`REFERENCE_DEFAULTS`, e.g. `use_bias` true,
`partial_rotary_factor` 0.5), every key that changes the computation is either honoured or refused
(`FIXED`: values this engine does not implement, with the reason), and keys without effect at
inference (dropouts, `auto_map`, `use_cache`, ...) are ignored. Every value is type-checked before it
is used, so a broken config raises `ConfigError` naming the file and the key, never a ZeroDivisionError.
Real sizes (LLaDA2.1-mini): hidden 2048, 20 layers, 16/4 heads of 128, 256 experts top-8 in 8 groups
(4 kept), expert width 512, one shared expert, vocabulary 157184.

The model version (`ModelConfig.version`, "2.1" or "2.2") is read from the routing the config asks for,
as the LLaDA2.2 reference dispatches: a positive `expert_capacity` means LLaDA2.2 block routing (each
routing block of `block_size` tokens, 32, may use the `expert_capacity` experts, 48 of 256, that score
best anywhere in it; `llada.model.block_topk`), an absent or zero one the 2.1 group-limited top-k. A
2.2 config must then name its edit tokens (`delete_token_id` 156930, `split_token_id` 156931) and may
name its stop ids (`eos_token_id`, a list: 156892 and 156900, `<|role_end|>`; the LLaDA2.2 pair when
absent and inside the vocabulary). Its grouped-routing keys (`n_group`, `topk_group`) are read and
type-checked but do not take part: block routing replaces group-limited selection, and the reference
ignores them too, so they are accepted rather than refused (they ship in the real config). The 2.2 keys
in a config without `expert_capacity` are refused: a half-2.2 config says something this engine would
silently not do.

`DecodeConfig` holds the settings of one run (thresholds, lengths, MBE, cache, sampling, the step rule and
the Levenshtein rule's schedule, post-step count and escape) and raises
`ValueError` naming the setting and its allowed range; named presets live in `llada.presets`.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

MODEL_TYPE = "llada2_moe"
MAX_TEMPERATURE = 10.0  # beyond this sampling is uniform noise for any model
DTYPES = ("float32", "bfloat16", "float16")
RULES = ("joint", "levenshtein")  # the step rules: LLaDA2.1's draft-and-edit, LLaDA2.2's with deletes and inserts
POST_COUNTS = ("reset", "cumulative")  # `llada.rule.PostCount` values (docs/llada22.md)
ESCAPES = ("least_confident", "random")  # `llada.rule.Escape` values

# what the public reference (configuration_llada2_moe.py) assumes for a key that config.json leaves out
REFERENCE_DEFAULTS = {"use_bias": True, "use_qkv_bias": False, "use_qk_norm": True, "rms_norm_eps": 1e-5,
                      "max_position_embeddings": 16384, "rope_theta": 10000.0, "n_group": 8, "topk_group": 4,
                      "routed_scaling_factor": 2.5, "partial_rotary_factor": 0.5, "first_k_dense_replace": 0,
                      "num_shared_experts": 0, "tie_word_embeddings": False, "moe_router_enable_expert_bias": True}

# keys that change the computation but that this engine implements for one value only: (allowed, why)
FIXED = {
    "hidden_act": (("silu",), "the experts and dense layers are SwiGLU"),
    "norm_head": ((False,), "a normalised lm_head is not part of LLaDA2.x"),
    "score_function": (("sigmoid",), "the router scores experts with a sigmoid"),
    "norm_topk_prob": ((True,), "the router renormalises the chosen experts' weights"),
    "router_dtype": (("fp32",), "the router runs in fp32"),
    "use_sliding_window": ((False,), "attention is block-causal over the whole sequence"),
    "use_rmsnorm": ((True,), "every norm is an RMSNorm"),
}
LLADA22_STOP_IDS = (156892, 156900)  # <|endoftext|> and <|role_end|>: where a LLaDA2.2 answer ends
KEYS_22 = ("delete_token_id", "split_token_id", "block_size")  # meaningful only beside expert_capacity > 0
ROPE_TYPES = ("default",)  # rope_scaling: null, or a dict whose rope_type / type is one of these


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
    use_bias: bool = False  # attention.dense has a bias (the reference's default when the key is absent: true)
    use_qkv_bias: bool = False  # attention.query_key_value has a bias
    moe_router_enable_expert_bias: bool = True  # the router has an expert_bias that steers the selection
    expert_capacity: int = 0  # LLaDA2.2: experts a routing block may use (0: 2.1 group-limited routing)
    routing_block: int = 32  # LLaDA2.2: tokens of one routing block (config.json's `block_size`)
    delete_token_id: int | None = None  # LLaDA2.2: the token that deletes its position
    split_token_id: int | None = None  # LLaDA2.2: the token that inserts a mask before its position's token
    stop_token_ids: tuple[int, ...] = ()  # config.json's eos_token_id (an id or a list), the stop set
    dtype: str | None = None  # the dtype the weights were saved in ("bfloat16" for LLaDA2.1)
    model_type: str = MODEL_TYPE

    def __post_init__(self) -> None:
        _check_types(self)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
            if self.head_dim < 1:
                raise ConfigError(f"config key 'hidden_size' ({self.hidden_size}) is smaller than "
                                  f"num_attention_heads ({self.num_attention_heads}): give head_dim")
        self._validate()

    def _validate(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                              f"num_key_value_heads ({self.num_key_value_heads})")
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}")
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ConfigError(f"rotary dim head_dim*partial_rotary_factor = {self.rotary_dim} must be even and >= 2")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ConfigError(f"config key 'dtype' must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.has_moe:
            self._validate_block_routing() if self.block_routing else self._validate_moe()
        self._validate_ids()

    def _validate_block_routing(self) -> None:
        K, C, E = self.num_experts_per_tok, self.expert_capacity, self.num_experts
        if C < K:
            raise ConfigError(f"expert_capacity ({C}) is smaller than num_experts_per_tok ({K}): each token picks "
                              f"its {K} experts among the {C} its routing block may use")
        if C > E:
            raise ConfigError(f"expert_capacity ({C}) is larger than num_experts ({E})")

    def _validate_ids(self) -> None:
        edits = {"delete_token_id": self.delete_token_id, "split_token_id": self.split_token_id}
        if self.block_routing:
            missing = [k for k, v in edits.items() if v is None]
            if missing:
                raise ConfigError(f"a LLaDA2.2 config (expert_capacity {self.expert_capacity}) needs "
                                  f"{' and '.join(missing)} (the edit tokens its decoding writes)")
            if self.delete_token_id == self.split_token_id:
                raise ConfigError(f"delete_token_id and split_token_id are both {self.delete_token_id}")
        for key, value in [*edits.items(), *(("eos_token_id", t) for t in self.stop_token_ids)]:
            if value is not None and not 0 <= value < self.vocab_size:
                raise ConfigError(f"config key '{key}' ({value}) is outside the vocabulary [0, {self.vocab_size})")

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
    def block_routing(self) -> bool:
        """LLaDA2.2's block routing (a positive expert_capacity) instead of 2.1's group-limited top-k."""
        return self.expert_capacity > 0

    @property
    def version(self) -> str:
        """"2.2" for a block-routing config, "2.1" otherwise (see the module docstring)."""
        return "2.2" if self.block_routing else "2.1"

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def has_moe(self) -> bool:
        return self.num_hidden_layers > self.first_k_dense_replace

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_k_dense_replace

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by part, from the sizes alone (exact Python ints, nothing is allocated)."""
        H, D, L = self.hidden_size, self.head_dim, self.num_hidden_layers
        moe = max(L - self.first_k_dense_replace, 0)
        qkv = (self.num_attention_heads + 2 * self.num_key_value_heads) * D
        attention = H * qkv + self.num_attention_heads * D * H + qkv * self.use_qkv_bias + H * self.use_bias
        return {"embeddings": self.vocab_size * H,
                "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * H,
                "attention": L * (attention + 2 * D * self.use_qk_norm + 2 * H) + H,
                "dense_mlp": (L - moe) * 3 * H * self.intermediate_size,
                "routed_experts": moe * self.num_experts * 3 * H * self.moe_intermediate_size,
                "shared_experts": moe * 3 * H * self.moe_intermediate_size * self.num_shared_experts,
                "router": moe * self.num_experts * (H + self.moe_router_enable_expert_bias)}

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
        _check_fixed(raw, source)
        values = REFERENCE_DEFAULTS | {k: v for k, v in raw.items() if k in known and v is not None}
        values["dtype"] = raw.get("dtype") or raw.get("torch_dtype")
        try:
            values |= _version_22(raw)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
        try:
            return cls(**values)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        return cls.from_dict(read_json(path), source=str(path))

    def to_dict(self) -> dict:
        """Every key the public reference code reads, so that it loads what this engine writes."""
        out = asdict(self)
        out |= {key: allowed[0] for key, (allowed, _) in FIXED.items()}
        out |= {"rope_scaling": None, "architectures": ["LLaDA2MoeModelLM"]}
        if self.dtype is None:
            del out["dtype"]
        routing_block, stops = out.pop("routing_block"), out.pop("stop_token_ids")
        out |= {"eos_token_id": list(stops)} if stops else {}
        if self.block_routing:
            out["block_size"] = routing_block
        else:
            for key in ("expert_capacity", "delete_token_id", "split_token_id"):
                del out[key]
        return out


def _version_22(raw: dict) -> dict:
    """The LLaDA2.2 values of a raw config: routing block, stop ids (see the module docstring)."""
    capacity = raw.get("expert_capacity") or 0
    out = {"expert_capacity": capacity}
    if capacity == 0:
        stray = [k for k in KEYS_22 if raw.get(k) is not None]
        if stray:
            raise ConfigError(f"config key(s) {', '.join(stray)} belong to LLaDA2.2, but expert_capacity is absent "
                              "or 0 (LLaDA2.1 routing): give expert_capacity or remove them")
    elif raw.get("block_size") is not None:
        out["routing_block"] = raw["block_size"]
    stops = raw.get("eos_token_id")
    stops = [stops] if isinstance(stops, int) and not isinstance(stops, bool) else stops
    if stops is not None and (not isinstance(stops, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in stops)):
        raise ConfigError(f"config key 'eos_token_id' must be a token id or a list of them, got {stops!r}")
    vocab = raw.get("vocab_size")
    if stops is None and capacity and isinstance(vocab, int) and max(LLADA22_STOP_IDS) < vocab:
        stops = list(LLADA22_STOP_IDS)
    return out | {"stop_token_ids": tuple(stops or ())}


def read_json(path: str | Path) -> dict:
    """A config file as a dict; ConfigError naming the file when it is missing, not JSON or not an object."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found (a model directory needs config.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return raw


_POSITIVE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "moe_intermediate_size", "num_experts", "num_experts_per_tok",
             "max_position_embeddings", "n_group", "topk_group")
_NON_NEGATIVE = ("first_k_dense_replace", "num_shared_experts", "expert_capacity")
_FLOATS = ("partial_rotary_factor", "rope_theta", "routed_scaling_factor", "rms_norm_eps")
_BOOLS = ("use_qk_norm", "tie_word_embeddings", "use_bias", "use_qkv_bias", "moe_router_enable_expert_bias")


def _check_types(cfg: ModelConfig) -> None:
    """Every value has its type and sign before any arithmetic uses it."""
    for key in _POSITIVE + ("head_dim",) * (cfg.head_dim is not None):
        _check_int(f"config key '{key}'", getattr(cfg, key), 1, ConfigError)
    for key in _NON_NEGATIVE:
        _check_int(f"config key '{key}'", getattr(cfg, key), 0, ConfigError)
    for key in _FLOATS:
        value = getattr(cfg, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"config key '{key}' must be a positive finite number, got {value!r}")
    for key in _BOOLS:
        if not isinstance(getattr(cfg, key), bool):
            raise ConfigError(f"config key '{key}' must be true or false, got {getattr(cfg, key)!r}")
    _check_int("config key 'block_size' (the routing block, tokens)", cfg.routing_block, 1, ConfigError)
    for key in ("delete_token_id", "split_token_id"):
        if getattr(cfg, key) is not None:
            _check_int(f"config key '{key}'", getattr(cfg, key), 0, ConfigError)


def _check_fixed(raw: dict, source: str) -> None:
    """Refuse a key whose value changes the computation in a way this engine does not implement."""
    for key, (allowed, why) in FIXED.items():
        if key in raw and raw[key] is not None and not any(raw[key] == a and type(raw[key]) is type(a)
                                                          for a in allowed):
            raise ConfigError(f"{source}: config key '{key}' is {raw[key]!r}; this engine supports only "
                              f"{' or '.join(json.dumps(a) for a in allowed)} ({why})")
    scaling = raw.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if kind not in ROPE_TYPES:
            raise ConfigError(f"{source}: config key 'rope_scaling' is {scaling!r}; this engine supports only "
                              f"null or rope_type 'default' (plain RoPE with rope_theta)")


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
    rule: str | None = None  # "joint" (2.1) or "levenshtein" (2.2); None: the checkpoint's own (`llada.decide`)
    steps: int = 32  # Levenshtein: the schedule spreads a block's entry masks over this many steps
    post_count: str = "reset"  # Levenshtein: post-steps while an original mask is back: "reset" or "cumulative"
    escape: str = "least_confident"  # Levenshtein anti-loop escape: "least_confident" or "random" (seeded)

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
        _check_int("steps", self.steps, 1)
        for name, allowed in (("rule", RULES + (None,)), ("post_count", POST_COUNTS), ("escape", ESCAPES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {getattr(self, name)!r}")

    def with_(self, **changes) -> "DecodeConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_range(name: str, value, low: float, high: float, low_open: bool = False) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}")


def _check_int(name: str, value, low: int, error: type[Exception] = ValueError) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise error(f"{name} must be {kind}, got {value!r}")


def padded_length(prompt_length: int, gen_length: int, block_length: int) -> int:
    """Positions of a run: prompt + gen_length, rounded up to whole blocks counted from position 0."""
    return -(-(prompt_length + gen_length) // block_length) * block_length
