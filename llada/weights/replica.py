"""A LLaDA2.1-mini or LLaDA2.2-mini replica in the real Hugging Face format, random weights, any size.

    python -m llada.weights.replica OUT [--shape tiny|load|mini] [--version 2.1|2.2] [--format bf16|int8]
                                    [--shard-mb N] [--seed S] [--pool-rows R]

writes what `inclusionAI/LLaDA2.1-mini` ships (or, with `--version 2.2`, `inclusionAI/LLaDA2.2-mini`),
scaled by `--shape` (`mini` is full size, ~32 GB):

* config.json — the published keys (model_type llada2_moe, the `auto_map` to remote code, use_bias
  false, norm_head false, norm_topk_prob true, score_function sigmoid, router_dtype fp32, rope_theta
  600000, partial_rotary_factor 0.5, pad_token_id 156892, dtype bfloat16, ...), the sizes of the shape;
  generation_config.json with the EOS / pad ids;
* model-0000k-of-0000n.safetensors + model.safetensors.index.json — bf16, sharded at `--shard-mb`,
  per-expert tensor names (`model.layers.N.mlp.experts.E.gate_proj.weight`, ...), written tensor by
  tensor so memory stays at one shard;
* tokenizer.json + tokenizer_config.json — a byte-level BPE padded to the real id range, with the
  special tokens after it (`<|endoftext|>` = 156892 = EOS, `<|mask|>` = 156895 = mask, the ids the
  model card documents; `<|startoftext|>`, `[CLS]`, `[gMASK]`, `<role>`, `</role>`, `<|role_end|>`
  beside them) and a chat template in the Ling format
  (`<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>...<|role_end|><role>ASSISTANT</role>`).

LLaDA2.2 (`--version 2.2`) is the same tensors under the same names; its config.json adds block routing
(`expert_capacity`: 48 of 256 experts at full size, the same share of the shape's experts, at least
1.5 x top-k; `block_size` 32), the edit tokens (`delete_token_id` 156930, `split_token_id` 156931) and the
stop ids (`eos_token_id` [156892, 156900]); its tokenizer holds `<|role_end|>` at 156900 and the edit
tokens `<|delete|>`, `<|split|>` at 156930 / 156931 (reserved fillers between; the real tokenizer's
names for the edit tokens are not public here), generation_config.json both stop ids.

`--format int8` writes the same weights (the same seed draws the same numbers in the same order) straight
in the int8 checkpoint format (`llada.weights.int8_format`): each tensor is drawn in bf16, quantized and
written at its place in shards laid out beforehand, so the full-size mini (~16 GB in int8) is written
holding one tensor, never its 32 GB bf16 form. The result is byte for byte what
`python -m llada.weights.int8_checkpoint` makes of the bf16 replica of the same seed.

Weights: N(0, 0.02), output projections N(0, 0.02 / sqrt(2 * layers)), norms 1, expert bias N(0, 1e-3):
a random model whose logits are finite in bf16, for tests and benchmarks, never for text.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from .checkpoint import INDEX
from ..config import ModelConfig

VOCAB = 157184
SPECIAL_TOKENS = ("<|startoftext|>", "<|endoftext|>", "[CLS]", "[gMASK]", "<|mask|>", "<role>", "</role>",
                  "<|role_end|>")
FIRST_SPECIAL = 156891  # so that <|endoftext|> = 156892 and <|mask|> = 156895
EOS_ID, MASK_ID = 156892, 156895
FORMATS = ("bf16", "int8")
VERSIONS = ("2.1", "2.2")
ROLE_END_22, DELETE_ID, SPLIT_ID = 156900, 156930, 156931  # LLaDA2.2's ids (FluxServe's guide, the report)
EDIT_TOKENS = ("<|delete|>", "<|split|>")
CHAT_TEMPLATE = (
    "<role>SYSTEM</role>{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n{% endif %}"
    "detailed thinking off<|role_end|>"
    "{% for m in messages if m['role'] != 'system' %}"
    "<role>{{ 'HUMAN' if m['role'] == 'user' else 'ASSISTANT' }}</role>{{ m['content'] }}<|role_end|>"
    "{% endfor %}{% if add_generation_prompt %}<role>ASSISTANT</role>{% endif %}")

SHAPES = {  # sizes only; everything else is the published config
    "mini": dict(hidden_size=2048, num_hidden_layers=20, num_attention_heads=16, num_key_value_heads=4,
                 head_dim=128, intermediate_size=5120, moe_intermediate_size=512, num_experts=256,
                 num_experts_per_tok=8, n_group=8, topk_group=4),
    "load": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,  # ~2.2 GB
                 head_dim=128, intermediate_size=2816, moe_intermediate_size=512, num_experts=64,
                 num_experts_per_tok=8, n_group=8, topk_group=4),
    "tiny": dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 intermediate_size=64, moe_intermediate_size=16, num_experts=16, num_experts_per_tok=4,
                 n_group=8, topk_group=4),
}
PUBLISHED = {
    "architectures": ["LLaDA2MoeModelLM"],
    "auto_map": {"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                 "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                 "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
    "model_type": "llada2_moe", "dtype": "bfloat16", "vocab_size": VOCAB, "max_position_embeddings": 32768,
    "first_k_dense_replace": 1, "num_shared_experts": 1, "partial_rotary_factor": 0.5, "rope_theta": 600000,
    "rope_scaling": None, "routed_scaling_factor": 2.5, "rms_norm_eps": 1e-06, "hidden_act": "silu",
    "use_qk_norm": True, "use_qkv_bias": False, "use_bias": False, "norm_head": False, "norm_topk_prob": True,
    "score_function": "sigmoid", "moe_router_enable_expert_bias": True, "router_dtype": "fp32",
    "tie_word_embeddings": False, "embedding_dropout": 0.0, "attention_dropout": 0.0, "output_dropout": 0.0,
    "initializer_range": 0.02, "output_router_logits": False, "use_cache": True, "pad_token_id": EOS_ID,
}
FLASH = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
             intermediate_size=9216, moe_intermediate_size=1024, num_experts=256, num_experts_per_tok=8,
             n_group=8, topk_group=4)  # LLaDA2.1-flash's sizes (102.9 B); 2.2-flash is taken to share them
CONFIG_ONLY = {"flash": FLASH}  # sizes for `replica_config` (memory sizing), never written as weights
CAPACITY_SHARE = 48 / 256  # LLaDA2.2: the share of the experts a routing block may use


def version_keys(sizes: dict, version: str) -> dict:
    """The config keys a version adds to the published 2.1 config (none for 2.1)."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {', '.join(VERSIONS)}, got {version!r}")
    if version == "2.1":
        return {}
    K = sizes["num_experts_per_tok"]  # at least 1.5 x top-k: a token still chooses in a small shape
    capacity = min(max(round(sizes["num_experts"] * CAPACITY_SHARE), K + K // 2), sizes["num_experts"])
    return {"expert_capacity": capacity, "block_size": 32, "delete_token_id": DELETE_ID, "split_token_id": SPLIT_ID,
            "eos_token_id": [EOS_ID, ROLE_END_22]}


TOKENIZER_TEXT = (
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
    "The quick brown fox jumps over the lazy dog. Write a function that adds two numbers.\n"
    "for i in range(10):\n    print(i * i)\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n")


def replica_config(shape: str = "tiny", version: str = "2.1", **overrides) -> dict:
    """The config.json of a replica: the published keys of `version` with the sizes of `shape` (a shape of
    SHAPES or CONFIG_ONLY) and any overrides."""
    raw = PUBLISHED | (SHAPES | CONFIG_ONLY)[shape] | overrides
    return raw | version_keys(raw, version) | overrides  # the capacity follows the experts overridden


def special_tokens(version: str = "2.1") -> list[str]:
    """The special tokens from FIRST_SPECIAL on, in id order (2.2: reserved fillers up to its fixed ids)."""
    if version == "2.1":
        return list(SPECIAL_TOKENS)
    named = dict(enumerate(SPECIAL_TOKENS[:-1], FIRST_SPECIAL))  # <|role_end|> moves from 156898 to 156900
    named |= {ROLE_END_22: "<|role_end|>", DELETE_ID: EDIT_TOKENS[0], SPLIT_ID: EDIT_TOKENS[1]}
    return [named.get(i, f"<|reserved_special_{i}|>") for i in range(FIRST_SPECIAL, SPLIT_ID + 1)]


def tensor_shapes(cfg: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the real format, in the order the published shards list them."""
    H, D, L = cfg.hidden_size, cfg.head_dim, cfg.num_hidden_layers
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * D
    I, Im = cfg.intermediate_size, cfg.moe_intermediate_size
    out = [("model.word_embeddings.weight", (cfg.vocab_size, H))]
    for n in range(L):
        p = f"model.layers.{n}"
        out += [(f"{p}.input_layernorm.weight", (H,)), (f"{p}.attention.query_key_value.weight", (qkv, H)),
                (f"{p}.attention.query_layernorm.weight", (D,)), (f"{p}.attention.key_layernorm.weight", (D,)),
                (f"{p}.attention.dense.weight", (H, cfg.num_attention_heads * D)),
                (f"{p}.post_attention_layernorm.weight", (H,))]
        if not cfg.is_moe_layer(n):
            out += [(f"{p}.mlp.gate_proj.weight", (I, H)), (f"{p}.mlp.up_proj.weight", (I, H)),
                    (f"{p}.mlp.down_proj.weight", (H, I))]
            continue
        out += [(f"{p}.mlp.gate.weight", (cfg.num_experts, H)), (f"{p}.mlp.gate.expert_bias", (cfg.num_experts,))]
        for e in range(cfg.num_experts):
            out += [(f"{p}.mlp.experts.{e}.gate_proj.weight", (Im, H)),
                    (f"{p}.mlp.experts.{e}.up_proj.weight", (Im, H)),
                    (f"{p}.mlp.experts.{e}.down_proj.weight", (H, Im))]
        S = Im * cfg.num_shared_experts
        out += [(f"{p}.mlp.shared_experts.gate_proj.weight", (S, H)),
                (f"{p}.mlp.shared_experts.up_proj.weight", (S, H)),
                (f"{p}.mlp.shared_experts.down_proj.weight", (H, S))]
    return out + [("model.norm.weight", (H,)), ("lm_head.weight", (cfg.vocab_size, H))]


def random_tensor(name: str, shape: tuple[int, ...], layers: int, gen: torch.Generator, device) -> torch.Tensor:
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    std = 1e-3 if name.endswith("expert_bias") else 0.02
    if name.endswith(("dense.weight", "down_proj.weight")):
        std /= math.sqrt(2 * layers)
    t = torch.randn(shape, generator=gen, device=device) * std
    return t.to(torch.bfloat16).cpu()


class Draws:
    """Where a replica's random tensors come from, in `tensor_shapes` order.

    pool_rows 0: each tensor drawn fresh from one generator (`random_tensor`). pool_rows R > 0: a matrix of at
    most R rows is a run of consecutive rows, at a random start, of one (R, K) pool per (std, K) drawn once:
    every weight has the same distribution, the full-size mini costs a few pools instead of 16e9 normal draws,
    and the pool's int8 codes are computed once too (`int8`). Matrices then share rows (expert 7's gate may be
    expert 3's shifted): fine for memory and speed, meaningless for text, as every replica is."""

    def __init__(self, layers: int, seed: int = 0, device: str = "cpu", pool_rows: int = 0):
        self.layers, self.device, self.pool_rows = layers, device, pool_rows
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.pools = {}  # (std, K) -> (bf16 (R, K), int8 codes (R, K), bf16 scales (R,))

    def draw(self, name: str, shape: tuple[int, ...]) -> tuple[torch.Tensor, tuple | None]:
        """(the bf16 tensor, its int8 (codes, scales) when they came with it from a pool, else None)."""
        if not self.pool_rows or len(shape) != 2 or shape[0] > self.pool_rows or name.endswith("norm.weight"):
            return random_tensor(name, shape, self.layers, self.gen, self.device), None
        std = 0.02 / math.sqrt(2 * self.layers) if name.endswith(("dense.weight", "down_proj.weight")) else 0.02
        N, K = shape
        if (std, K) not in self.pools:
            from ..fast.int8 import quantize_int8

            w = (torch.randn(self.pool_rows, K, generator=self.gen, device=self.device) * std).to(torch.bfloat16).cpu()
            self.pools[std, K] = (w, *quantize_int8(w))  # per-row scales: any run of rows is quantized alike
        start = int(torch.randint(self.pool_rows - N + 1, (1,), generator=self.gen, device=self.device))
        w, q, s = self.pools[std, K]
        return w[start:start + N], (q[start:start + N], s[start:start + N])


def write_weights(out: Path, cfg: ModelConfig, seed: int = 0, shard_bytes: int = 5 << 30, device: str = "cpu",
                  progress: bool = False, pool_rows: int = 0) -> list[Path]:
    """Sharded bf16 safetensors and their index; one shard in memory at a time."""
    shapes = tensor_shapes(cfg)
    shards, size = [[]], 0
    for name, shape in shapes:
        nbytes = math.prod(shape) * 2
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    files = [out / f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))]
    draws = Draws(cfg.num_hidden_layers, seed, device, pool_rows)
    weight_map = {}
    for f, shard in zip(files, _progress(shards, progress, "writing shards")):
        tensors = {name: draws.draw(name, shape)[0].clone() for name, shape in shard}  # clone: no shared pools
        save_file(tensors, str(f), metadata={"format": "pt"})
        weight_map |= {name: f.name for name in tensors}
        del tensors
    total = sum(math.prod(s) * 2 for _, s in shapes)
    (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return files


def write_int8_weights(out: Path, cfg: ModelConfig, seed: int = 0, shard_bytes: int = 4 << 30, device: str = "cpu",
                       progress: bool = False, pool_rows: int = 0) -> list[Path]:
    """`write_weights`' tensors, drawn in the same order, quantized one at a time and written in the int8 format
    (experts stacked, codes + row scales; `llada.weights.int8_checkpoint`); the shard files written."""
    from . import int8_format
    from .checkpoint import expected_tensors, hf_name
    from .fp8_checkpoint import ShardWriter, _write_index, output_tensors, plan_shards
    from .int8_checkpoint import write_rows
    from ..fast.int8 import quantize_int8
    from ..model import LLaDA2MoE

    with torch.device("meta"):
        plain, quantized = LLaDA2MoE(cfg).to(torch.bfloat16), LLaDA2MoE(cfg).to(torch.bfloat16)
    int8_format.swap_modules(quantized)
    tensors = output_tensors(quantized)  # the int8 directory's tensors: HF name -> (dtype, shape)
    slots = expected_tensors(plain)  # each bf16 tensor's place: runtime key, expert, rows
    layout = plan_shards(tensors, out, shard_bytes)
    draws = Draws(cfg.num_hidden_layers, seed, device, pool_rows)
    with torch.no_grad(), ShardWriter(layout) as writer:
        for name, shape in _progress(tensor_shapes(cfg), progress, "writing int8 tensors", "tensor"):
            t, quantized = draws.draw(name, shape)  # drawn even if unused: the same stream as write_weights
            slot = slots.get(name)
            if slot is None:  # a tied lm_head
                continue
            target = hf_name(slot.key)
            dtype, full = tensors[target]
            if dtype == torch.int8:
                write_rows(writer, target, slot, full, *(quantized or quantize_int8(t)))
            else:
                writer.write(target, t)
    _write_index(layout)
    return layout.files


def write_tokenizer(out: Path, vocab_size: int = VOCAB, version: str = "2.1") -> None:
    """A byte-level BPE whose ids run up to FIRST_SPECIAL, the special tokens after it, the chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    base.train_from_iterator([TOKENIZER_TEXT] * 4, trainer)
    spec = json.loads(base.to_str())
    vocab = spec["model"]["vocab"]
    vocab |= {f"<|reserved_{i}|>": i for i in range(len(vocab), FIRST_SPECIAL)}  # unreachable fillers
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens(version)])
    assert tok.token_to_id("<|endoftext|>") == EOS_ID and tok.token_to_id("<|mask|>") == MASK_ID
    assert version == "2.1" or [tok.token_to_id(t) for t in ("<|role_end|>", *EDIT_TOKENS)] == [
        ROLE_END_22, DELETE_ID, SPLIT_ID]
    assert tok.get_vocab_size() <= vocab_size
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.save_pretrained(str(out))
    config = json.loads((out / "tokenizer_config.json").read_text())  # the published layout (transformers 4):
    config |= {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}  # template inline
    config.pop("backend", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_replica(out: str | Path, shape: str = "tiny", seed: int = 0, shard_bytes: int | None = None,
                  device: str = "cpu", progress: bool = False, version: str = "2.1", format: str = "bf16",
                  pool_rows: int = 0, **overrides) -> Path:
    """Write a whole replica directory (config, generation config, shards + index, tokenizer last), its
    weights in bf16 or (format "int8") in the int8 checkpoint format."""
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)} (flash is sized, never written), got {shape!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    raw = replica_config(shape, version, **overrides)
    cfg = ModelConfig.from_dict(raw)
    if format == "int8":
        from .int8_format import QUANTIZATION_CONFIG

        raw = raw | {"quantization_config": QUANTIZATION_CONFIG, "torch_dtype": "bfloat16"}  # as the converter writes
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    stops = list(cfg.stop_token_ids) if cfg.block_routing else EOS_ID
    generation = {"bos_token_id": FIRST_SPECIAL, "eos_token_id": stops, "pad_token_id": EOS_ID}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    if format == "int8":
        from .memory import weight_bytes

        total = weight_bytes(cfg, torch.bfloat16, "int8")
        write_int8_weights(out, cfg, seed, shard_bytes or max(total // 3, 1 << 20), device, progress, pool_rows)
    else:
        total = sum(cfg.parameter_counts().values()) * 2
        write_weights(out, cfg, seed, shard_bytes or max(total // 3, 1 << 20), device, progress, pool_rows)
    write_tokenizer(out, cfg.vocab_size, cfg.version)
    return out


def _progress(items, enabled: bool, desc: str, unit: str = "shard"):
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=None, mininterval=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llada.weights.replica", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory to write (created)")
    parser.add_argument("--shape", choices=list(SHAPES), default="tiny")
    parser.add_argument("--version", choices=VERSIONS, default="2.1", help="2.2: block routing and the edit tokens")
    parser.add_argument("--format", choices=FORMATS, default="bf16",
                        help="bf16 (as published) or int8 (the int8 checkpoint format, written without the bf16 form)")
    parser.add_argument("--shard-mb", type=int, default=None, help="shard size in MB (default: a third of the model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-rows", type=int, default=0,
                        help="draw matrices as row runs of pools of this many rows (Draws: the mini in minutes)")
    parser.add_argument("--device", default="cpu", help="where the random numbers are drawn (cuda is faster)")
    args = parser.parse_args(argv)
    shard = args.shard_mb << 20 if args.shard_mb else None
    out = write_replica(args.out, args.shape, args.seed, shard, args.device, progress=True, version=args.version,
                        format=args.format, pool_rows=args.pool_rows)
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    print(f"wrote {out} ({size / 2**30:.2f} GiB of weights)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
