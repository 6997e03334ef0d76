"""Tokenizers of model directories, through `transformers.AutoTokenizer`, never with remote code.

Chat models (a chat template in tokenizer_config.json) get their prompt wrapped as one user turn;
models without a template take plain text. The mask token is the one the tokenizer declares
(`mask_token`), else an added token with a mask name (`<|mask|>` in LLaDA2.x); EOS is the declared
`eos_token`. Real LLaDA2.x configs carry an `auto_map` to remote code: `trust_remote_code=False`
makes transformers use the tokenizer files alone and never ask on stdin.
"""

from __future__ import annotations

import warnings
from pathlib import Path

MASK_TOKENS = ("<|mask|>", "<|MASK|>", "[MASK]", "<mask>")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class Tokenizer:
    """A thin wrapper that fixes the few calls the engine needs."""

    def __init__(self, hf):
        self.hf = hf
        self.eos_id = hf.eos_token_id
        declared = (hf.mask_token,) if getattr(hf, "mask_token", None) else ()
        self.mask_id = next((i for i in (hf.convert_tokens_to_ids(t) for t in (*declared, *MASK_TOKENS))
                             if isinstance(i, int) and i != hf.unk_token_id), None)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def encode(self, text: str, chat: bool | None = None) -> list[int]:
        """Token ids of `text`; as a chat turn when the model has a template (unless chat=False)."""
        if chat is None:
            chat = self.has_chat_template
        if chat:
            out = self.hf.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True)
            return list(out["input_ids"] if hasattr(out, "keys") else out)
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True)

    def pieces(self, ids: list[int]) -> list[str]:
        """The text of every token on its own (byte-level pieces of a character may show as '�')."""
        return [self.hf.decode([t], skip_special_tokens=False) for t in ids]


def load_tokenizer(root: str | Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it ships none (such models take token ids)."""
    root = Path(root)
    if not any((root / name).exists() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer  # heavy: imported only when a tokenizer exists
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # config.json's model_type is unknown to transformers, by design
    try:
        with warnings.catch_warnings():  # transformers parses config.json and warns about its legacy keys
            warnings.simplefilter("ignore", FutureWarning)
            return Tokenizer(AutoTokenizer.from_pretrained(str(root), trust_remote_code=False))
    except (OSError, ValueError, KeyError, TypeError) as err:
        from .checkpoint import CheckpointError

        raise CheckpointError(f"{root}: cannot load the tokenizer ({err})") from None
