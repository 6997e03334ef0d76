"""Training batches: tasks and stdlib code, tokenized and laid out the way the decoder reads them.

A row is `prompt ids + answer ids + EOS`, padded with EOS to a fixed length (a whole number of
blocks). Prompt and answer are tokenized separately, exactly as at generation time (the prompt is
encoded alone and the model writes the rest), and the EOS padding teaches the model to stop: the
decoder fills gen_length positions and cuts after the first EOS.

    task rows  (N, 32): "317+985=" "1302" EOS EOS ...
    code rows  (N, 128): "def name(args):\n" body EOS ...   (longer bodies are cut, without EOS)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from .corpus import CodeExample
from .objective import Batch
from ..eval.tasks import TASKS, TRAIN_WEIGHTS, Item, sample


@dataclass(frozen=True)
class Encoded:
    prompt: list[int]
    answer: list[int]  # answer tokens followed by EOS (unless cut)


def encode_pairs(tokenizer, pairs: list[tuple[str, str]], eos_id: int) -> list[Encoded]:
    """Tokenize (prompt, answer) pairs separately, answers closed by EOS. `tokenizer` is a HF fast one."""
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    answers = tokenizer([a for _, a in pairs], add_special_tokens=False)["input_ids"]
    return [Encoded(list(p), list(a) + [eos_id]) for p, a in zip(prompts, answers)]


def to_batch(rows: list[Encoded], length: int, eos_id: int) -> Batch:
    """Pack encoded rows into a Batch of shape (N, length); too-long answers are cut."""
    ids = torch.full((len(rows), length), eos_id, dtype=torch.long)
    prompt_len, answer_len = [], []
    for i, row in enumerate(rows):
        seq = (row.prompt + row.answer)[:length]
        ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        prompt_len.append(len(row.prompt))
        answer_len.append(len(seq) - len(row.prompt))
    return Batch(ids, torch.tensor(prompt_len), torch.tensor(answer_len))


class TaskStream:
    """Endless batches of training-split task items, tasks mixed by `TRAIN_WEIGHTS`."""

    def __init__(self, tokenizer, eos_id: int, length: int, batch_size: int, seed: int,
                 weights: dict[str, float] | None = None):
        self.tokenizer, self.eos_id, self.length, self.batch_size = tokenizer, eos_id, length, batch_size
        weights = weights or TRAIN_WEIGHTS
        self.tasks, self.weights = [t for t in TASKS if weights.get(t)], [weights[t] for t in TASKS if weights.get(t)]
        self.rng = random.Random(f"train/{seed}")

    def items(self) -> list[Item]:
        names = self.rng.choices(self.tasks, self.weights, k=self.batch_size)
        return [sample(name, self.rng, "train") for name in names]

    def next(self) -> Batch:
        pairs = [(it.prompt, it.answer) for it in self.items()]
        rows = [r for r in encode_pairs(self.tokenizer, pairs, self.eos_id) if len(r.prompt) < self.length]
        return to_batch(rows, self.length, self.eos_id)


class CodeStream:
    """Endless shuffled batches of stdlib functions (prompt = the def line, answer = the body)."""

    def __init__(self, tokenizer, eos_id: int, length: int, batch_size: int, seed: int,
                 examples: list[CodeExample]):
        pairs = [(ex.prompt, ex.body) for ex in examples]
        encoded = encode_pairs(tokenizer, pairs, eos_id)
        self.rows = [r for r in encoded if len(r.prompt) < length // 2]
        self.eos_id, self.length, self.batch_size = eos_id, length, batch_size
        self.rng, self.order, self.cursor = random.Random(f"code/{seed}"), [], 0

    def next(self) -> Batch:
        picked = []
        while len(picked) < self.batch_size:
            if self.cursor >= len(self.order):
                self.order, self.cursor = list(range(len(self.rows))), 0
                self.rng.shuffle(self.order)
            picked.append(self.rows[self.order[self.cursor]])
            self.cursor += 1
        return to_batch(picked, self.length, self.eos_id)

    @property
    def tokens(self) -> int:
        return sum(min(len(r.prompt) + len(r.answer), self.length) for r in self.rows)
