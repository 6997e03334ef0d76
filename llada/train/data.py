"""Training rows: tasks and code, tokenized and laid out the way the decoder reads them.

A row is `prompt ids + answer ids + EOS`, padded with EOS to a fixed length (a whole number of
blocks). Prompt and answer are tokenized separately, exactly as at generation time (the prompt is
encoded alone and the model writes the rest), and the EOS padding teaches the model to stop: the
decoder fills gen_length positions and cuts after the first EOS. Three kinds of rows:

    task rows      (N, 32)   "317+985=" | "1302" EOS EOS ...
    function rows  (N, 256)  "def f(x):\\n    \\"\\"\\"doc\\"\\"\\"\\n" | body EOS EOS ...  (long bodies are cut)
    window rows    (N, 256)  a file cut into rows of 256 tokens, the last one closed by EOS and padded;
                             a random head of up to a quarter of the row is the prompt

Code rows span several blocks (256 = 8 blocks of 32), so every block learns to continue the clean
blocks before it, and later blocks give multi-block editing (MBE) something to revise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

import torch

from ..data.code import CodeFunction
from ..data.tasks import TASKS, TRAIN_WEIGHTS, Item, sample
from .objective import Batch

ENCODE_CHUNK = 512  # texts per tokenizer call: bounded memory for a corpus of millions of tokens


@dataclass(frozen=True)
class Encoded:
    prompt: list[int]
    answer: list[int]  # answer tokens followed by EOS (unless cut)


@dataclass
class Rows:
    """Rows of one kind: ids (N, L) int32, prompt_len (N,), answer_len (N,) (answer + first EOS).

    Packed rows also carry segment (N, L) int16 (the item of each position) and gen (N, L) bool (the
    positions after each item's prompt); their prompt_len is 0 and answer_len the filled positions."""

    ids: torch.Tensor
    prompt_len: torch.Tensor
    answer_len: torch.Tensor
    segment: torch.Tensor | None = None
    gen: torch.Tensor | None = None
    item_tokens: int = 0  # packed rows: the items' own tokens (prompt + answer + EOS), block padding excluded

    def __len__(self) -> int:
        return self.ids.shape[0]

    @property
    def tokens(self) -> int:
        """Tokens that carry content (prompt + answer + first EOS), padding excluded."""
        return int((self.prompt_len + self.answer_len).sum())

    @property
    def content(self) -> int:
        """Tokens that carry content: for packed rows the items' own tokens, block padding excluded."""
        return self.tokens if self.gen is None else self.item_tokens

    def to(self, device) -> "Rows":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Rows(*(move(t) for t in (self.ids, self.prompt_len, self.answer_len, self.segment, self.gen)),
                    self.item_tokens)


def encode_texts(tokenizer, texts: list[str], progress: bool = False, desc: str = "tokenize") -> list[list[int]]:
    """Token ids of every text (no special tokens), encoded in chunks by the Rust tokenizer."""
    from tqdm import tqdm

    backend, out = tokenizer.backend_tokenizer, []
    for start in tqdm(range(0, len(texts), ENCODE_CHUNK), desc=desc, unit="chunk", disable=not progress,
                      mininterval=2.0):
        out += [e.ids for e in backend.encode_batch(texts[start:start + ENCODE_CHUNK], add_special_tokens=False)]
    return out


def encode_pairs(tokenizer, pairs: list[tuple[str, str]], eos_id: int) -> list[Encoded]:
    """Tokenize (prompt, answer) pairs separately, answers closed by EOS. `tokenizer` is a HF fast one."""
    prompts = encode_texts(tokenizer, [p for p, _ in pairs])
    answers = encode_texts(tokenizer, [a for _, a in pairs])
    return [Encoded(list(p), list(a) + [eos_id]) for p, a in zip(prompts, answers)]


def to_rows(rows: list[Encoded], length: int, eos_id: int) -> Rows:
    """Pack encoded rows into (N, length); too-long answers are cut."""
    ids = torch.full((len(rows), length), eos_id, dtype=torch.int32)
    prompt_len, answer_len = [], []
    for i, row in enumerate(rows):
        seq = (row.prompt + row.answer)[:length]
        ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.int32)
        prompt_len.append(len(row.prompt))
        answer_len.append(len(seq) - len(row.prompt))
    return Rows(ids, torch.tensor(prompt_len, dtype=torch.int32), torch.tensor(answer_len, dtype=torch.int32))


def packed_rows(rows: list[Encoded], length: int, eos_id: int, align: int) -> Rows:
    """Items packed into rows of `length`, each item starting on a multiple of `align` (the block).

    An item is prompt + answer (+ EOS), cut to `length`, then EOS-padded to a multiple of `align`, so
    that the block holding its EOS teaches EOS after EOS as in an unpacked row. Items go into the
    current row while they fit; the rest of a row that no item fills is a segment of its own with no
    loss. Against one item per EOS-padded row this keeps the same blocks and drops the empty ones."""
    ids, seg, gen, filled = [], [], [], []
    row_ids, row_seg, row_gen = [], [], []

    def close():
        n = len(row_ids)
        ids.append(row_ids + [eos_id] * (length - n))
        seg.append(row_seg + [len(set(row_seg))] * (length - n))
        gen.append(row_gen + [False] * (length - n))
        filled.append(n)

    for row in rows:
        seq = (row.prompt + row.answer)[:length]
        size = -(-len(seq) // align) * align
        if row_ids and len(row_ids) + size > length:
            close()
            row_ids, row_seg, row_gen = [], [], []
        k = len(set(row_seg))
        row_ids += seq + [eos_id] * (size - len(seq))
        row_seg += [k] * size
        row_gen += [False] * len(row.prompt) + [True] * (size - len(row.prompt))
    if row_ids:
        close()
    n = len(ids)
    return Rows(torch.tensor(ids, dtype=torch.int32).view(n, length), torch.zeros(n, dtype=torch.int32),
                torch.tensor(filled, dtype=torch.int32), torch.tensor(seg, dtype=torch.int16).view(n, length),
                torch.tensor(gen, dtype=torch.bool).view(n, length),
                sum(min(len(r.prompt) + len(r.answer), length) for r in rows))


def to_batch(rows: list[Encoded], length: int, eos_id: int) -> Batch:
    r = to_rows(rows, length, eos_id)
    return Batch(r.ids.long(), r.prompt_len.long(), r.answer_len.long())


def window_rows(token_lists: Iterable[list[int]], length: int, eos_id: int) -> Rows:
    """Every text + EOS cut into rows of `length`; the last row of a text is EOS-padded."""
    chunks, content = [torch.zeros(0, length, dtype=torch.int32)], [torch.zeros(0, dtype=torch.int32)]
    for ids in token_lists:
        seq = torch.tensor(list(ids) + [eos_id], dtype=torch.int32)
        n_rows = -(-len(seq) // length)
        padded = torch.full((n_rows * length,), eos_id, dtype=torch.int32)
        padded[:len(seq)] = seq
        chunks.append(padded.view(n_rows, length))
        per_row = torch.full((n_rows,), length, dtype=torch.int32)  # (n_rows,) content tokens of each row
        per_row[-1] = len(seq) - length * (n_rows - 1)
        content.append(per_row)
    ids, answer = torch.cat(chunks), torch.cat(content)
    return Rows(ids, torch.zeros(len(ids), dtype=torch.int32), answer)


def function_rows(tokenizer, functions: list[CodeFunction], length: int, eos_id: int, pack: int = 0) -> Rows:
    """Prompt = signature + docstring, answer = body + EOS; prompts of half a row or more are dropped.

    pack > 0: several functions per row, each on a multiple of `pack` tokens (`packed_rows`)."""
    encoded = encode_pairs(tokenizer, [(f.prompt, f.body) for f in functions], eos_id)
    kept = [r for r in encoded if len(r.prompt) < length // 2]
    return packed_rows(kept, length, eos_id, pack) if pack else to_rows(kept, length, eos_id)


class RowSampler:
    """Endless batches from Rows, one shuffled pass after another; window rows get a random prompt head."""

    def __init__(self, rows: Rows, batch_size: int, seed: int, max_prompt: int = 0):
        self.rows, self.batch_size, self.max_prompt = rows, batch_size, max_prompt
        self.gen = torch.Generator().manual_seed(seed)
        self.order, self.cursor = torch.zeros(0, dtype=torch.long), 0

    def _pick(self) -> torch.Tensor:
        picked = []
        need = self.batch_size
        while need:
            if self.cursor >= len(self.order):
                self.order, self.cursor = torch.randperm(len(self.rows), generator=self.gen), 0
            take = self.order[self.cursor:self.cursor + need]
            picked.append(take)
            self.cursor += len(take)
            need -= len(take)
        return torch.cat(picked)

    def next(self) -> Batch:
        idx = self._pick().to(self.rows.ids.device)
        prompt = self.rows.prompt_len[idx].long()
        answer = self.rows.answer_len[idx].long()
        if self.max_prompt:  # windows: the first few tokens become a frozen prompt
            head = torch.randint(0, self.max_prompt + 1, (len(idx),), generator=self.gen).to(idx.device)
            head = torch.minimum(head, answer - 1).clamp(min=0)
            prompt, answer = prompt + head, answer - head
        rows = self.rows
        return Batch(rows.ids[idx].long(), prompt, answer, None if rows.segment is None else rows.segment[idx].long(),
                     None if rows.gen is None else rows.gen[idx])


class CodeStream:
    """Code batches: window rows with probability `window_share`, otherwise function rows."""

    def __init__(self, windows: Rows, functions: Rows, batch_size: int, seed: int, window_share: float):
        if not len(windows) and not len(functions):
            raise ValueError("the code corpus is empty: no training rows were built")
        length = windows.ids.shape[1] if len(windows) else functions.ids.shape[1]
        self.windows = RowSampler(windows, batch_size, seed, max_prompt=length // 4) if len(windows) else None
        self.functions = RowSampler(functions, batch_size, seed + 1) if len(functions) else None
        share = window_share if self.windows and self.functions else float(self.windows is not None)
        self.share, self.rng = share, random.Random(f"code/{seed}")

    def next(self) -> tuple[str, Batch]:
        """("window" or "function", batch)."""
        if self.rng.random() < self.share:
            return "window", self.windows.next()
        return "function", self.functions.next()


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
