"""The training corpus: the training split of the Python source installed on this machine.

`llada.data.sources` finds, deduplicates, filters and splits the files (by a hash of their path);
this module keeps the training split, parses every file once (`ast`: a file that is not Python 3 is
dropped here, counted as "syntax") and cuts out its functions (`llada.data.code.functions_of`). The
model then learns from two views of the same files (`data.py`):

    windows     the files themselves, cut into rows of `code_length` tokens (the last one EOS-padded)
    functions   signature + docstring as the prompt, the body as the answer, then EOS: the code track

Parsing runs in a process pool when there are many files (the GPU machine has cores to spare).
"""

from __future__ import annotations

import ast
import os
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..data.code import CodeFunction, functions_of
from ..data.sources import SourceFile, SourceStats, load_sources, source_roots

POOL_MIN_FILES = 200  # below this, a process pool costs more than it saves


@dataclass
class CodeCorpus:
    files: list[SourceFile]  # training split, Python 3 only
    functions: list[CodeFunction]  # every function of those files
    held_out: list[SourceFile]  # the held-out split (never trained on; counted for the model card)
    stats: SourceStats
    roots: list[Path]

    @property
    def chars(self) -> int:
        return sum(len(f.text) for f in self.files)


def _functions_or_none(key: str, text: str) -> list[CodeFunction] | None:
    """The file's functions, or None when it is not Python 3 source."""
    try:
        return functions_of(key, text, ast.parse(text), scoped=False)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _parse_all(files: list[SourceFile], workers: int, progress: bool) -> list[list[CodeFunction] | None]:
    from tqdm import tqdm

    keys, texts = [f.key for f in files], [f.text for f in files]
    bar = dict(total=len(files), desc="parse", unit="file", disable=not progress, mininterval=2.0)
    if workers <= 1 or len(files) < POOL_MIN_FILES:
        return list(tqdm(map(_functions_or_none, keys, texts), **bar))
    with ProcessPoolExecutor(workers) as pool:
        return list(tqdm(pool.map(_functions_or_none, keys, texts, chunksize=32), **bar))


def build_corpus(sources: tuple[str, ...], roots: list[str | Path] | None = None, max_files: int | None = None,
                 workers: int | None = None, progress: bool = True) -> CodeCorpus:
    """The training split of `sources` (or of explicit `roots`), parsed, with its functions."""
    roots = source_roots(sources) if roots is None else [Path(r) for r in roots]
    stats = SourceStats()
    both = load_sources(roots, max_files=None if max_files is None else 2 * max_files, stats=stats)
    files = [f for f in both if f.split == "train"][:max_files]
    parsed = _parse_all(files, workers or os.cpu_count() or 1, progress)
    kept, functions = [], []
    for file, fns in zip(files, parsed):
        if fns is None:
            stats.drop("syntax")
            stats.kept["train"] -= 1
            stats.chars["train"] -= len(file.text)
            continue
        kept.append(file)
        functions += fns
    return CodeCorpus(kept, functions, [f for f in both if f.split == "eval"], stats, roots)


def bpe_sample(corpus: CodeCorpus, max_chars: int, seed: int) -> list[str]:
    """Texts the tokenizer learns from: whole training files in a seeded order, up to `max_chars`."""
    order = list(range(len(corpus.files)))
    random.Random(f"bpe/{seed}").shuffle(order)
    out, total = [], 0
    for i in order:
        if total >= max_chars:
            break
        out.append(corpus.files[i].text)
        total += len(corpus.files[i].text)
    return out
