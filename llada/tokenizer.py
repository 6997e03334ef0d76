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
USER_SLOT = "\ue000user\ue001"  # private-use characters: no template or tokenizer gives them meaning
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
        """Token ids of `text`; as a chat turn when the model has a template (unless chat=False).

        User text is text: a special token's spelling inside it (`<|mask|>`, `<|endoftext|>`) is
        tokenized as ordinary characters, never as the special id. Only the chat template's own
        markup around it yields special tokens."""
        if chat is None:
            chat = self.has_chat_template
        if not chat:
            return self._text_ids(text)
        rendered = self.hf.apply_chat_template([{"role": "user", "content": USER_SLOT}], add_generation_prompt=True,
                                               tokenize=False)
        markup = rendered.split(USER_SLOT)  # the template's text before, between and after the user's text
        if len(markup) < 2:
            raise ValueError("the chat template does not place the user's message in the prompt")
        ids = self._markup_ids(markup[0])
        for part in markup[1:]:
            ids += self._text_ids(text) + self._markup_ids(part)
        return ids

    def _text_ids(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True))

    def _markup_ids(self, markup: str) -> list[int]:
        return list(self.hf.encode(markup, add_special_tokens=False)) if markup else []

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True)

    def pieces(self, ids: list[int]) -> list[str]:
        """The text of every token on its own (byte-level pieces of a character may show as '�')."""
        return [self.hf.decode([t], skip_special_tokens=False) for t in ids]

    def token_bytes(self, ids: list[int]) -> list[bytes | None]:
        """The raw bytes of every token (byte-level BPE or <0xNN> byte tokens); None where unknown.

        A character split across tokens decodes to '�' token by token; its bytes let a viewer join it."""
        table = _byte_decoder() if _is_byte_level(self.hf) else None
        out = []
        for piece in self.hf.convert_ids_to_tokens(list(ids)):
            if table is not None and piece is not None and all(ch in table for ch in piece):
                out.append(bytes(table[ch] for ch in piece))
            elif piece is not None and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                out.append(bytes([int(piece[3:5], 16)]))
            else:
                out.append(None)
        return out


def _is_byte_level(hf) -> bool:
    backend = getattr(hf, "backend_tokenizer", None)
    return backend is not None and type(backend.decoder).__name__ == "ByteLevel"


def _byte_decoder() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


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
