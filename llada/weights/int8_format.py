"""The int8 checkpoint format as the loader reads it, and the loader's int8 pieces.

A directory written by `python -m llada.weights.int8_checkpoint SRC DST` carries `QUANTIZATION_CONFIG` in
its config.json. Every matrix `llada.fast.int8` quantizes is stored as int8 codes with one bf16 scale per
output row: a linear layer under its Hugging Face name (`...attention.query_key_value.weight`, I8 (N, K))
beside `...query_key_value.scale` (BF16 (N,)); each MoE layer's routed experts stacked, as they run
(`...mlp.experts.w13` I8 (E, 2I, H) + `w13_scale` BF16 (E, 2I), `w2` I8 (E, H, I) + `w2_scale` BF16 (E, H)).
Everything else (embeddings, lm_head, router, norms) is bf16.

`llada.weights.checkpoint.load_model` uses this module to recognise such a directory (`stored_int8`), to
swap the int8 modules into its model while it is still on `meta` (`swap_modules`), to check the stored
dtypes (`check_entries`) and, for a bf16 directory loaded with quantize="int8", to quantize each tensor as
it is read (`Sinks`): the quantized matrices are never materialised in bf16, so the load peaks at the int8
model plus one tensor.
"""

from __future__ import annotations

import json

import torch

LAYOUT = "llada2-int8-rows"
QUANTIZATION_CONFIG = {"quant_method": "int8", "weights": "int8 codes, one bf16 scale per output row",
                       "activation_scheme": "none (weight-only)", "layout": LAYOUT,
                       "modules": "routed and shared experts, attention projections, dense SwiGLU"}


def stored_int8(raw: dict, source: str) -> bool:
    """True for a directory `llada.weights.int8_checkpoint` wrote; ValueError for another int8 layout."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict) or q.get("quant_method") != "int8":
        return False
    if q.get("layout") != LAYOUT:
        raise ValueError(f"{source}: quantization_config {json.dumps(q)[:200]} is not a format this loader reads "
                         f"(it reads int8 checkpoints written by python -m llada.weights.int8_checkpoint, "
                         f"layout {LAYOUT!r})")
    return True


def scale_key(key: str) -> str:
    """The scale beside an int8 tensor: `x.weight` -> `x.scale`, `x.experts.w13` -> `x.experts.w13_scale`."""
    return key.removesuffix("weight") + "scale" if key.endswith(".weight") else key + "_scale"


def swap_modules(model) -> None:
    """Replace every module int8 quantizes by its int8 twin of empty `meta` buffers (shapes only); a rank's
    slice of the experts (`llada.dist.experts`) by the int8 twin of that slice."""
    from ..dist.experts import as_slice
    from ..fast.int8 import Int8Experts, Int8Linear, quantized_modules
    from ..fast.int8_mlp import int8_mlps
    from ..model import Experts

    def meta(*shape, dtype=torch.int8):
        return torch.empty(shape, dtype=dtype, device="meta")

    for parent, name in quantized_modules(model):
        child = getattr(parent, name)
        if isinstance(child, Experts):
            E, I2, H = child.w13.shape
            new = as_slice(Int8Experts(meta(E, I2, H), meta(E, I2, dtype=torch.bfloat16),
                                       meta(E, H, I2 // 2), meta(E, H, dtype=torch.bfloat16)), child)  # a rank's slice
        else:
            N, K = child.weight.shape
            new = Int8Linear(meta(N, K), meta(N, dtype=torch.bfloat16), child.bias)
        setattr(parent, name, new)
    int8_mlps(model)  # gate and up, shared and routed experts on one split of x (the same children and keys)


def check_entries(pairs, model) -> None:
    """Every int8 tensor of the directory is stored as I8 and its scale as BF16 (no silent casts)."""
    state = model.state_dict()
    codes = {k for k, t in state.items() if t.dtype == torch.int8}
    scales = {scale_key(k) for k in codes}
    for entry, slot in pairs:
        want = torch.int8 if slot.key in codes else torch.bfloat16 if slot.key in scales else None
        if want is not None and entry.dtype != want:
            raise ValueError(f"{entry.file}: tensor {entry.name} is {str(entry.dtype).removeprefix('torch.')}; "
                             f"an int8 checkpoint stores it as {str(want).removeprefix('torch.')}")


class Sinks:
    """Quantizes, as they are read, the tensors whose place in `model` is int8 (use after materialising).

    `put(reader, entry, slot)`: the tensor (or one expert's gate, up or down rows) is read in `dtype` (as the
    loader casts the rest) and its rows quantized into their slice of the codes and the scales. Scales are
    per row, so gate and up quantized apart are what the stacked w13 gives."""

    def __init__(self, model, dtype: torch.dtype):
        state = model.state_dict()
        self.dtype = dtype
        self.places = {k: (t, state[scale_key(k)]) for k, t in state.items() if t.dtype == torch.int8}

    def by_key(self) -> dict[str, "Sinks"]:
        """{runtime key: self} for every int8 tensor: the loader's sink table (`checkpoint._fill`)."""
        return dict.fromkeys(self.places, self)

    def put(self, reader, entry, slot) -> None:
        from ..fast.int8 import quantize_int8

        q, s = self.places[slot.key]
        w = torch.empty(slot.shape, dtype=self.dtype, device=q.device)  # (N, K): one matrix or one expert's rows
        reader.copy_into(entry, w)
        codes, scales = quantize_int8(w)
        if slot.expert is not None:
            q, s = q[slot.expert], s[slot.expert]
        if slot.rows is not None:
            q, s = q[slot.rows[0]:slot.rows[1]], s[slot.rows[0]:slot.rows[1]]
        q.copy_(codes)
        s.copy_(scales)
