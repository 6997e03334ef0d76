"""Which engine runs a model's MoE layers: the fused Triton kernels ("fast") or the PyTorch reference.

    engine="reference"   `llada.model.Router` + `Experts` (a loop over experts, a host sync per layer),
                         FP8 experts on `llada.fast.kernels.reference`
    engine="fast"        `FusedRouter` + the grouped-GEMM kernels: `FusedExperts` for bf16 weights (any
                         CUDA GPU from sm80; with the shared expert, the layer's norms and the router in
                         the MoE's own launches, `llada.fast.layers`), `FP8Experts` on Triton for FP8
                         weights (sm89 / sm90)
    engine="auto"        fast on CUDA when its self-check passes, the reference otherwise

`use_engine(model, engine)` swaps the modules in place (the same Parameter objects: nothing is
copied) and, for the fast engine, runs the self-check on *this* model: `self_check`, one MoE layer at
M = 1 and 32 tokens through both paths, the experts compared on the same routing (relative RMSE), the
routers on the experts they pick, and a fused layer's MoE half (add + norm, routed and shared experts:
`FusedLayer.moe_error`); then, when the caller hands in its decoder (`decode=llada.decode.generate`: this
wing never imports the decode loop), `decode_check`, a short greedy decode (CHECK_DECODE: a few
blocks, editing on) on the fast engine and again on the reference, whose traces must be equal (output
ids, and the active block before every decode forward: the same tokens at the same steps). A kernel
that does not compile or load, or a mismatch, puts the reference back ("auto") or raises `EngineError`
("fast" was asked for); the returned `EngineReport` says which engine runs and why, in one line
(`line()`: the CLI prints it on stderr, the playground beside its stats, the API in its stats). Without CUDA, "fast"
runs the kernels under Triton's interpreter when
TRITON_INTERPRET=1 was set before triton was imported, and is refused otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from ..config import DecodeConfig
from ..model import Experts, LLaDA2MoE, Router
from . import kernels
from .kernels.reference import rel_rmse
from .layers import FusedExperts, FusedLayer, fuse_layers, unfuse_layers
from .quantize import FP8Experts, FusedRouter, fast_router

if TYPE_CHECKING:
    from ..trace import Trace

ENGINES = ("auto", "fast", "reference")
CHECK_TOKENS = (1, 32)
# fast vs reference experts on the same routing: identical products, fp32 sums in another order, and
# one rounding of h (bf16 or e4m3) that the order can flip on a rare element; a wrong tile, mask or
# scale is off by O(1)
EXPERTS_TOLERANCE = 2e-2
ROUTER_AGREEMENT = 0.95  # share of (token, expert) choices both routers make; near-ties may flip
# a fused layer's MoE half (`FusedLayer.moe_error`): the experts' roundings and one more, the shared expert's gate
# and up rounded to bf16 before silu on the plain path only (1.5e-2 measured under the interpreter, whose casts
# to bf16 truncate)
LAYER_TOLERANCE = 3e-2
# the decode check: 3 blocks of 8, greedy, editing on, KV cache. Both thresholds at 0.5: a near-tie between
# two tokens (p < 0.5 each), where bf16 sums in another order may flip the argmax, is never drafted or edited
# by threshold; only the one forced draft of a forward with no confident mask can still land on one
CHECK_DECODE = DecodeConfig(threshold=0.5, editing_threshold=0.5, max_post_steps=2, block_length=8, gen_length=24)
CHECK_PROMPT = 6  # prompt tokens of the decode check


class EngineError(ValueError):
    """The engine asked for cannot run here, or failed its self-check."""


@dataclass
class EngineReport:
    requested: str
    engine: str  # "fast" or "reference": what the model runs now
    reason: str  # one line
    checks: list[dict] = field(default_factory=list)  # per M: experts_rel_rmse, router_agreement, ok
    fell_back: bool = False  # a CUDA model that could have run the fast engine runs the reference
    decode: dict | None = None  # the decode check: tokens, blocks, forwards, ok (and where it differed)

    def line(self) -> str:
        return f"engine: {self.engine} ({self.reason})"

    def to_dict(self) -> dict:
        """What the API's stats carry: engine, requested, reason, fell_back, self_check (passed / failed / none)."""
        ran = bool(self.checks) or self.decode is not None
        ok = all(c.get("ok") for c in self.checks) and (self.decode or {}).get("ok", True)
        return {"engine": self.engine, "requested": self.requested, "reason": self.reason,
                "fell_back": self.fell_back, "self_check": ("passed" if ok else "failed") if ran else "none"}


def fast_available(model: LLaDA2MoE) -> str | None:
    """None when the fast engine can run this model here, else why not (one line)."""
    if not kernels.triton_available():
        return "the fast engine needs the triton package"
    if model.device.type != "cuda":
        import os

        if os.environ.get("TRITON_INTERPRET") != "1":
            return (f"the fast engine runs on a CUDA GPU; this model is on {model.device} (Triton's CPU "
                    "interpreter: set TRITON_INTERPRET=1 before starting)")
        return None
    from .kernels.devices import spec_of

    spec = spec_of(model.device)
    if spec.arch < 80:
        return f"the fast engine needs compute capability 8.0 or later; {spec.name} is sm{spec.arch}"
    if not spec.fp8 and any(isinstance(m, FP8Experts) for m in model.modules()):
        return f"FP8 weights need compute capability 8.9 or later; {spec.name} is sm{spec.arch}: load in bf16"
    return None


def to_fast(model: LLaDA2MoE) -> LLaDA2MoE:
    from .graphs import forget_step_graphs
    from .kernels.fused_norm import fuse_norms

    forget_step_graphs(model)  # graphs kept from earlier runs replay the kernels they recorded
    fuse_norms(model)  # RMSNorm (+ residual add) and QK-norm + RoPE: one launch each
    for layer in model.layers:
        mlp = layer.mlp
        if isinstance(getattr(mlp, "experts", None), Experts):
            mlp.experts = FusedExperts(mlp.experts)
        if isinstance(getattr(mlp, "experts", None), FP8Experts):
            mlp.experts.impl = "triton"
        router = fast_router(getattr(mlp, "gate", None))
        if router is not None:
            mlp.gate = router
    return fuse_layers(model)  # the shared expert, the layer's norms and the router into the MoE's launches


def to_reference(model: LLaDA2MoE) -> LLaDA2MoE:
    from .graphs import forget_step_graphs
    from .kernels.fused_norm import unfuse_norms

    forget_step_graphs(model)
    unfuse_layers(model)
    unfuse_norms(model)
    for layer in model.layers:
        mlp = layer.mlp
        if isinstance(getattr(mlp, "experts", None), FusedExperts):
            mlp.experts = mlp.experts.reference()
        if isinstance(getattr(mlp, "experts", None), FP8Experts):
            mlp.experts.impl = "torch"
        if isinstance(getattr(mlp, "gate", None), FusedRouter):
            mlp.gate = _plain_router(mlp.gate)
    return model


def _plain_router(fused: FusedRouter) -> Router:
    router = Router.__new__(Router)
    nn.Module.__init__(router)
    router.weight = fused.weight
    router.register_buffer("expert_bias", fused.expert_bias)
    router.top_k, router.n_group, router.topk_group, router.scale = (fused.top_k, fused.n_group, fused.topk_group,
                                                                     fused.scale)
    if hasattr(fused, "capacity"):  # LLaDA2.2's block routing
        router.capacity, router.routing_block = fused.capacity, fused.routing_block
    return router


@torch.no_grad()
def self_check(model: LLaDA2MoE, tokens: tuple[int, ...] = CHECK_TOKENS) -> list[dict]:
    """The first MoE layer of `model` (already on the fast engine) against the reference at each M: the
    routers, the experts on the same routing, and a fused layer's whole MoE half (`FusedLayer.moe_error`)."""
    mlp = next(layer.mlp for layer in model.layers if hasattr(layer.mlp, "experts"))
    fast_gate, fast_experts = mlp.gate, mlp.experts
    tokens = routable(model, tokens)
    ref_gate = _plain_router(fast_gate) if isinstance(fast_gate, FusedRouter) else fast_gate
    layer = next((layer for layer in model.layers if isinstance(layer, FusedLayer)), None)
    checks = []
    for M in tokens:
        g = torch.Generator(device=model.device).manual_seed(M)
        x = torch.randn(M, model.config.hidden_size, device=model.device, generator=g).to(model.dtype)
        ids, weights = ref_gate(x)
        fast_ids, _ = fast_gate(x)
        agree = _agreement(fast_ids, ids)
        error = rel_rmse(fast_experts(x, ids, weights), _reference_experts(fast_experts)(x, ids, weights))
        check = {"tokens": M, "experts_rel_rmse": error, "router_agreement": agree,
                 "ok": error < EXPERTS_TOLERANCE and agree >= ROUTER_AGREEMENT}
        if layer is not None:  # the fused layer: add + norm in the router, the shared expert among the experts
            h = torch.randn(x.shape, device=model.device, generator=g).to(model.dtype)
            check["layer_rel_rmse"] = layer.moe_error(x, h)
            check["ok"] = check["ok"] and check["layer_rel_rmse"] < LAYER_TOLERANCE
        checks.append(check)
    return checks


def routable(model: LLaDA2MoE, tokens: tuple[int, ...]) -> tuple[int, ...]:
    """Token counts a check may route: as given, or (block routing) rounded up to whole routing blocks."""
    R = model.config.routing_block if model.config.block_routing else 1
    return tuple(sorted({-(-M // R) * R for M in tokens}))


def check_decode_config(model: LLaDA2MoE, cfg: DecodeConfig = CHECK_DECODE) -> DecodeConfig:
    """The decode check's settings for `model`: CHECK_DECODE, with blocks of whole routing blocks (LLaDA2.2)."""
    if not model.config.block_routing or cfg.block_length % model.config.routing_block == 0:
        return cfg
    R = model.config.routing_block
    return cfg.with_(block_length=R, gen_length=-(-cfg.gen_length // R) * R)


def _reference_experts(experts: nn.Module):
    if isinstance(experts, FusedExperts):
        return experts.reference()
    if isinstance(experts, FP8Experts):
        return lambda x, ids, w: kernels.fused_moe_fp8(x, experts.w13, experts.w13_scale, experts.w2,
                                                       experts.w2_scale, ids, w, impl="torch")
    return experts


def _agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of (token, expert) choices in both (T, K) id sets, order aside."""
    same = (a.sort(-1).values[:, :, None] == b[:, None, :]).any(-1)
    return same.float().mean().item()


Generate = Callable[..., "Trace"]  # `llada.decode.generate`: (model, prompt ids, cfg, mask id, EOS id) -> Trace


@torch.no_grad()
def decode_check(model: LLaDA2MoE, generate: Generate, ids: tuple[int, int] | None = None,
                 cfg: DecodeConfig | None = None) -> dict:
    """A short decode of `model` (on the fast engine) and of the reference; equal traces or where they part.

    ids: the model's (mask id, EOS id); None: the vocabulary's last two ids (any pair of ids checks the same
    arithmetic). cfg None: `check_decode_config`. The prompt is CHECK_PROMPT fixed ids; the model is back on the
    fast engine afterwards."""
    cfg = cfg or check_decode_config(model)
    vocab = model.config.vocab_size
    mask, eos = ids if ids is not None else (vocab - 1, vocab - 2)
    prompt = [t for t in ((k * 7919 + 11) % vocab for k in range(2 * CHECK_PROMPT)) if t not in (mask, eos)]
    prompt = prompt[:CHECK_PROMPT]
    fast = generate(model, prompt, cfg, mask, eos)
    to_reference(model)
    try:
        ref = generate(model, prompt, cfg, mask, eos)
    finally:
        to_fast(model)
    out = {"tokens": cfg.gen_length, "blocks": -(-cfg.gen_length // cfg.block_length),
           "forwards": ref.num_decode_forwards, "ok": True}
    differs = _first_difference(fast, ref)
    if differs:
        out |= {"ok": False, "differs": differs}
    return out


def _first_difference(fast, ref) -> str | None:
    """Where two traces part, in words (None when equal: the same block states at every step, same output)."""
    a, b = fast.block_states_before_each_forward(), ref.block_states_before_each_forward()
    for step, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"the active block before decode forward {step} is {x} on the fast engine, {y} on the reference"
    if len(a) != len(b):
        return f"{len(a)} decode forwards on the fast engine, {len(b)} on the reference"
    if fast.output_ids != ref.output_ids:
        return f"output {fast.output_ids} on the fast engine, {ref.output_ids} on the reference"
    return None


def use_engine(model: LLaDA2MoE, engine: str = "auto", check: bool = True,
               ids: tuple[int, int] | None = None, decode: Generate | None = None) -> EngineReport:
    """Put `model` on `engine` in place (see the module docstring); the report says what runs and why.

    ids: the model's (mask id, EOS id) for the decode check (None: see `decode_check`). decode: the decoder
    the decode check runs (`llada.decode.generate`); None skips it (random-weight benchmarks: near-uniform
    logits tie everywhere; the layer check stays)."""
    if engine not in ENGINES:
        raise EngineError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine == "reference":
        to_reference(model)
        return EngineReport(engine, "reference", "asked for")
    why_not = fast_available(model)
    if why_not and engine == "fast":
        raise EngineError(why_not)
    if why_not or (engine == "auto" and not _on_cuda(model)):
        to_reference(model)
        return EngineReport(engine, "reference", why_not or f"the model is on {model.device}",
                            fell_back=bool(why_not) and _on_cuda(model))
    to_fast(model)
    if not check:
        return EngineReport(engine, "fast", "not self-checked")
    return _checked(model, engine, ids, decode)


def _on_cuda(model: LLaDA2MoE) -> bool:
    return model.device.type == "cuda"


def _checked(model: LLaDA2MoE, engine: str, ids: tuple[int, int] | None, generate: Generate | None) -> EngineReport:
    checks, decode = [], None
    try:
        checks = self_check(model)
        if all(c["ok"] for c in checks):
            decode = decode_check(model, generate, ids) if generate else {"ok": True, "skipped": True}
    except Exception as err:  # noqa: BLE001  (a compile error, OutOfResources, a launch failure)
        checks.append({"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}",
                       "ok": False})
    failed = next((c for c in checks if not c["ok"]), None)
    if failed is None and decode["ok"]:
        worst = max(c["experts_rel_rmse"] for c in checks)
        traced = "no decode check" if decode.get("skipped") else \
            f"a {decode['tokens']}-token decode equal to the reference's"
        return EngineReport(engine, "fast", f"self-check passed: MoE layer at M = "
                                            f"{', '.join(str(c['tokens']) for c in checks)} (experts rel. RMSE <= "
                                            f"{worst:.2g}), {traced}", checks, decode=decode)
    if failed is None:
        detail = f"decode check: {decode['differs']}"
    else:
        detail = failed.get("error") or (f"M = {failed['tokens']}: experts rel. RMSE "
                                         f"{failed['experts_rel_rmse']:.3g}, router agreement "
                                         f"{failed['router_agreement']:.2f}")
    to_reference(model)
    if engine == "fast":
        raise EngineError(f"the fast engine failed its self-check ({detail})")
    return EngineReport(engine, "reference", f"the fast engine failed its self-check ({detail}); "
                                             "running the PyTorch reference", checks, fell_back=True, decode=decode)
