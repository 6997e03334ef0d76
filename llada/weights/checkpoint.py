"""Read and write Hugging Face `llada2_moe` model directories, without `trust_remote_code`, lean on memory.

LLaDA2.1 and LLaDA2.2 directories hold the same tensors under the same names; the version is the config's
(`llada.config`: block routing, the edit and stop ids), so a 2.2 directory loads exactly as a 2.1 one.

A directory holds `config.json` and either `model.safetensors` or shards listed in
`model.safetensors.index.json`. Per-expert tensors `mlp.experts.E.{gate,up,down}_proj.weight` become
the runtime layout `w13 (E, 2I, H)` (gate rows, then up rows) / `w2 (E, H, I)`.

Loading (`load_model`) never holds a second copy of the weights:

1. config.json is validated and the weights' size is estimated from it: a model that cannot fit is
   refused before anything is allocated (`llada.weights.memory`);
2. the model is built on the `meta` device and every shard's header is checked against it (names,
   shapes, dtypes), so a broken checkpoint is refused before any memory is spent;
3. the model is materialised once, in the target dtype on the target device, and each shard is read
   tensor by tensor straight into its place (`llada.weights.shards`): an expert's matrices land in their slice
   of the preallocated w13 / w2. With `quantize="fp8"` the routed experts are never materialised in
   bf16: each expert is quantized (128x128 tiles, `llada.fast.kernels.quantize_weight_fp8`) as it is read.
   A directory written by `python -m llada.weights.fp8_checkpoint` (`llada.weights.fp8_format`) holds the fp8 experts
   and their scales already: they are read straight into the FP8 buffers, nothing is quantized.
   With `ranks` (`llada.dist.group.Ranks`) the routed experts are split across ranks (`llada.dist.experts`):
   this rank's slice is the only part of them it allocates and reads; the other ranks' experts are skipped.
   Quantizing (fp8, int8) works on that slice as on a whole model, expert by expert; from a quantized
   directory, whose experts are stored stacked, a rank reads only its experts' rows of each stacked tensor
   (`Slot.first`).
   With `quantize="int8"` (CPU) every matrix `llada.fast.int8` quantizes is quantized as it is read, one
   tensor at a time (`llada.weights.int8_format.Sinks`); a directory written by
   `python -m llada.weights.int8_checkpoint` is read straight into the int8 buffers.

Known non-weight tensors (`rotary_emb.inv_freq`) are skipped. Every problem raises `CheckpointError`
naming the file and the tensor or key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import torch
from safetensors.torch import save_file
from torch import nn

from . import fp8_format, int8_format, memory
from ..config import ConfigError, ModelConfig, read_json
from ..dist.experts import RankSlice, as_slice, expert_slice, shard_experts
from ..model import Experts, LLaDA2MoE
from .shards import Entry, ShardError, ShardReader, read_header, staging_buffer

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
SKIPPED = ("rotary_emb.inv_freq",)  # buffers some exporters save; recomputed from the config here
QUANTIZE = ("fp8", "fp8-dense", "int8")


class CheckpointError(RuntimeError):
    """A model directory that cannot be loaded; the message names the file and the key."""


class Slot(NamedTuple):
    """Where a Hugging Face tensor goes: a runtime tensor, an expert in it, and a row range of that."""

    key: str  # runtime state-dict key, e.g. "layers.3.mlp.experts.w13"
    expert: int | None  # index into the stacked experts
    rows: tuple[int, int] | None  # gate rows [0, I) or up rows [I, 2I) of w13[expert]
    shape: tuple[int, ...]  # the shape the checkpoint's tensor must have (or this rank's part of it, below)
    first: int | None = None  # a rank's slice of stacked experts: experts [first, first + shape[0]) of a tensor
    #                           stored for all the config's experts, (E, *shape[1:]), the only rows read


def read_config(root: Path) -> tuple[ModelConfig, dict]:
    """The validated config and the raw config.json of a model directory.

    The stop ids (`ModelConfig.stop_token_ids`) are config.json's eos_token_id, else generation_config.json's
    (where LLaDA2.2 ships its two), else the version's default."""
    if not root.is_dir():
        raise CheckpointError(f"{root}: model directory not found")
    try:
        raw = read_json(root / "config.json")
        cfg = ModelConfig.from_dict(raw, source=str(root / "config.json"))
        generation = root / "generation_config.json"
        stops = read_json(generation).get("eos_token_id") if generation.is_file() else None
        if raw.get("eos_token_id") is None and stops is not None:  # errors now can only be these ids'
            cfg = ModelConfig.from_dict(raw | {"eos_token_id": stops}, source=str(generation))
        return cfg, raw
    except ConfigError as err:
        raise CheckpointError(str(err)) from None


def shard_files(root: Path) -> list[Path]:
    if (root / INDEX).exists():
        try:
            weight_map = json.loads((root / INDEX).read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{root / INDEX}: not a valid safetensors index ({err!r})") from None
        files = [root / str(name) for name in names]
    elif (root / SINGLE).exists():
        files = [root / SINGLE]
    else:
        raise CheckpointError(f"{root}: no {SINGLE} or {INDEX} found")
    for f in files:
        if not f.is_file():
            raise CheckpointError(f"{f}: shard listed in {INDEX} is missing")
    return files


def expected_tensors(model: LLaDA2MoE) -> dict[str, Slot]:
    """Every tensor the checkpoint must hold, by Hugging Face name (works on a meta model)."""
    out = {}
    for key, t in model.state_dict().items():
        m = re.match(r"^(layers\.\d+\.mlp\.experts)\.(w13|w2)$", key)
        if not m or t.dtype in (fp8_format.FP8, torch.int8):  # quantized experts are stored stacked, as they run
            owner = _slice_of(model, key)
            out[hf_name(key)] = Slot(key, None, None, tuple(t.shape), None if owner is None else owner.first_expert)
            continue
        E, N, K = t.shape
        first = getattr(model.get_submodule(m[1]), "first_expert", 0)  # a rank's slice starts there
        for e in range(E):
            prefix = f"model.{m[1]}.{first + e}"
            if m[2] == "w2":
                out[f"{prefix}.down_proj.weight"] = Slot(key, e, None, (N, K))
            else:
                out[f"{prefix}.gate_proj.weight"] = Slot(key, e, (0, N // 2), (N // 2, K))
                out[f"{prefix}.up_proj.weight"] = Slot(key, e, (N // 2, N), (N // 2, K))
    if model.config.tie_word_embeddings:
        del out["lm_head.weight"]  # the output layer shares the embeddings
    return out


def _slice_of(model: LLaDA2MoE, key: str) -> RankSlice | None:
    """The rank's slice of experts that holds the (stacked) tensor `key`, if one does."""
    m = re.match(r"^(layers\.\d+\.mlp\.experts)\.\w+$", key)
    owner = model.get_submodule(m[1]) if m else None
    return owner if isinstance(owner, RankSlice) else None


def _part(entry: Entry, slot: Slot, num_experts: int) -> Entry:
    """The rows of a stacked experts tensor (E, ...) that a rank's slot takes: experts [first, first + n)."""
    stored = (num_experts, *slot.shape[1:])
    if entry.shape != stored:
        raise CheckpointError(f"{entry.file}: tensor {entry.name} has shape {entry.shape}, the config needs {stored}")
    per = (entry.end - entry.begin) // num_experts  # bytes of one expert's rows
    begin = entry.begin + slot.first * per
    return entry._replace(shape=slot.shape, begin=begin, end=begin + slot.shape[0] * per)


def hf_name(key: str) -> str:
    return key if key.startswith("lm_head") else f"model.{key}"


def plan(root: Path, model: LLaDA2MoE) -> list[tuple[Entry, Slot]]:
    """Match every tensor of every shard to its slot; CheckpointError for anything missing or wrong."""
    expected, found = expected_tensors(model), {}
    dtypes = {key: t.dtype for key, t in model.state_dict().items()}
    for f in shard_files(root):
        try:
            entries = read_header(f)
        except ShardError as err:
            raise CheckpointError(str(err)) from None
        for name, entry in entries.items():
            if name in found:
                raise CheckpointError(f"{f}: tensor {name} is also in {found[name].file.name}")
            found[name] = entry
    missing = sorted(expected.keys() - found.keys())
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CheckpointError(f"{root}: missing tensor {missing[0]}{more} (needed by config.json; no shard holds "
                              f"it{_bias_hint(missing[0], root)})")
    out = []
    for name, entry in sorted(found.items(), key=lambda kv: (kv[1].file, kv[1].begin)):
        slot = expected.get(name)
        if slot is None and _other_ranks(name, model):
            continue  # another rank's expert: that rank reads it
        if slot is None:
            _unexpected(entry, model.config)
            continue
        if slot.first is not None:
            entry = _part(entry, slot, model.config.num_experts)
        if entry.shape != slot.shape:
            raise CheckpointError(f"{entry.file}: tensor {name} has shape {entry.shape}, the config needs {slot.shape}")
        if entry.dtype == torch.int8 and dtypes[slot.key] != torch.int8:  # never cast int8 codes to a float
            raise CheckpointError(f"{entry.file}: tensor {name} has dtype I8; only an int8 checkpoint's quantized "
                                  "matrices are int8 (python -m llada.weights.int8_checkpoint)")
        out.append((entry, slot))
    return out


def _other_ranks(name: str, model: LLaDA2MoE) -> bool:
    """Whether `name` is a routed expert's tensor that another rank holds (expert parallel loading)."""
    m = re.match(r"^model\.(layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", name)
    if not m:
        return False
    try:
        experts = model.get_submodule(m[1])
    except AttributeError:
        return False
    first = getattr(experts, "first_expert", None)
    return first is not None and int(m[2]) < experts.num_experts and \
        not first <= int(m[2]) < first + experts.w13.shape[0]


def _bias_hint(name: str, root: Path) -> str:
    if not name.endswith(".bias"):
        return ""
    key = "use_qkv_bias" if "query_key_value" in name else "use_bias"
    raw = read_json(root / "config.json")
    return f"; config.json sets {key} true" if key in raw else f"; config.json omits {key}, whose default is true"


def _unexpected(entry: Entry, cfg: ModelConfig) -> None:
    name = entry.name
    if name.endswith(SKIPPED) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
        return  # a known non-weight tensor, or an lm_head that tied embeddings replace
    hint = ""
    if name.endswith("attention.dense.bias"):
        hint = "; config.json has use_bias false (or the key is absent and the checkpoint needs it true)"
    elif name.endswith("query_key_value.bias"):
        hint = "; config.json has use_qkv_bias false"
    elif name.endswith("gate.expert_bias"):
        hint = "; config.json has moe_router_enable_expert_bias false"
    elif ".experts." in name:
        hint = (f"; num_experts is {cfg.num_experts} and MoE layers start at "
                f"first_k_dense_replace={cfg.first_k_dense_replace}")
    raise CheckpointError(f"{entry.file}: unexpected tensor {name} (not part of this config{hint})")


def load_model(path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
               quantize: str | None = None, progress: bool = False, ranks=None) -> LLaDA2MoE:
    """The model of a Hugging Face directory, loaded shard by shard into `dtype` on `device`.

    dtype None: the checkpoint's dtype on CUDA, fp32 on the CPU for small models, bf16 with int8 weights
    (`memory.default_dtype`). quantize: None, "fp8" (routed experts quantized while loading), "fp8-dense" (also
    the dense linears), "int8" (CPU: experts and linears, `llada.fast.int8`) or "auto" (int8 on the CPU when
    the model fits only so, `memory.auto_quantize`); a quantized directory loads as it is stored. ranks: this
    rank's place (`llada.dist.group.Ranks`) when the routed experts are split across ranks (plain or quantized,
    at load or stored: each rank quantizes or reads only its own experts)."""
    root, device = Path(path), torch.device(device)
    if quantize not in (None, "auto", *QUANTIZE):
        raise ValueError(f"unknown quantization {quantize!r}; choose {', '.join(QUANTIZE)} or auto")
    cfg, raw = read_config(root)
    world = 1 if ranks is None else ranks.world
    try:
        expert_slice(cfg.num_experts, 0, world)  # a world that cannot split the experts: refused before all else
    except ValueError as err:
        raise CheckpointError(f"{root / 'config.json'}: {err}") from None
    stored = _stored(root, raw, device, None if quantize == "auto" else quantize)
    if quantize == "auto":
        quantize = stored or memory.auto_quantize(cfg, device, dtype, world=world)
    quantize = quantize or stored
    if quantize == "int8" and device.type != "cpu":
        raise CheckpointError(f"{root}: int8 weights run on the CPU (PyTorch's CPU int8 kernel); on {device.type} "
                              "load bf16, or fp8 on a GPU with FP8")
    dtype = dtype or memory.default_dtype(cfg, device, quantize)
    room = _room(device, ranks)
    why = memory.does_not_fit(cfg, dtype, device, quantize, room=room, world=world)
    if why:
        shared = "" if room is None else f" (the {ranks.local} ranks of this machine share its memory: one rank's part)"
        raise CheckpointError(f"{root / 'config.json'}: refused before loading: {why}{shared}")
    with torch.device("meta"):
        model = LLaDA2MoE(cfg).to(dtype)
    if ranks is not None:
        shard_experts(model, ranks.rank, ranks.world)  # before any quantized swap: the twins keep the slice
    if stored:  # the quantized tensors and their scales are tensors of the files, read as they are
        (_fp8_experts if stored == "fp8" else int8_format.swap_modules)(model)
        slots = _checked(plan(root, model), model, stored)
    slots = slots if stored else plan(root, model)  # bf16 in the files, quantized as they arrive
    sinks = {} if stored or quantize not in ("fp8", "fp8-dense") else {
        key: _FP8Sink(e, dtype) for key, e in _fp8_experts(model).items()}
    if quantize == "int8" and not stored:
        int8_format.swap_modules(model)
    _materialize(model, device)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.word_embeddings.weight
    if quantize == "int8" and not stored:
        sinks = int8_format.Sinks(model, dtype).by_key()
    with torch.no_grad():
        _fill(model, slots, sinks, device, progress)
    if quantize == "fp8-dense":
        from ..fast.quantize import quantize_model_fp8  # the experts are fp8 already; this swaps the dense linears

        quantize_model_fp8(model, dense=True)
    model.ranks = ranks  # the decode drivers take rank 0's decisions on every rank (`llada.decode`)
    return model.eval().requires_grad_(False)


def _room(device: torch.device, ranks) -> int | None:
    """The memory this rank may fill: on the CPU the ranks of one machine share it (each its equal part);
    None: the device's own free memory (a GPU per rank, or one process)."""
    local = 1 if ranks is None or device.type != "cpu" else ranks.local
    free = memory.available_bytes(device) if local > 1 else None
    return None if free is None else free // local


def _materialize(model: LLaDA2MoE, device: torch.device) -> None:
    """Allocate every meta parameter and buffer on `device`, uninitialised: the shards fill them.

    (Module.to_empty does the same through empty_like, which pulls in sympy: ~1 s and ~35 MB.)"""
    for module in model.modules():
        for name, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if t.is_meta:
                new = torch.empty(t.shape, dtype=t.dtype, device=device)
                setattr(module, name, nn.Parameter(new, requires_grad=False) if isinstance(t, nn.Parameter) else new)


def _fill(model: LLaDA2MoE, slots: list[tuple[Entry, Slot]], sinks: dict, device, progress: bool) -> None:
    state, staging, by_file = model.state_dict(), staging_buffer(device), {}
    for entry, slot in slots:
        by_file.setdefault(entry.file, []).append((entry, slot))
    for f in _progress(list(by_file), progress):
        with ShardReader(f, staging) as reader:
            for entry, slot in by_file[f]:
                if slot.key in sinks:
                    sinks[slot.key].put(reader, entry, slot)
                else:
                    reader.copy_into(entry, _destination(state[slot.key], slot))


def _destination(t: torch.Tensor, slot: Slot) -> torch.Tensor:
    t = t if slot.expert is None else t[slot.expert]
    return t if slot.rows is None else t[slot.rows[0]:slot.rows[1]]  # contiguous: leading-dim slices


def _progress(files: list[Path], enabled: bool):
    if not enabled:
        return files
    from tqdm import tqdm

    return tqdm(files, desc="loading shards", unit="shard", disable=None)


class _FP8Sink:
    """Quantizes one MoE layer's experts as their tensors arrive (gate and up together, per expert)."""

    def __init__(self, experts, dtype: torch.dtype):
        self.experts, self.dtype, self.pending = experts, dtype, {}

    def put(self, reader: ShardReader, entry: Entry, slot: Slot) -> None:
        from ..fast.kernels import quantize_weight_fp8

        w = torch.empty(slot.shape, dtype=self.dtype, device=self.experts.w13.device)  # (I, H) or (H, I)
        reader.copy_into(entry, w)
        e = slot.expert
        if slot.rows is None:  # down_proj -> w2[e]
            q, s = quantize_weight_fp8(w)
            self.experts.w2[e].copy_(q)
            self.experts.w2_scale[e].copy_(s)
            return
        halves = self.pending.setdefault(e, {})
        halves[slot.rows[0]] = w
        if len(halves) == 2:  # gate and up read: quantize the (2I, H) matrix exactly as a stacked w13 would be
            q, s = quantize_weight_fp8(torch.cat([halves[k] for k in sorted(halves)]))
            self.experts.w13[e].copy_(q)
            self.experts.w13_scale[e].copy_(s)
            del self.pending[e]


def _fp8_experts(model: LLaDA2MoE) -> dict[str, object]:
    """Swap every (meta) Experts for an FP8Experts of empty fp8 buffers; they by runtime key (w13 and w2)."""
    from ..fast.quantize import FP8Experts

    out = {}
    for i, layer in enumerate(model.layers):
        experts = getattr(layer.mlp, "experts", None)
        if not isinstance(experts, Experts):
            continue
        E, I2, H = experts.w13.shape
        t = lambda *shape, dtype=torch.float8_e4m3fn: torch.empty(shape, dtype=dtype, device="meta")  # noqa: E731
        tiles = lambda n: -(-n // memory.FP8_TILE)  # noqa: E731
        layer.mlp.experts = as_slice(FP8Experts.from_quantized(
            t(E, I2, H), t(E, tiles(I2), tiles(H), dtype=torch.float32),
            t(E, H, I2 // 2), t(E, tiles(H), tiles(I2 // 2), dtype=torch.float32)), experts)  # a rank's: its slice
        out[f"layers.{i}.mlp.experts.w13"] = out[f"layers.{i}.mlp.experts.w2"] = layer.mlp.experts
    return out


def _checked(slots: list[tuple[Entry, Slot]], model: LLaDA2MoE, stored: str) -> list[tuple[Entry, Slot]]:
    try:
        fp8_format.check_entries(slots) if stored == "fp8" else int8_format.check_entries(slots, model)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    return slots


def _stored(root: Path, raw: dict, device: torch.device, quantize: str | None) -> str | None:
    """"fp8" or "int8" for a quantized directory, None for a plain one; CheckpointError where it cannot load."""
    try:
        stored = "int8" if int8_format.stored_int8(raw, str(root / "config.json")) else \
            "fp8" if fp8_format.stored_fp8(raw, str(root / "config.json")) else None
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    if stored and quantize and quantize.split("-")[0] != stored:
        raise CheckpointError(f"{root}: holds {stored} weights already; load it without quantize={quantize!r}")
    why = fp8_format.fp8_refusal(device) if stored == "fp8" else None
    if why:
        raise CheckpointError(f"{root}: refused before loading: {why}")
    return stored


# ---- writing ---------------------------------------------------------------------------------------------

def hf_state_dict(model: LLaDA2MoE) -> dict[str, torch.Tensor]:
    """The model's weights under Hugging Face names, experts unstacked (tied lm_head left out)."""
    out = {}
    for key, t in model.state_dict().items():
        m = re.match(r"^layers\.(\d+)\.mlp\.experts\.(w13|w2)$", key)
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if key.endswith("_scale") or t.dtype == torch.float8_e4m3fn:
            raise CheckpointError("an fp8-quantized model cannot be saved here: save the model before quantizing it, "
                                  "then write its FP8 checkpoint with python -m llada.weights.fp8_checkpoint SRC DST")
        if t.dtype == torch.int8:
            raise CheckpointError("an int8-quantized model cannot be saved here: save the model before quantizing "
                                  "it, then write its int8 checkpoint with python -m llada.weights.int8_checkpoint")
        if not m:
            out[hf_name(key)] = t.detach().contiguous()
            continue
        prefix = f"model.layers.{m[1]}.mlp.experts"
        for e in range(t.shape[0]):
            if m[2] == "w13":
                gate, up = t[e].chunk(2, dim=0)
                out[f"{prefix}.{e}.gate_proj.weight"] = gate.contiguous()
                out[f"{prefix}.{e}.up_proj.weight"] = up.contiguous()
            else:
                out[f"{prefix}.{e}.down_proj.weight"] = t[e].contiguous()
    return out


def save_model(model: LLaDA2MoE, path: str | Path, extra_config: dict | None = None) -> Path:
    """Write config.json (every key the reference code reads) + model.safetensors in the HF layout."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    dtype = str(model.dtype).removeprefix("torch.")
    config = model.config.to_dict() | {"dtype": dtype, "torch_dtype": dtype, "pad_token_id": None}
    config |= extra_config or {}
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(hf_state_dict(model), str(root / SINGLE), metadata={"format": "pt"})
    return root
