"""Shared test fixtures: the reference checkpoint, and a tiny random model with a real tokenizer; the markers.

Sizes are odd on purpose (vocab from a small BPE, hidden 48, 3 heads) so that shape bugs fail loudly.
Real LLaDA2.1-mini: hidden 2048, 20 layers, 256 experts top-8.

Markers (pytest.ini), given here by file or test: `browser` (drives Chromium), `slow` (tens of seconds or more
on 2 shared cores: soaks, training runs, HumanEval, interpreted kernels, ranks under torchrun, sweeps through the
app), `gpu` (needs CUDA: skipped without it). The loop while editing is
`python -m pytest -m "not browser and not slow"` (under two minutes here, `fast_lane` in
bench/results/test-walls-8bb8efe.json).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import llada  # noqa: F401  (before torch: its OpenMP setting, llada/__init__.py)

# idle OpenMP threads sleep instead of spinning: on shared cores (parallel workers, the browser, servers) a
# spinning thread takes the core its partner needs (a two-thread test ran 25 s passive, minutes spinning)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads OpenMP
import torch  # noqa: E402

if not torch.cuda.is_available():  # no GPU: Triton kernels run under the CPU interpreter (set before import)
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(1)  # tiny models: OpenMP threads spin-waiting on shared cores only slow them down


BROWSER = "test_browser"  # file names starting so drive Chromium
SLOW = {  # file, or file::test -> why it takes long (tens of seconds or more on 2 shared cores, --durations)
    "test_engine_self_check.py": "the fast engine's self-check and decode check through the Triton interpreter",
    "test_engine_fallback.py": "the fast engine's self-check, faults planted, through the Triton interpreter",
    "test_engine_select.py::test_cli_says_on_stderr_which_engine_runs": "the CLI in a fresh process",
    "test_engine_select.py::test_cli_refuses_fast_without_cuda_in_one_error_line": "the CLI in a fresh process",
    "test_graphs_fast.py": "the fast engine's golden decode through the Triton interpreter, on the static path",
    "test_kernels_aot.py": "every kernel compiled for three GPUs through ptxas",
    "test_kernels_census.py": "Triton kernels run by the CPU interpreter",
    "test_kernels_fused_ops.py": "Triton kernels run by the CPU interpreter",
    "test_kernels_moe.py": "Triton kernels run by the CPU interpreter",
    "test_kernels_poison.py": "Triton kernels run by the CPU interpreter, every address checked",
    "test_bench_decode.py": "a benchmark's smoke run",
    "test_bench_kernels.py": "a benchmark's smoke run (interpreted kernels, tuning)",
    "test_bench_load.py": "a benchmark's smoke run: a replica written and loaded in a fresh process",
    "test_bench_stream.py": "a benchmark's smoke run on the embedded model",
    "test_batch_embedded.py": "every mode of the embedded model, in float64 and float32 on one thread, float32 on two",
    "test_batch_eval.py": "evaluations run batched and one by one",
    "test_fp8_checkpoint.py": "checkpoint conversions in fresh processes",
    "test_int8_checkpoint.py": "replicas written, converted and loaded, one load in a fresh process",
    "test_bench_int8.py": "a benchmark's smoke run: four fresh processes",
    "test_hub.py::test_offline_without_a_cache_fails_within_seconds": "the CLI in a fresh process",
    "test_replica.py": "replica checkpoints written and loaded",
    "test_humaneval.py": "HumanEval runs of the embedded model",
    "test_humaneval_agree.py": "HumanEval+ scored by this harness and by EvalPlus",
    "test_humaneval_task.py": "HumanEval items decoded and run in the sandbox",
    "test_train_run.py": "training runs",
    "test_memory_soak.py": "a soak: repeated visits while the heap is watched",
    "test_soak.py": "a soak: visitors against a served app",
    "test_reliability.py": "the app under many and concurrent sessions",
    "test_zerogpu.py": "the Space's app started in a fresh process",
    "test_lease.py::test_dry_run_brings_back_few_small_files_within_budget": "the lease's dry run: two minutes",
    "test_kernels_router_split.py": "Triton kernels run by the CPU interpreter",
}
RANKS = "ranks started by torchrun: each a fresh process that imports torch and loads a model"
SLOW |= dict.fromkeys((
    "test_dist.py::test_two_ranks_in_float64_decode_as_one_process",
    "test_dist.py::test_two_ranks_in_float64_decode_the_replicas_as_one_process",
    "test_dist.py::test_a_world_size_that_does_not_divide_the_experts_is_one_error",
    "test_dist.py::test_ranks_agree_on_errors_and_take_rank_0s_decisions",
    "test_dist.py::test_a_checkpoint_only_one_rank_cannot_read_stops_every_rank",
    "test_dist_app.py",
    "test_dist_eval.py::test_two_ranks_write_the_report_of_one_process",
    "test_dist_eval.py::test_two_ranks_write_the_rows_of_one_process_in_the_problems_order",
    "test_dist_eval.py::test_two_ranks_measure_the_sweep_of_one_process",
    "test_dist_lost.py::test_a_rank_that_dies_mid_run_ends_every_rank_with_a_clear_error",
    "test_dist_quantized.py::test_two_ranks_decode_quantized_models_as_one_process",
    "test_dist_serve.py::test_rank_0_decodes_alone_while_rank_1_serves_its_experts",
), RANKS)
GPU_REASON = "needs a CUDA GPU"
# files started first, in this order (pytest.ini hands whole files to its workers, in collection order, with
# `--no-loadscope-reorder`): the longest first, so that none of them starts last and keeps the run going alone
# (a worker that finishes takes the next longest). Ranked by wall seconds in a whole run (the sum of a file's
# tests' --durations, bench/results/test-walls-*.json): most of the suite's wall is waiting (a browser test
# waits on Chromium and on replays drawn at their pace: the Learn tabs 180 s of wall for 15 CPU s), so a file's
# wall, not its CPU, decides when it ends. The Triton AOT compile stays second: 30 CPU s with a warm cache, 125
# with a cold one. Every other file follows in its collected order.
FIRST = ("test_browser_learn.py", "test_kernels_aot.py", "test_browser_moves.py", "test_lease.py",
         "test_memory_soak.py", "test_docs_commands.py", "test_browser_phone.py", "test_soak.py", "test_ui_pace.py",
         "test_browser.py", "test_browser_first_visit.py", "test_browser_explorer.py", "test_engine_self_check.py",
         "test_dist.py", "test_docs_commands_distributed.py", "test_bench_int8.py", "test_reliability.py",
         "test_dist_app.py", "test_browser_scrub.py", "test_batch_eval.py", "test_dist_eval.py",
         "test_graphs_fast.py", "test_kernels_router_split.py", "test_int8_checkpoint.py", "test_batch_embedded.py",
         "test_browser_scrub_tabs.py", "test_lease_next.py", "test_humaneval.py", "test_docs_commands_benchmarks.py",
         "test_token_ids22.py", "test_browser_contrast.py", "test_sandbox.py", "test_train_run.py",
         "test_fast_layers.py", "test_dist_quantized.py", "test_bench_stream.py")


def pytest_collection_modifyitems(config, items):
    """Mark each test by its file (browser, slow), skip the `gpu` ones where torch sees no CUDA, and put the
    files of FIRST first (a stable sort: each file's tests keep their order)."""
    items.sort(key=lambda item: FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST))
    for item in items:
        name = item.path.name
        if name.startswith(BROWSER):
            item.add_marker(pytest.mark.browser)
        if name in SLOW or f"{name}::{item.originalname}" in SLOW:
            item.add_marker(pytest.mark.slow)
        gpu = item.get_closest_marker("gpu")
        if gpu is not None and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason=gpu.kwargs.get("reason", GPU_REASON)))


@pytest.fixture(autouse=True, scope="session")
def generous_budget():
    """A loaded test machine must not hit the playground's wall-clock budget by accident; the tests of the
    budget set their own."""
    from ui import runs

    before = runs.BUDGET
    runs.BUDGET = runs.Budget(forwards=before.forwards, seconds=600.0)
    yield
    runs.BUDGET = before


@pytest.fixture(autouse=True)
def keep_threads():
    """Each test starts on the thread count set above: the benchmarks' `--threads` sets a process-wide value."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "llada2_tiny_ref"

TINY_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "12 + 34 = 46\nsort: 3 1 2 -> 1 2 3\nreverse: abc -> cba\n",
    "The quick brown fox jumps over the lazy dog. <b>bold</b> & 'quotes'\n",
]


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The reference checkpoint and its golden traces (tests/fixtures/llada2_tiny_ref, see its README)."""
    missing = [n for n in ("config.json", "model.safetensors", "golden.json", "golden_forward.safetensors")
               if not (FIXTURE / n).exists()]
    if missing:
        pytest.fail(f"the reference fixture is incomplete: {FIXTURE} lacks {', '.join(missing)}")
    return FIXTURE


@pytest.fixture(scope="session")
def ref_model(fixture_dir):
    """The reference checkpoint, loaded once (fp32 on CPU)."""
    from llada.weights.checkpoint import load_model

    return load_model(fixture_dir)


@pytest.fixture
def broken(tmp_path, fixture_dir):
    """A writable copy of the reference checkpoint, for tests that break it."""
    import shutil

    d = tmp_path / "ckpt"
    shutil.copytree(fixture_dir, d)
    for f in d.iterdir():
        f.chmod(0o644)
    return d


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (tests/chromium.py skips or fails a module without it)."""
    from chromium import ARGS, ARTIFACTS, CHROMIUM, sync_api

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def golden(fixture_dir) -> dict:
    return json.loads((fixture_dir / "golden.json").read_text())


def train_tiny_tokenizer(out: Path, vocab_size: int = 300) -> None:
    """A byte-level BPE with <|endoftext|> and <|mask|>, saved for transformers.AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|mask|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TINY_TEXT * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   mask_token="<|mask|>")
    fast.save_pretrained(str(out))


def make_tiny_model_dir(out: Path, seed: int = 0, **overrides) -> Path:
    from llada.weights.checkpoint import save_model
    from llada.config import ModelConfig
    from llada.model import LLaDA2MoE

    out.mkdir(parents=True, exist_ok=True)
    train_tiny_tokenizer(out)
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    n_vocab = max(len(vocab) + 2, 260)
    cfg = ModelConfig(**({"vocab_size": n_vocab, "hidden_size": 48, "num_hidden_layers": 3,
                          "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 16,
                          "partial_rotary_factor": 0.5, "intermediate_size": 72, "moe_intermediate_size": 24,
                          "num_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
                          "num_shared_experts": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.5,
                          "max_position_embeddings": 1024, "rope_theta": 10000.0} | overrides))
    model = LLaDA2MoE(cfg).init_weights(std=0.2, seed=seed)  # large weights: a random model that edits often
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(out))
    save_model(model, out, extra_config={"eos_token_id": hf.eos_token_id, "mask_token_id": hf.mask_token_id,
                                         "name": "tiny-random"})
    return out


@pytest.fixture(scope="session")
def replica_dir(tmp_path_factory) -> Path:
    """LLaDA2.1-mini scaled down in the real format (llada.weights.replica): published config keys, sharded bf16
    with per-expert names and an index, vocab 157184 with <|endoftext|> 156892 and <|mask|> 156895, Ling template."""
    from llada.weights.replica import write_replica

    return write_replica(tmp_path_factory.mktemp("replica") / "LLaDA2.1-mini", "tiny")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random LLaDA2 MoE checkpoint (Hugging Face layout) with a real BPE tokenizer."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))
