"""The training loop: `python -m llada.train --preset NAME` builds the data and the model, then trains.

One step draws a batch (a task batch, or a code batch of file windows or functions, by `code_share`),
a block length (`block_lengths`), and whether the model drafts the masks itself first (multi-turn
forward, `multi_turn` / `code_multi_turn`), then minimises the M2T + T2T loss (`objective`).

    router balance   no auxiliary loss: after each step every MoE layer nudges `expert_bias` up for
                     experts that got fewer tokens than average and down for busier ones (sign update)
    schedule         linear warmup, then cosine to 10% along the run's fraction (time or steps)
    bounds           wall time (`minutes`) or steps (`steps`), whichever comes first
    CUDA             bf16 autocast over fp32 master weights, fused AdamW, experts as grouped GEMMs
                     (`experts.py`) and each layer compiled with torch.compile; if compiling fails the
                     run says so and continues eagerly
    CPU              fp32, experts as grouped GEMMs too (`python -m llada.bench train`: 2.3x the
                     engine's loop per step on 2 threads), `threads` OpenMP threads
    packing          `pack`: several short functions per row, each starting on a block boundary and
                     seeing only itself (`data.packed_rows`), instead of one function per EOS-padded row
    checkpoints      every `checkpoint_minutes` the model is written to OUT/checkpoint in the final
                     format (loadable by the engine, and by `--init` to continue), a copy of it to
                     OUT/checkpoints/MIN, the held-out loss is measured (`curve`), and the whole
                     training state to OUT/resume.pt: `--resume` continues a stopped run (`resume.py`)

`finish` writes the model directory: sharded bf16 safetensors + index (`export`), tokenizer,
presets.json (the preset's decoding modes), loss.csv, loss.png and training.json.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from ..model import LLaDA2MoE, MoE
from ..presets import write_presets
from .bpe import save_tokenizer
from .build import Built, build
from .experts import use_grouped_experts
from .export import save_sharded
from .logs import loss_ends, plot_loss, write_csv
from .indel import EditIds, IndelConfig, levenshtein_loss
from .objective import Batch, NoiseConfig, diffusion_loss
from .recipes import TRAINING_PRESETS
from .resume import held_out_loss, load_state, save_state
from ..data.tasks import TRAIN_WEIGHTS

MODEL_INFO = "model_info.json"  # {"knows": one line on what the model can do}, for the playground
# the decoding modes assets/model ships (tests/test_presets.py holds them equal)
PRESETS = TRAINING_PRESETS["cpu"].decoding


@dataclass
class TrainConfig:
    preset: str = "custom"
    out: str = "runs/custom"
    seed: int = 0
    minutes: float = 15.0
    steps: int | None = None  # stop after this many steps (default: the time bound only)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda
    compile: str = "auto"  # auto (on CUDA) | on | off
    experts_impl: str = "auto"  # auto (grouped on CUDA) | grouped | loop
    threads: int = 1
    checkpoint_minutes: float = 0.0  # 0: no intermediate checkpoints
    sources: tuple[str, ...] = ("stdlib", "site-packages")
    roots: tuple[str, ...] | None = None  # explicit directories instead of the installed sources
    max_files: int | None = None  # use at most this many training files
    bpe_chars: int = 20_000_000
    vocab_size: int = 8192
    hidden: int = 256
    layers: int = 8
    heads: int = 8
    kv_heads: int = 4
    experts: int = 32
    top_k: int = 2
    groups: int = 4
    topk_group: int = 2
    expert_width: int = 128
    dense_width: int = 512
    block_lengths: tuple[int, ...] = (32,)
    code_length: int = 256
    code_batch: int = 32
    window_share: float = 0.5  # code batches of file windows (else functions)
    pack: bool = False  # function rows: pack several functions per row (on block boundaries)
    min_body_lines: int = 0  # function rows: only functions whose body has at least this many non-blank lines
    max_body_lines: int = 0  # ... and at most this many (0: no bound)
    pip_packages: tuple[str, ...] = ()  # also train on these PyPI packages, pip-installed into OUT/pip
    pip_repeat: int = 1  # their function rows, this many times
    task_length: int = 32
    task_batch: int = 64
    code_share: float = 0.8  # share of steps that train on code (the rest on tasks)
    task_weights: str = ",".join(f"{k}={v}" for k, v in TRAIN_WEIGHTS.items())
    multi_turn: float = 0.25  # probability that a task batch is drafted by the model first
    code_multi_turn: float = 0.2  # ... and a code batch
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    bias_rate: float = 1e-3
    init: str | None = None  # continue from this model directory (its tokenizer and weights)
    expert_capacity: int = 0  # > 0 with a 2.1 --init: make it LLaDA2.2 (`upgrade22`: block routing, edit tokens)
    routing_block: int = 32  # ... its routing block (config.json's block_size)
    indel_share: float = 0.5  # a 2.2 model: fraction of rows drafted with tokens missing or extra (`indel`)
    data_from: str | None = None  # reuse the tokenizer and rows of this earlier run's directory
    eval_n: int = 50  # after training: task items per task
    code_n: int = 64  # ... held-out functions
    samples: int = 10  # ... code samples written into the card
    eval_gen_length: int = 128  # gen_length of the code track
    noise: NoiseConfig = field(default_factory=NoiseConfig)


def preset_config(name: str, **overrides) -> TrainConfig:
    """The TrainConfig of a training preset, `overrides` on top."""
    if name not in TRAINING_PRESETS:
        raise ValueError(f"unknown training preset {name!r}; choose from {', '.join(TRAINING_PRESETS)}")
    known = {f.name for f in fields(TrainConfig)}
    bad = [k for k in overrides if k not in known]
    if bad:
        raise ValueError(f"unknown training setting {bad[0]!r}")
    return check_config(TrainConfig(**(TRAINING_PRESETS[name].values | {"preset": name} | overrides)))


def check_config(tc: TrainConfig) -> TrainConfig:
    """Refuse settings that cannot run, naming the setting and what it allows."""
    resolve_device(tc.device)
    compile_on(tc, torch.device("cpu"))
    if tc.experts_impl not in ("auto", "grouped", "loop"):
        raise ValueError(f"experts_impl must be auto, grouped or loop, got {tc.experts_impl!r}")
    if tc.expert_capacity and not tc.init:
        raise ValueError("expert_capacity upgrades the model of --init to LLaDA2.2; give --init DIR")
    for name in ("code_share", "window_share", "multi_turn", "code_multi_turn", "indel_share"):
        if not 0.0 <= getattr(tc, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(tc, name)}")
    if tc.minutes <= 0 or (tc.steps is not None and tc.steps < 1):
        raise ValueError("minutes must be positive and steps at least 1")
    if not any(tc.code_length % b == 0 for b in tc.block_lengths):
        raise ValueError(f"no block length in {tc.block_lengths} divides code_length {tc.code_length}")
    if tc.pack and any(max(tc.block_lengths) % b for b in tc.block_lengths):
        raise ValueError(f"pack needs every block length to divide the largest, got {tc.block_lengths}")
    return tc


class ExpertBalancer:
    """Aux-loss-free load balance: read the tokens each expert got, then sign-update `expert_bias`."""

    def __init__(self, model: LLaDA2MoE, rate: float):
        self.rate = rate
        self.layers = [m for m in model.modules() if isinstance(m, MoE)]

    @torch.no_grad()
    def step(self) -> float:
        """Update the biases from the last training forward; returns the worst max/mean load ratio."""
        worst = torch.ones((), device=self.layers[0].experts.load.device) if self.layers else torch.ones(())
        for moe in self.layers:
            load = moe.experts.load
            moe.gate.expert_bias += self.rate * torch.sign(load.mean() - load)
            worst = torch.maximum(worst, load.max() / load.mean().clamp(min=1))
        return float(worst)


def lr_at(tc: TrainConfig, step: int, frac: float) -> float:
    """Linear warmup over `warmup` steps, then cosine to 10% along the run's fraction `frac`."""
    warm = min(1.0, (step + 1) / max(tc.warmup, 1))
    return tc.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but torch sees no CUDA device (use --device cpu)")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def experts_impl(tc: TrainConfig, device: torch.device) -> str:
    """grouped GEMMs (CUDA and CPU), unless the config names the engine's loop."""
    return "grouped" if tc.experts_impl == "auto" else tc.experts_impl


def compile_on(tc: TrainConfig, device: torch.device) -> bool:
    if tc.compile not in ("auto", "on", "off"):
        raise ValueError(f"compile must be auto, on or off, got {tc.compile!r}")
    return tc.compile == "on" or (tc.compile == "auto" and device.type == "cuda")


def decoding_presets(tc: TrainConfig) -> dict[str, dict]:
    """The decoding modes a run's model ships: its training preset's (the shipped table otherwise)."""
    return TRAINING_PRESETS[tc.preset].decoding if tc.preset in TRAINING_PRESETS else PRESETS


@dataclass
class Run:
    """The state of one training run."""

    tc: TrainConfig
    built: Built
    device: torch.device
    opt: torch.optim.Optimizer
    balancer: ExpertBalancer
    gen: torch.Generator
    pick: random.Random
    compiled: bool
    log: list = field(default_factory=list)
    curve: list = field(default_factory=list)  # {"minutes", "step", "held_out_loss", "train_loss"} per checkpoint


def setup(tc: TrainConfig, progress: bool, resume: bool = False) -> Run:
    device = resolve_device(tc.device)
    if device.type == "cpu":
        torch.set_num_threads(tc.threads)
    built = build(tc, device, progress, resume)
    model = built.model.to(device).train()
    use_grouped_experts(model, experts_impl(tc, device))
    compiled = compile_on(tc, device)
    if compiled:
        from torch._dynamo import config as dynamo_config

        # graph variants: {dense, MoE layer} x {task, code batch shape}; room to spare before dynamo gives up
        dynamo_config.cache_size_limit = max(dynamo_config.cache_size_limit, 32)
        for layer in model.layers:
            layer.compile(dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.95), weight_decay=tc.weight_decay,
                            fused=device.type == "cuda")
    gen = torch.Generator(device=device).manual_seed(tc.seed)
    return Run(tc, built, device, opt, ExpertBalancer(model, tc.bias_rate), gen, random.Random(f"blocks/{tc.seed}"),
               compiled)


def _draw(run: Run, step: int) -> tuple[str, Batch, int, bool]:
    """The step's kind ("task", "window" or "function"), batch, block length and whether to self-draft."""
    tc = run.tc
    is_code = math.floor((step + 1) * tc.code_share) > math.floor(step * tc.code_share)
    if is_code:
        kind, batch = run.built.code.next()
    else:
        kind, batch = "task", run.built.tasks.next()
    batch = batch.to(run.device)
    block = run.pick.choice([b for b in tc.block_lengths if batch.ids.shape[1] % b == 0] or [batch.ids.shape[1]])
    multi = run.pick.random() < (tc.code_multi_turn if is_code else tc.multi_turn) and step > tc.warmup
    return kind, batch, block, multi


def _loss(run: Run, batch: Batch, block: int, multi: bool) -> torch.Tensor:
    """The 2.1 objective (M2T + T2T), or on a 2.2 model without self-drafting the 2.2 one (`indel`)."""
    model, mask_id = run.built.model, run.built.tokenizer.mask_token_id
    cfg = model.config
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.device.type == "cuda"):
        if cfg.version == "2.2" and not multi:
            ids = EditIds(mask_id, cfg.delete_token_id, cfg.split_token_id)
            return levenshtein_loss(model, batch, block, ids, run.tc.noise, IndelConfig(share=run.tc.indel_share),
                                    run.gen, run.pick)
        return diffusion_loss(model, batch, block, mask_id, run.tc.noise, run.gen, multi_turn=multi)


def _uncompile(run: Run, err: Exception) -> None:
    print(f"torch.compile failed ({type(err).__name__}: {str(err).splitlines()[0][:200]}); continuing eagerly")
    for layer in run.built.model.layers:
        layer._compiled_call_impl = None
    run.compiled = False


def train_step(run: Run, step: int, lr: float) -> dict:
    kind, batch, block, multi = _draw(run, step)
    try:
        loss = _loss(run, batch, block, multi)
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
    except Exception as err:  # noqa: BLE001 - only a compile failure is forgiven, once
        if not run.compiled:
            raise
        _uncompile(run, err)
        loss = _loss(run, batch, block, multi)
        run.opt.zero_grad(set_to_none=True)
        loss.backward()
    for group in run.opt.param_groups:
        group["lr"] = lr
    torch.nn.utils.clip_grad_norm_(run.built.model.parameters(), 1.0)
    run.opt.step()
    return {"step": step, "kind": kind, "block": block, "loss": loss.item(), "lr": lr,
            "max_load": round(run.balancer.step(), 2), "tokens": int((batch.prompt_len + batch.answer_len).sum())}


def train(tc: TrainConfig, progress: bool = True, on_ready=None, resume: bool = False) -> dict:
    """Build, train within the bounds, write the model directory; returns the summary (training.json).

    on_ready(run) is called once everything is built, before the first step (the CLI prints the plan).
    resume: continue from OUT/resume.pt (its step, seconds trained, log and random states)."""
    from tqdm import tqdm

    t_start = time.perf_counter()
    run = setup(tc, progress, resume)
    step, done = load_state(run) if resume else (0, 0.0)
    prep_seconds = time.perf_counter() - t_start
    if on_ready is not None:
        on_ready(run)
    budget, t0, last_ckpt = tc.minutes * 60.0, time.perf_counter() - done, time.perf_counter()
    bar = tqdm(total=tc.steps, initial=step, disable=not progress, desc="train", unit="step", mininterval=5.0)
    while True:
        elapsed = time.perf_counter() - t0
        frac = max(elapsed / budget, step / tc.steps if tc.steps else 0.0)
        if frac >= 1.0:
            break
        record = train_step(run, step, lr_at(tc, step, frac))
        run.log.append(record | {"seconds": round(elapsed, 2)})
        bar.update(1)
        bar.set_postfix(kind=record["kind"][:4], loss=f"{record['loss']:.3f}", min=f"{elapsed / 60:.1f}")
        step += 1
        if tc.checkpoint_minutes and time.perf_counter() - last_ckpt > tc.checkpoint_minutes * 60:
            checkpoint(run, step, time.perf_counter() - t0)
            last_ckpt = time.perf_counter()
    bar.close()
    if tc.checkpoint_minutes:
        checkpoint(run, step, time.perf_counter() - t0)
    return finish(run, time.perf_counter() - t0, prep_seconds)


def checkpoint(run: Run, step: int, seconds: float) -> None:
    """Held-out loss point, loadable model directories (latest and per-minute copy), resumable state."""
    recent = [r for r in run.log[-50:] if r["kind"] != "task"]
    point = {"minutes": round(seconds / 60, 2), "step": step, "held_out_loss": round(held_out_loss(
        run, run.built.held_out), 4), "train_loss": round(sum(r["loss"] for r in recent) / max(len(recent), 1), 4),
        "tokens": sum(r.get("tokens", 0) for r in run.log)}
    point["dir"] = f"{seconds / 60:05.1f}min"  # OUT/checkpoints/DIR
    run.curve.append(point)
    save_dir(run, Path(run.tc.out) / "checkpoint")
    save_dir(run, Path(run.tc.out) / "checkpoints" / point["dir"])
    save_state(run, step, seconds)
    print(f"\ncheckpoint {json.dumps(point)}", flush=True)


def save_dir(run: Run, out: Path) -> Path:
    """The model in its final format: shards + index, config, tokenizer, presets.json."""
    hf, model = run.built.tokenizer, run.built.model
    save_sharded(model, out, extra_config={"mask_token_id": hf.mask_token_id, "eos_token_id": hf.eos_token_id,
                                           "pad_token_id": hf.eos_token_id, "name": f"llada2-{run.tc.preset}-moe"})
    if out != Path(run.tc.out):  # the output directory got its tokenizer when it was built
        save_tokenizer(hf.backend_tokenizer, out)
    write_presets(decoding_presets(run.tc), out)
    preset = TRAINING_PRESETS.get(run.tc.preset)
    if preset is not None and preset.knows:
        (out / MODEL_INFO).write_text(json.dumps({"knows": preset.knows}, indent=2) + "\n")
    return out


def finish(run: Run, seconds: float, prep_seconds: float) -> dict:
    from .recipes import param_counts

    out, log = Path(run.tc.out), run.log
    run.built.model.eval()
    save_dir(run, out)
    write_csv(log, out)
    plot_loss(log, out, f"Training loss ({run.tc.preset})")
    total, active = param_counts(run.built.model.config)
    kinds = list(dict.fromkeys(r["kind"] for r in log))
    ends = {k: loss_ends(log, k) for k in kinds}  # (first tenth, last tenth) mean loss of each kind
    summary = {"preset": run.tc.preset, "config": _jsonable(asdict(run.tc)), "device": device_name(run.device),
               "device_type": run.device.type,
               "compiled": run.compiled, "steps": len(log), "seconds": round(seconds, 1),
               "prep_seconds": round(prep_seconds, 1), "parameters": total, "active_parameters": active,
               "data": run.built.data, "batches": {k: sum(r["kind"] == k for r in log) for k in kinds},
               "first_loss": {k: e[0] for k, e in ends.items()}, "final_loss": {k: e[1] for k, e in ends.items()},
               "tokens": sum(r.get("tokens", 0) for r in log), "curve": run.curve}
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} thread(s))"


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return list(value) if isinstance(value, tuple) else value
