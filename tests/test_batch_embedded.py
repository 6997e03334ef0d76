"""Mixed batches of the embedded model: every row's trace bit for bit the one it gets alone, in float64 and
float32 on one thread, in float32 on two (S, Q, M2T-only, MBE, no-cache and sampled rows of different lengths and
blocks).

Minutes on 2 shared cores: a file of its own beside tests/test_batch.py, so that parallel workers run them side by
side. The lone decodes are made once per (dtype, threads) and judged against each batch of that setting.
"""

from pathlib import Path

import pytest
import torch

from llada.decode import generate, generate_batch
from llada.pipeline import Pipeline
from test_batch import _key

EMBEDDED = Path(__file__).resolve().parent.parent / "assets" / "model"


EMBEDDED_ROWS = [  # (prompt, mode, settings): S, Q, M2T-only and MBE rows of different lengths and blocks
    ("def fibonacci(n):", "S", {}),
    ("def add(a, b):\n    return", "Q", {"block_length": 16}),
    ("class Stack:\n    def __init__(self):", "M2T", {}),
    ("def is_prime(n):", "S", {"mbe": True, "eos_early_stop": False}),
    ("class Stack:\n    def __init__(self):", "S", {"mbe": True, "mbe_window": 2, "eos_early_stop": False}),
    ("import os\n\ndef list_files(path):\n    \"\"\"Return the files under path.\"\"\"\n", "Q", {"gen_length": 40}),
    ("def reverse(s):", "S", {"use_cache": False}),
    ("# sort a list\ndef sort_list(xs):", "M2T", {"block_length": 8}),
    # an MBE edit repairs block 1 (Learn's lesson 4)
    ("def cube(pavo):\n", "Q", {"mbe": True, "block_length": 4}),
    ("def is_zero(paholbat):\n", "S", {"gen_length": 32}),  # T2T edits repair the draft (Learn's lesson 2)
    ("def double(x):", "S", {"temperature": 0.8, "top_k": 20, "seed": 3}),  # sampled beside greedy rows
]


@pytest.fixture(scope="module")
def embedded():
    return Pipeline.load(EMBEDDED)


@pytest.fixture(scope="module")
def alone_runs() -> dict:
    """Each row decoded alone, per (dtype, threads): computed once, then judged against every batch of that
    setting (a lone decode is deterministic, so a second one would be the same traces)."""
    return {}


def _batch_equals_alone(embedded, model, prompts, cfgs, max_batch, runs: dict, key):
    if key not in runs:
        runs[key] = [generate(model, p, c, embedded.mask_id, embedded.eos_id) for p, c in zip(prompts, cfgs)]
    batch = generate_batch(model, prompts, cfgs, embedded.mask_id, embedded.eos_id, max_batch=max_batch)
    for i, (a, b) in enumerate(zip(runs[key], batch)):
        assert _key(b) == _key(a), f"row {i}"
        assert b.output_ids == a.output_ids and b.tokens == a.tokens, f"row {i}"
    return runs[key]


@pytest.mark.parametrize("dtype, max_batch", [(torch.float64, None), (torch.float64, 3), (torch.float32, None)])
def test_embedded_model_mixed_batch_is_bit_exact(embedded, alone_runs, dtype, max_batch):
    model = embedded.model.to(dtype)
    try:
        prompts = [embedded.encode(text) for text, _, _ in EMBEDDED_ROWS]
        cfgs = [embedded.config(mode, **({"gen_length": 64} | kw)) for _, mode, kw in EMBEDDED_ROWS]
        alone = _batch_equals_alone(embedded, model, prompts, cfgs, max_batch, alone_runs, (dtype, 1))
    finally:
        embedded.model.to(torch.float32)
    assert len({len(p) for p in prompts}) >= 6 and sum(t.mbe_edits for t in alone) > 0
    assert sum(t.edits for t in alone) > 0 and {c.block_length for c in cfgs} == {4, 8, 16, 32}


@pytest.mark.parametrize("dtype", [torch.float32])
def test_embedded_model_mixed_batch_is_bit_exact_on_two_threads(embedded, alone_runs, dtype):
    """On two threads, as the app and `llada.bench batch` run, not on the one thread the other tests use: the
    products and the attention then split their work between the threads (`llada.row_exact`). In float32, the
    app's dtype: float64 takes the same split code, so a second dtype on two threads would decode every row twice
    more (a fifth of this file's time) for no other path."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    model = embedded.model.to(dtype)
    try:
        prompts = [embedded.encode(text) for text, _, _ in EMBEDDED_ROWS]
        cfgs = [embedded.config(mode, **({"gen_length": 64} | kw)) for _, mode, kw in EMBEDDED_ROWS]
        alone = _batch_equals_alone(embedded, model, prompts, cfgs, 3, alone_runs, (dtype, 2))
    finally:
        torch.set_num_threads(threads)
        embedded.model.to(torch.float32)
    assert sum(t.mbe_edits for t in alone) > 0 and sum(t.edits for t in alone) > 0
