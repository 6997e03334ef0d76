"""Everything a training run needs before its first step, built on the machine that trains.

    corpus      the training split of the installed Python source (`corpus.build_corpus`)
    tokenizer   a byte-level BPE trained on a sample of it plus task text, saved into the output
                directory (`bpe`), or the tokenizer of `--init DIR`
    rows        the corpus as window rows and function rows, on the training device (`data`)
    model       a fresh `LLaDA2MoE` from the preset's sizes (`init_weights`), or the weights of `--init`

`Built.data` records the corpus size (files and tokens of both splits) for training.json and the card.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from ..weights.checkpoint import load_model
from ..config import ModelConfig
from ..data.sources import source_roots
from ..data.tasks import TASKS, sample
from ..model import LLaDA2MoE
from .bpe import build_tokenizer, load_fast, save_tokenizer
from .corpus import CodeCorpus, bpe_sample, build_corpus
from .data import CodeStream, Rows, TaskStream, encode_texts, function_rows, window_rows
from .pip_sources import PackageInfo, install, is_from
from .resume import load_rows, save_rows

HELD_OUT_ROWS = 64  # held-out function rows of the loss curve


@dataclass
class Built:
    tokenizer: object  # transformers PreTrainedTokenizerFast
    model: LLaDA2MoE
    tasks: TaskStream
    code: CodeStream
    data: dict
    held_out: Rows  # held-out function rows (one function per row) for the held-out loss


def model_config(tc, vocab: int) -> ModelConfig:
    """The llada2_moe config of a TrainConfig: first layer dense, the rest MoE with one shared expert."""
    return ModelConfig(
        vocab_size=vocab, hidden_size=tc.hidden, num_hidden_layers=tc.layers,
        num_attention_heads=tc.heads, num_key_value_heads=tc.kv_heads, head_dim=tc.hidden // tc.heads,
        partial_rotary_factor=0.5, rope_theta=10000.0, intermediate_size=tc.dense_width,
        moe_intermediate_size=tc.expert_width, num_experts=tc.experts, num_experts_per_tok=tc.top_k,
        n_group=tc.groups, topk_group=tc.topk_group, num_shared_experts=1, first_k_dense_replace=1,
        routed_scaling_factor=2.5, max_position_embeddings=1024)


def task_texts(seed: int, per_task: int = 2000) -> list[str]:
    """Task prompts and answers for the tokenizer (digits, words, made-up names)."""
    rng = random.Random(f"bpe/{seed}")
    return [it.prompt + it.answer for task in TASKS for it in (sample(task, rng, "train") for _ in range(per_task))]


def _tokenizer(tc, corpus: CodeCorpus, out: Path):
    if tc.init:
        save_tokenizer(load_fast(tc.init).backend_tokenizer, out)
    else:
        texts = bpe_sample(corpus, tc.bpe_chars, tc.seed) + task_texts(tc.seed)
        save_tokenizer(build_tokenizer(texts, tc.vocab_size), out)
    return load_fast(out)


def _empty(length: int) -> Rows:
    return Rows(torch.zeros(0, length, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                torch.zeros(0, dtype=torch.int32))


def _rows(tc, corpus: CodeCorpus, hf, progress: bool, packages: list[PackageInfo]) -> tuple[Rows, Rows, Rows, int, int]:
    """Window rows, function rows, held-out function rows, and the token counts of the training and
    held-out files (+ EOS each)."""
    eos, pack = hf.eos_token_id, max(tc.block_lengths) if tc.pack else 0
    tokens = encode_texts(hf, [f.text for f in corpus.files], progress, "tokenize train")
    train_tokens = sum(len(t) + 1 for t in tokens)
    windows = window_rows(tokens, tc.code_length, eos) if tc.window_share > 0 else _empty(tc.code_length)
    del tokens
    picked = [f for f in corpus.functions if _body_fits(f.body, tc.min_body_lines, tc.max_body_lines)]
    picked += [f for f in picked if is_from(f.key, packages)] * (tc.pip_repeat - 1)
    functions = function_rows(hf, picked, tc.code_length, eos, pack) if tc.window_share < 1 \
        else _empty(tc.code_length)
    held_out = sum(len(t) + 1 for t in encode_texts(hf, [f.text for f in corpus.held_out]))
    files = list(corpus.held_out)
    random.Random(f"held-out/{tc.seed}").shuffle(files)
    held_fns = []
    for f in files:  # parse held-out files in a seeded order until there are enough functions to pick from
        held_fns += _functions(f)
        if len(held_fns) >= 4 * HELD_OUT_ROWS:
            break
    random.Random(f"held-out/{tc.seed}").shuffle(held_fns)
    held_rows = function_rows(hf, held_fns[:HELD_OUT_ROWS], tc.code_length, eos)
    return windows, functions, held_rows, train_tokens, held_out


def _body_fits(body: str, least: int, most: int) -> bool:
    """A body of at least `least` and (most > 0) at most `most` non-blank lines."""
    lines = sum(1 for line in body.splitlines() if line.strip())
    return lines >= least and (most <= 0 or lines <= most)


def _functions(file) -> list:
    from ..data.code import functions_of

    try:
        return functions_of(file.key, file.text, scoped=False)
    except (SyntaxError, ValueError, RecursionError):
        return []


def _fresh_data(tc, out: Path, progress: bool):
    """Corpus, tokenizer and rows built from the installed source; the rows are saved to OUT/rows.pt."""
    packages = install(tuple(tc.pip_packages), out / "pip") if tc.pip_packages else []
    roots = tc.roots
    if packages:  # the installed sources (or the explicit roots) and the scratch folder beside them
        roots = [*(source_roots(tc.sources) if tc.roots is None else tc.roots), out / "pip"]
    corpus = build_corpus(tc.sources, roots, tc.max_files, progress=progress)
    hf = _tokenizer(tc, corpus, out)
    windows, functions, held_rows, train_tokens, held_out_tokens = _rows(tc, corpus, hf, progress, packages)
    data = {"sources": (list(tc.sources) if tc.roots is None else [str(r) for r in tc.roots])
            + [f"PyPI {p.name} {p.version} ({p.license})" for p in packages],
            "pip_packages": [p.summary() for p in packages],
            "roots": [str(r) for r in corpus.roots], "found": corpus.stats.found,
            "duplicates": corpus.stats.duplicates, "dropped": dict(corpus.stats.dropped),
            "train_files": len(corpus.files), "train_chars": corpus.chars, "train_tokens": train_tokens,
            "held_out_files": len(corpus.held_out), "held_out_tokens": held_out_tokens,
            "functions": len(corpus.functions), "function_rows": len(functions),
            "function_tokens": functions.content, "window_rows": len(windows), "vocab_size": len(hf)}
    save_rows(out, {"windows": windows, "functions": functions, "held_out": held_rows}, data)
    return hf, windows, functions, held_rows, data


def _saved_data(src: Path, out: Path):
    """Tokenizer and rows of an earlier run (`--resume`: OUT itself; `--data-from DIR`)."""
    rows, data = load_rows(src)
    if src != out:
        save_tokenizer(load_fast(src).backend_tokenizer, out)
        save_rows(out, rows, data)
    return load_fast(out), rows["windows"], rows["functions"], rows["held_out"], data


def _upgrade(tc, model: LLaDA2MoE, hf, out: Path) -> LLaDA2MoE:
    """The 2.1 model of --init as LLaDA2.2 (`upgrade22`); the tokenizer in OUT gets the edit tokens."""
    from .upgrade22 import EDIT_TOKENS, upgrade_model, upgrade_tokenizer

    if EDIT_TOKENS[0] in hf.get_vocab():  # --resume: OUT's tokenizer was upgraded when the run began
        delete_id, split_id = (hf.convert_tokens_to_ids(t) for t in EDIT_TOKENS)
    else:
        delete_id, split_id = upgrade_tokenizer(hf)
        save_tokenizer(hf.backend_tokenizer, out)
    return upgrade_model(model, delete_id, split_id, tc.expert_capacity, tc.routing_block)


def build(tc, device: torch.device, progress: bool = True, resume: bool = False) -> Built:
    out = Path(tc.out)
    out.mkdir(parents=True, exist_ok=True)
    src = out if resume else Path(tc.data_from) if tc.data_from else None
    hf, windows, functions, held_rows, data = _saved_data(src, out) if src else _fresh_data(tc, out, progress)
    torch.manual_seed(tc.seed)
    if tc.init:
        model = load_model(tc.init).train().requires_grad_(True)
        if tc.expert_capacity and model.config.version == "2.1":
            model = _upgrade(tc, model, hf, out).train().requires_grad_(True)
    else:
        model = LLaDA2MoE(model_config(tc, len(hf))).init_weights(seed=tc.seed)
    weights = {k: float(v) for k, v in (kv.split("=") for kv in tc.task_weights.split(","))}
    tasks = TaskStream(hf, hf.eos_token_id, tc.task_length, tc.task_batch, tc.seed, weights)
    code = CodeStream(windows.to(device), functions.to(device), tc.code_batch, tc.seed, tc.window_share)
    return Built(hf, model, tasks, code, data, held_rows)
