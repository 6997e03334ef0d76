"""Train the embedded model from scratch on this machine: `python -m llada.train --out assets/model`.

Steps, all local (nothing is downloaded):

1. data: functions of the interpreter's standard library (`corpus`) and synthetic tasks (`tasks`);
2. tokenizer: a byte-level BPE trained on that text (`bpe`), with `<|endoftext|>` and `<|mask|>`;
3. model: a small LLaDA2 MoE (first layer dense, then routed experts in groups, a shared expert);
4. objective: M2T + T2T under the block-causal [clean ; noisy] layout (`objective`), optionally with
   multi-turn forward (the model repairs its own drafts);
5. router balance without an auxiliary loss: after each step every MoE layer nudges `expert_bias` up
   for experts that got fewer tokens than average and down for busier ones (sign update);
6. output: config.json + model.safetensors (Hugging Face layout), tokenizer files, presets.json,
   loss.csv and loss.png, training.json; then a load-and-generate check through `Pipeline`.

Training is bounded by wall time (`--minutes`) or steps (`--steps`); the learning rate follows a
warmup + cosine schedule over whichever bound comes first. `--init DIR` continues from a saved model
(its tokenizer and weights) instead of starting from scratch. One thread by default: on cores shared
with other jobs, two OpenMP threads spend most of their time waiting for each other.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .bpe import build_tokenizer, load_fast, save_tokenizer
from ..checkpoint import load_model, save_model
from ..config import ModelConfig
from .corpus import load_functions
from .data import CodeStream, TaskStream
from ..model import LLaDA2MoE, Router
from ..presets import write_presets
from .objective import NoiseConfig, diffusion_loss
from ..eval.tasks import TASKS, TRAIN_WEIGHTS, sample

PRESETS = {  # decoding modes tuned for the shipped model on training-split items (see its README)
    "S": {"threshold": 0.05, "editing_threshold": 0.0, "max_post_steps": 4, "block_length": 32,
          "eos_early_stop": True},
    "Q": {"threshold": 0.9, "editing_threshold": 0.5, "max_post_steps": 4, "block_length": 16,
          "eos_early_stop": True},
    "M2T": {"threshold": 0.95, "editing_threshold": None, "max_post_steps": 4, "block_length": 16,
            "eos_early_stop": True},
}


@dataclass
class TrainConfig:
    out: str = "assets/model"
    seed: int = 0
    minutes: float = 35.0
    steps: int | None = None  # stop after this many steps (default: time bound only)
    vocab_size: int = 1024
    hidden: int = 192
    layers: int = 4
    heads: int = 6
    kv_heads: int = 2
    experts: int = 16
    top_k: int = 2
    groups: int = 4
    topk_group: int = 2
    expert_width: int = 96
    dense_width: int = 384
    block_lengths: tuple[int, ...] = (16, 16, 16, 32)
    task_length: int = 32
    code_length: int = 128
    task_batch: int = 32
    code_batch: int = 8
    code_every: int = 5  # one code batch after every (code_every - 1) task batches
    task_weights: str = ",".join(f"{k}={v}" for k, v in TRAIN_WEIGHTS.items())  # share of each task
    code_functions: int | None = None  # limit the corpus (default: every train function)
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    multi_turn: float = 0.25  # probability that a task batch is drafted by the model first
    bias_rate: float = 1e-3
    init: str | None = None  # continue from this model directory (its tokenizer and weights)
    threads: int = 1  # on shared cores one thread beats two: OpenMP threads wait on each other
    noise: NoiseConfig = field(default_factory=NoiseConfig)


def model_config(tc: TrainConfig, vocab: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab, hidden_size=tc.hidden, num_hidden_layers=tc.layers,
        num_attention_heads=tc.heads, num_key_value_heads=tc.kv_heads, head_dim=tc.hidden // tc.heads,
        partial_rotary_factor=0.5, rope_theta=10000.0, intermediate_size=tc.dense_width,
        moe_intermediate_size=tc.expert_width, num_experts=tc.experts, num_experts_per_tok=tc.top_k,
        n_group=tc.groups, topk_group=tc.topk_group, num_shared_experts=1, first_k_dense_replace=1,
        routed_scaling_factor=2.5, max_position_embeddings=1024)


class ExpertBalancer:
    """Aux-loss-free load balance: count routed tokens per expert, then sign-update `expert_bias`."""

    def __init__(self, model: LLaDA2MoE, rate: float):
        self.rate, self.counts = rate, {}
        self.routers = [m for m in model.modules() if isinstance(m, Router)]
        for router in self.routers:
            router.register_forward_hook(self._count)

    def _count(self, router, inputs, output) -> None:
        if torch.is_grad_enabled():  # count the training forward only
            ids = output[0]
            self.counts[router] = torch.bincount(ids.flatten(), minlength=router.expert_bias.numel()).float()

    def step(self) -> float:
        """Update the biases; returns the worst max/mean load ratio seen this step."""
        worst = 1.0
        for router, load in self.counts.items():
            router.expert_bias += self.rate * torch.sign(load.mean() - load)
            worst = max(worst, float(load.max() / load.mean().clamp(min=1)))
        self.counts.clear()
        return worst


def lr_at(tc: TrainConfig, step: int, frac: float) -> float:
    """Linear warmup over `warmup` steps, then cosine to 10% along the run's fraction `frac`."""
    warm = min(1.0, (step + 1) / tc.warmup)
    return tc.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def tokenizer_texts(tc: TrainConfig, functions) -> list[str]:
    """What the BPE learns from: the code corpus plus task text (digits, words, names)."""
    rng = random.Random(f"bpe/{tc.seed}")
    texts = [ex.text for ex in functions]
    for task in TASKS:
        texts += [it.prompt + it.answer for it in (sample(task, rng, "train") for _ in range(2000))]
    return texts


def prepare(tc: TrainConfig):
    """Corpus, tokenizer (saved into tc.out), model and the two batch streams."""
    out = Path(tc.out)
    out.mkdir(parents=True, exist_ok=True)
    functions = load_functions("train", limit=tc.code_functions)
    torch.manual_seed(tc.seed)
    if tc.init:
        save_tokenizer(load_fast(tc.init).backend_tokenizer, out)
        model = load_model(tc.init).train().requires_grad_(True)
    else:
        save_tokenizer(build_tokenizer(tokenizer_texts(tc, functions), tc.vocab_size), out)
        model = None
    hf = load_fast(out)
    if model is None:
        model = LLaDA2MoE(model_config(tc, len(hf))).init_weights(seed=tc.seed)
    weights = {k: float(v) for k, v in (kv.split("=") for kv in tc.task_weights.split(","))}
    tasks = TaskStream(hf, hf.eos_token_id, tc.task_length, tc.task_batch, tc.seed, weights)
    code = CodeStream(hf, hf.eos_token_id, tc.code_length, tc.code_batch, tc.seed, functions)
    return hf, model, tasks, code


def train(tc: TrainConfig, progress: bool = True) -> dict:
    """Run the whole recipe; returns the training summary also written to training.json."""
    from tqdm import tqdm

    torch.set_num_threads(tc.threads)
    hf, model, tasks, code = prepare(tc)
    mask_id = hf.mask_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=(0.9, 0.95), weight_decay=tc.weight_decay)
    balancer = ExpertBalancer(model, tc.bias_rate)
    gen_rng = torch.Generator().manual_seed(tc.seed)
    pick = random.Random(f"blocks/{tc.seed}")
    budget, t0, log, step = tc.minutes * 60.0, time.perf_counter(), [], 0
    bar = tqdm(total=tc.steps, disable=not progress, desc="train", unit="step")
    model.train()
    while True:
        elapsed = time.perf_counter() - t0
        frac = max(elapsed / budget, step / tc.steps if tc.steps else 0.0)
        if frac >= 1.0:
            break
        kind, batch, block, multi = _draw(tc, step, tasks, code, pick)
        loss = diffusion_loss(model, batch, block, mask_id, tc.noise, gen_rng, multi_turn=multi)
        _optimize(model, opt, loss, lr_at(tc, step, frac))
        log.append({"step": step, "seconds": round(elapsed, 2), "loss": loss.item(), "kind": kind,
                    "lr": opt.param_groups[0]["lr"], "max_load": round(balancer.step(), 2)})
        bar.update(1)
        bar.set_postfix(loss=f"{log[-1]['loss']:.3f}", min=f"{elapsed / 60:.1f}")
        step += 1
    bar.close()
    return finish(tc, model, hf, code, log, time.perf_counter() - t0)


def _draw(tc: TrainConfig, step: int, tasks: TaskStream, code: CodeStream, pick: random.Random):
    """The step's batch: kind ("task" or "code"), Batch, block length, and whether to self-draft."""
    is_code = tc.code_every > 0 and step % tc.code_every == tc.code_every - 1
    batch = code.next() if is_code else tasks.next()
    block = pick.choice([b for b in tc.block_lengths if batch.ids.shape[1] % b == 0])
    multi = not is_code and pick.random() < tc.multi_turn and step > tc.warmup
    return ("code" if is_code else "task"), batch, block, multi


def _optimize(model: LLaDA2MoE, opt: torch.optim.Optimizer, loss: torch.Tensor, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def finish(tc: TrainConfig, model: LLaDA2MoE, hf, code: CodeStream, log: list[dict], seconds: float) -> dict:
    out = Path(tc.out)
    model.eval()
    save_model(model, out, extra_config={"mask_token_id": hf.mask_token_id, "eos_token_id": hf.eos_token_id,
                                         "pad_token_id": hf.eos_token_id, "name": "llada2-tiny-moe"})
    write_presets(PRESETS, out)
    write_log(log, out)
    summary = {"config": asdict(tc), "steps": len(log), "seconds": round(seconds, 1),
               "parameters": sum(p.numel() for p in model.parameters()),
               "code_functions": len(code.rows), "code_tokens": code.tokens,
               "final_loss": {k: _tail_mean(log, k) for k in ("task", "code")}}
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _tail_mean(log: list[dict], kind: str, n: int = 50) -> float | None:
    values = [r["loss"] for r in log if r["kind"] == kind][-n:]
    return round(sum(values) / len(values), 4) if values else None


def write_log(log: list[dict], out: Path) -> None:
    """loss.csv and loss.png (task and code loss, smoothed) in the model directory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(out / "loss.csv", "w") as f:
        f.write("step,seconds,kind,loss,lr,max_load\n")
        for r in log:
            f.write(f"{r['step']},{r['seconds']},{r['kind']},{r['loss']:.5f},{r['lr']:.6g},{r['max_load']}\n")
    fig, ax = plt.subplots(figsize=(7, 4))
    for kind in ("task", "code"):
        rows = [r for r in log if r["kind"] == kind]
        if rows:
            ax.plot([r["step"] for r in rows], _smooth([r["loss"] for r in rows]), label=f"{kind} batches")
    ax.set_xlabel("step")
    ax.set_ylabel("M2T + T2T loss (smoothed)")
    ax.set_yscale("log")
    ax.set_title("Training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=100)
    plt.close(fig)


def _smooth(values: list[float], beta: float = 0.95) -> list[float]:
    out, avg = [], None
    for v in values:
        avg = v if avg is None else beta * avg + (1 - beta) * v
        out.append(avg)
    return out


def check_generation(out: str, prompt: str = "def fibonacci(n):\n") -> str:
    """Load the saved directory the way the playground does and generate once (S mode)."""
    from ..pipeline import Pipeline

    pipe = Pipeline.load(out)
    return pipe.generate(pipe.encode(prompt), pipe.config("S", gen_length=64)).text


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    tc = TrainConfig()
    ap = argparse.ArgumentParser(prog="python -m llada.train", description=__doc__.split("\n")[0])
    for name, value in asdict(tc).items():
        if name in ("noise", "block_lengths"):
            continue
        kind = type(value) if value is not None else (str if name == "init" else int)
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=value)
    ap.add_argument("--block-lengths", default=",".join(map(str, tc.block_lengths)))
    args = vars(ap.parse_args(argv))
    args["block_lengths"] = tuple(int(b) for b in args["block_lengths"].split(","))
    return TrainConfig(**args)


def main(argv: list[str] | None = None) -> None:
    tc = parse_args(argv)
    summary = train(tc)
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    print("sample:", repr(check_generation(tc.out)))


if __name__ == "__main__":
    main()
