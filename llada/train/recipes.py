"""Training presets (`python -m llada.train --preset NAME`) and the arithmetic that sizes them.

Each preset is a set of TrainConfig values plus the decoding presets the trained model ships
(its presets.json). Any value can still be overridden on the command line (`--minutes 5`).

    tiny   about a minute on a CPU: the whole pipeline at toy size (tests run it on a smaller corpus)
    v1     the first stages of the CPU-trained model v4 replaced (3.8 M parameters, CPU, tasks first; its card:
           assets/model/history-cpu/)
    code   the Python-writing model: ~29 M parameters (~8 M active), 11 minutes of training on one
           H100/H200 in bf16 with torch.compile, official S / Q presets
    cpu    the Python-writing model for a shared 2-core CPU: 4.2 M parameters (1.9 M active), a 2,048-token
           vocabulary, rows of 128 tokens with packed functions, checkpoints every 5 minutes, `--resume`.
           One thread: with the cores shared by ~10 runnable jobs, two OpenMP threads ran a step in ~40 s
           against ~3 s for one thread (the same model and batch, minutes apart)
    lease  v4, the embedded assets/model, trained by a GPU lease (`llada.bench.lease_train`): 5.8 M parameters
           (3.7 M active), bf16 shards of 11.6 MB, a 4,096-token vocabulary, 40% of the steps on tasks

Sizing (`plan`): parameters are counted from the config (total, and active = what one token
touches: every dense weight, the shared expert and top_k of the routed experts), and a training step
costs 3x its forward FLOPs (backward = 2x forward), where the forward runs 2L positions per row (clean
and noisy copies), the LM head only on the noisy L, and attention on the full 2L x 2L layout.

Sizing of `lease` (v4). The first lease trained `code` at 6 layers and 16 experts (14.1 M parameters,
28 MB of shards) for 310 s on an H200, eagerly: 70.5 M tokens at 227,900 tokens/s. It wrote far better
Python than assets/model but lost the task track (82.5% against 98%, addition 30%: 20% of its steps
were task steps), decoded under 60 tokens/s in S on the shared 2-core CPU, and was too large to ship
(the tree travels with ~27 MB of data within 64 MiB). So v4 halves the vocabulary (embeddings and LM
head: 2.1 M parameters instead of 4.2 M), keeps hidden 256, has 4 layers instead of 6 (per-layer work
dominates a CPU decode at this size) and experts half as wide (64): 5.80 M parameters, 3.73 M active.
A pilot here (random weights, one cached forward of a 32-token block over 96 tokens, 2 threads, the three
shapes interleaved, the three quietest rounds at load average ~5.8): assets/model 12.5-14.0 ms, v3 31-32
ms, v4 11.9-19.0 ms. v3 reached 25-57 tokens/s in S at gen 128 under such load (TPF 2.4), so v4, at about
half v3's forward time, should pass 60 if it drafts as many tokens per forward: an estimate until it is
trained and measured (`python -m llada.bench stream`).
Task steps are 40% (`code_share` 0.6, what the shipped model's fourth stage kept its 98% with), addition
weighted 4 of 8. Its GPU rate is an estimate, not a measurement: at these widths a step is bound by
kernel launches, which scale with the layers (6 -> 4), so ~1.5x the first lease's rate, ~340,000
tokens/s eager; torch.compile (on for CUDA; the trainer continues eagerly if compiling fails) should
add to that after its first minute. About 4 minutes of training in the `next` lease plan: ~80 M tokens.

Time budget of `code` on one H100 (an estimate: no GPU was at hand when it was sized). Training is
bounded at 11 minutes by the clock. A code step (128 x 256 tokens) is 2.85 TFLOP; at an assumed 60
TFLOP/s sustained (about 6% of the H100's dense bf16 peak: hidden-256 matmuls and grouped expert
GEMMs run far below peak) about 15,000 steps fit, ~400 M code tokens, ~10 passes over a 41 M-token
corpus (diffusion training keeps learning over many passes, each pass masking differently). Building
corpus, tokenizer and rows took 8.5 CPU-minutes on a shared 2-core machine; parsing runs in a process
pool and tokenizing in Rust threads, so 16 cores should need 1-3 minutes. The evaluation decodes about
30,000 forwards (50 items x 4 tasks and 48 functions, five modes each) at roughly 10 ms each on a GPU
(batch 1, the engine's expert loop): about 5 minutes. Total: under 20 minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ModelConfig
from ..presets import OFFICIAL

SHIPPED_DECODING = {  # the shipped model's own modes, tuned on training-split items (see assets/model/README.md)
    "S": {"threshold": 0.05, "editing_threshold": 0.0, "max_post_steps": 4, "block_length": 32,
          "eos_early_stop": True},
    "Q": {"threshold": 0.9, "editing_threshold": 0.5, "max_post_steps": 4, "block_length": 16,
          "eos_early_stop": True},
    "M2T": {"threshold": 0.95, "editing_threshold": None, "max_post_steps": 4, "block_length": 16,
            "eos_early_stop": True},
}
OFFICIAL_DECODING = {mode: dict(OFFICIAL[mode], eos_early_stop=True) for mode in ("S", "Q", "M2T")}
ASSUMED_TFLOPS = {"cuda": 60.0, "cpu": 0.05}  # sustained bf16 / fp32 rate assumed for the step-count estimate


@dataclass(frozen=True)
class TrainingPreset:
    summary: str
    values: dict  # TrainConfig fields
    decoding: dict[str, dict]  # written as presets.json
    knows: str = ""  # one line on what the trained model can do (model_info.json, shown by the playground)


LEASE_TASK_WEIGHTS = "add=4,sort=2,reverse=1,rename=1"  # addition is the task the first lease's model lost
CODE_KNOWS = ("Writes short Python function bodies from a signature and docstring, and solves four tasks: "
              "addition (317+985=), sorting digits (sort 73914=), reversing words (reverse red fox sun:) "
              "and repeating a made-up name (def square(kelto):).")


TRAINING_PRESETS: dict[str, TrainingPreset] = {
    "tiny": TrainingPreset(
        "the whole pipeline at toy size, about a minute on a CPU",
        dict(out="runs/tiny", minutes=2.0, steps=60, device="cpu", sources=("stdlib",), max_files=60,
             bpe_chars=400_000, vocab_size=512, hidden=64, layers=2, heads=4, kv_heads=2, experts=16, top_k=2,
             groups=4, topk_group=2, expert_width=32, dense_width=128, block_lengths=(16, 32), code_length=64,
             code_batch=8, task_batch=16, code_share=0.5, window_share=0.5, lr=3e-3, warmup=10,
             checkpoint_minutes=0.0, eval_n=2, code_n=4, samples=2, eval_gen_length=32),
        OFFICIAL_DECODING),
    "v1": TrainingPreset(
        "the CPU-trained model's first recipe (assets/model/history-cpu): 3.8 M parameters, tasks first, 35 minutes",
        dict(out="runs/v1", minutes=35.0, device="cpu", sources=("stdlib",), window_share=0.0,
             bpe_chars=20_000_000, vocab_size=1024, hidden=192, layers=4, heads=6, kv_heads=2, experts=16,
             top_k=2, groups=4, topk_group=2, expert_width=96, dense_width=384, block_lengths=(16, 16, 16, 32),
             code_length=128, code_batch=8, task_batch=32, code_share=0.2, multi_turn=0.25, code_multi_turn=0.0,
             lr=2e-3, warmup=100, eval_n=100, code_n=100),
        SHIPPED_DECODING),
    "code": TrainingPreset(
        "the Python-writing model: 11 minutes of training on one H100/H200 (bf16, torch.compile)",
        dict(out="runs/code", minutes=11.0, device="auto", sources=("stdlib", "site-packages"),
             bpe_chars=40_000_000, vocab_size=8192, hidden=256, layers=8, heads=8, kv_heads=4, experts=32,
             top_k=2, groups=4, topk_group=2, expert_width=128, dense_width=512, block_lengths=(32, 32, 32, 64),
             code_length=256, code_batch=128, task_batch=512, code_share=0.8, window_share=0.5,
             multi_turn=0.25, code_multi_turn=0.2, lr=3e-3, warmup=300, checkpoint_minutes=4.0,
             eval_n=50, code_n=48),
        OFFICIAL_DECODING, CODE_KNOWS),
    "lease": TrainingPreset(
        "v4, the embedded default a GPU lease trains: 5.8 M parameters, 2 task steps in 5 (bf16, torch.compile)",
        dict(out="runs/lease", minutes=4.0, device="auto", sources=("stdlib", "site-packages"),
             bpe_chars=40_000_000, vocab_size=4096, hidden=256, layers=4, heads=8, kv_heads=4, experts=16,
             top_k=2, groups=4, topk_group=2, expert_width=64, dense_width=512, block_lengths=(32, 32, 32, 64),
             code_length=256, code_batch=128, task_batch=512, code_share=0.6, window_share=0.5,
             task_weights=LEASE_TASK_WEIGHTS, multi_turn=0.25, code_multi_turn=0.2, lr=3e-3, warmup=300,
             checkpoint_minutes=0.0, eval_n=50, code_n=48),
        OFFICIAL_DECODING, CODE_KNOWS),
    "cpu": TrainingPreset(
        "the Python-writing model sized for a 2-core CPU: resumable, checkpoints every 5 minutes",
        dict(out="runs/cpu", minutes=70.0, device="cpu", threads=1, sources=("stdlib", "site-packages"),
             bpe_chars=8_000_000, vocab_size=2048, hidden=192, layers=4, heads=6, kv_heads=2, experts=16,
             top_k=2, groups=4, topk_group=2, expert_width=96, dense_width=384, block_lengths=(32,),
             code_length=128, code_batch=16, task_batch=32, code_share=0.8, window_share=0.3,
             multi_turn=0.25, code_multi_turn=0.0, lr=2e-3, warmup=100, checkpoint_minutes=5.0,
             eval_n=100, code_n=64, pack=True),
        OFFICIAL_DECODING, CODE_KNOWS),
}


@dataclass(frozen=True)
class Sizes:
    total: int  # every parameter
    active: int  # parameters one token uses (embedding row and LM head included)
    step_flops: float  # one training step of a code batch, forward + backward


def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(total, active) parameters of a llada2_moe config, counted from its shapes."""
    H, D = cfg.hidden_size, cfg.head_dim
    attn = H * (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * D + cfg.num_attention_heads * D * H
    norms = 2 * H + (2 * D if cfg.use_qk_norm else 0)
    expert = 3 * H * cfg.moe_intermediate_size
    shared = expert * cfg.num_shared_experts
    total = active = 2 * cfg.vocab_size * H + H  # embeddings, LM head, final norm
    for layer in range(cfg.num_hidden_layers):
        total, active = total + attn + norms, active + attn + norms
        if cfg.is_moe_layer(layer):
            router = cfg.num_experts * H
            total += router + shared + cfg.num_experts * expert
            active += router + shared + cfg.num_experts_per_tok * expert
        else:
            total, active = total + 3 * H * cfg.intermediate_size, active + 3 * H * cfg.intermediate_size
    return total, active


def step_flops(cfg: ModelConfig, rows: int, length: int) -> float:
    """FLOPs of one training step on (rows, length): 3x the forward of the [clean ; noisy] layout."""
    total, active = param_counts(cfg)
    body = active - 2 * cfg.vocab_size * cfg.hidden_size  # matmul weights outside embeddings and head
    per_row = 2 * (2 * length) * body + 2 * length * cfg.vocab_size * cfg.hidden_size
    per_row += cfg.num_hidden_layers * 4 * (2 * length) ** 2 * cfg.num_attention_heads * cfg.head_dim
    return 3.0 * rows * per_row


def sizes(cfg: ModelConfig, rows: int, length: int) -> Sizes:
    total, active = param_counts(cfg)
    return Sizes(total, active, step_flops(cfg, rows, length))


def estimated_steps(s: Sizes, minutes: float, device: str, code_share: float, task_cost: float) -> int:
    """Steps that fit in `minutes` at ASSUMED_TFLOPS (a task step costs `task_cost` of a code step)."""
    per_step = s.step_flops * (code_share + (1 - code_share) * task_cost)
    return int(minutes * 60 * ASSUMED_TFLOPS[device] * 1e12 / per_step)
