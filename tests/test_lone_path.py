"""A lone run (one row in the forward) takes the lone path: no sorting of rows, no padding of its products
(`tiled_matmul`), no grouping of rows for the rule (`decide._rule`), and its trace is still bit for bit the
trace of its row in a batch."""

import torch

from llada import decide as decide_module
from llada import model as model_module
from llada import row_exact
from llada.decode import generate, generate_batch
from llada.model import RowInput
from golden_cases import case_config


def _counted(monkeypatch, module, name: str) -> list[int]:
    """Replace module.name with a wrapper that counts its calls; the count (a one-item list)."""
    calls, real = [0], getattr(module, name)

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def _key(trace):
    return [(r.kind, r.phase, r.step, r.block, r.window, r.drafts, r.edits, r.guesses, r.confidence)
            for r in trace.records]


def test_a_lone_run_skips_the_batch_bookkeeping_and_equals_its_batched_row(ref_model, golden, monkeypatch):
    cases = golden["generate"][:3]  # prompts of 19, 24 and 5 tokens; blocks of 8
    prompts, cfgs = [c["prompt_ids"] for c in cases], [case_config(c) for c in cases]
    ids = golden["mask_id"], golden["eos_id"]
    sorts = _counted(monkeypatch, model_module, "attention_key")
    pads = _counted(monkeypatch, row_exact, "tiled_matmul")
    grouped = _counted(monkeypatch, decide_module, "_rule")
    alone = [generate(ref_model, p, c, *ids) for p, c in zip(prompts, cfgs)]
    assert (sorts[0], pads[0], grouped[0]) == (0, 0, 0)
    batch = generate_batch(ref_model, prompts, cfgs, *ids)
    assert sorts[0] > 0 and grouped[0] > 0  # the batch sorts and groups its rows: the counters see the shared path
    for a, b in zip(alone, batch):
        assert _key(b) == _key(a) and b.output_ids == a.output_ids


def test_a_lone_row_of_odd_length_is_padded_like_its_batched_self(ref_model):
    """7 tokens (not whole blocks of 4 rows): the lone forward pads them and gives the bits it gets beside
    another row."""
    torch.manual_seed(0)
    a, b = torch.randint(0, 250, (7,)), torch.randint(0, 250, (12,))
    with torch.inference_mode():
        lone = ref_model.forward_rows([RowInput(a)])[0]
        beside = ref_model.forward_rows([RowInput(b), RowInput(a)])[1]
    assert lone.shape == (7, ref_model.config.vocab_size) and torch.equal(lone, beside)
