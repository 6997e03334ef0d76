"""Tokenizers of model directories, through `transformers.AutoTokenizer`, never with remote code.

Chat models (a chat template in tokenizer_config.json) get their prompt wrapped as one user turn;
models without a template take plain text. The mask token is the one the tokenizer declares
(`mask_token`), else an added token with a mask name (`<|mask|>` in LLaDA2.x); EOS is the declared
`eos_token`. Real LLaDA2.x configs carry an `auto_map` to remote code: `trust_remote_code=False`
makes transformers use the tokenizer files alone and never ask on stdin.

Importing transformers costs ~2 CPU seconds, as much as the rest of a start. A directory whose
tokenizer is a plain `tokenizers` file (the embedded model's: `tokenizer.json` and a
`tokenizer_config.json` that names only its special tokens, no chat template) is read by `tokenizers`
alone (`FileTokenizer`, the same calls answered by the same library with the same settings), and
transformers is imported only if `Tokenizer.hf` is asked for.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

MASK_TOKENS = ("<|mask|>", "<|MASK|>", "[MASK]", "<mask>")
USER_SLOT = "\ue000user\ue001"  # private-use characters: no template or tokenizer gives them meaning
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "additional_chat_templates")


class Tokenizer:
    """A thin wrapper that fixes the few calls the engine needs.

    `calls` answers them: the transformers tokenizer `hf`, or a `FileTokenizer` of the same files, in
    which case `hf` is loaded from `root` only when asked for."""

    def __init__(self, hf, calls=None, root: Path | None = None):
        self._hf, self._root = hf, root
        self.calls = calls if calls is not None else hf
        self.eos_id = self.calls.eos_token_id
        declared = (self.calls.mask_token,) if getattr(self.calls, "mask_token", None) else ()
        found = (self.calls.convert_tokens_to_ids(t) for t in (*declared, *MASK_TOKENS))
        self.mask_id = next((i for i in found if isinstance(i, int) and i != self.calls.unk_token_id), None)

    @classmethod
    def of_files(cls, calls: "FileTokenizer", root: Path) -> "Tokenizer":
        return cls(None, calls, root)

    @property
    def hf(self):
        """The transformers tokenizer (loaded now if only its files were read so far)."""
        if self._hf is None:
            self._hf = _auto_tokenizer(self._root)
        return self._hf

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.calls, "chat_template", None))

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

    def id_of(self, token: str) -> int | None:
        """The id of `token` (its exact text, e.g. `<|delete|>`); None when the tokenizer does not hold it."""
        found = self.calls.convert_tokens_to_ids(token)
        return found if isinstance(found, int) and found != self.calls.unk_token_id else None

    def entry(self, token_id: int) -> tuple[str | None, bool]:
        """(the token's text, whether it was added as a special token) at `token_id`; (None, False) where the
        tokenizer holds no token."""
        added = self.calls.added_tokens_decoder.get(token_id)
        if added is not None:
            return added.content, bool(added.special)
        try:
            text = self.calls.convert_ids_to_tokens([token_id])[0]
        except (IndexError, KeyError, OverflowError, ValueError):
            text = None
        return text, False

    def _text_ids(self, text: str) -> list[int]:
        return list(self.calls.encode(text, add_special_tokens=False, split_special_tokens=True))

    def _markup_ids(self, markup: str) -> list[int]:
        return list(self.calls.encode(markup, add_special_tokens=False)) if markup else []

    def decode(self, ids: list[int]) -> str:
        return self.calls.decode(ids, skip_special_tokens=True)

    def pieces(self, ids: list[int]) -> list[str]:
        """The text of every token on its own (byte-level pieces of a character may show as '�')."""
        return [self.calls.decode([t], skip_special_tokens=False) for t in ids]

    def token_bytes(self, ids: list[int]) -> list[bytes | None]:
        """The raw bytes of every token (byte-level BPE or <0xNN> byte tokens); None where unknown.

        A character split across tokens decodes to '�' token by token; its bytes let a viewer join it."""
        table = _byte_decoder() if _is_byte_level(self.calls) else None
        out = []
        for piece in self.calls.convert_ids_to_tokens(list(ids)):
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
    return {ch: b for b, ch in bytes_to_unicode().items()}


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character (as transformers and tokenizers have it)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def load_tokenizer(root: str | Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it ships none (such models take token ids)."""
    root = Path(root)
    if not any((root / name).exists() for name in TOKENIZER_FILES):
        return None
    calls = FileTokenizer.of(root)
    return Tokenizer.of_files(calls, root) if calls is not None else Tokenizer(_auto_tokenizer(root))


def _auto_tokenizer(root: Path):
    from transformers import AutoTokenizer  # heavy: imported only when a tokenizer needs it
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # config.json's model_type is unknown to transformers, by design
    try:
        with warnings.catch_warnings():  # transformers parses config.json and warns about its legacy keys
            warnings.simplefilter("ignore", FutureWarning)
            return AutoTokenizer.from_pretrained(str(root), trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as err:
        from .checkpoint import CheckpointError

        raise CheckpointError(f"{root}: cannot load the tokenizer ({err})") from None


# tokenizer_config.json keys a plain `tokenizers` file may have: nothing in them changes what transformers does
PLAIN_KEYS = {"backend", "tokenizer_class", "clean_up_tokenization_spaces", "model_max_length",
              "eos_token", "pad_token", "mask_token", "bos_token", "unk_token"}
SPECIAL_KEYS = ("eos_token", "pad_token", "mask_token", "bos_token", "unk_token")


class FileTokenizer:
    """The calls `Tokenizer` makes of a transformers fast tokenizer, answered by `tokenizers` from the
    same tokenizer.json. `of(root)` builds one only where transformers would do exactly this: a
    `PreTrainedTokenizerFast` with no chat template, no clean-up of spaces, no truncation or padding,
    no extra tokens, and special tokens that tokenizer.json already holds as special."""

    chat_template = None

    def __init__(self, backend, config: dict):
        self.backend_tokenizer = backend  # a tokenizers.Tokenizer
        for key in SPECIAL_KEYS:
            setattr(self, key, config.get(key))
        self.unk_token_id = self._id(self.unk_token)
        self.eos_token_id = self.convert_tokens_to_ids(self.eos_token) if self.eos_token else None

    @classmethod
    def of(cls, root: Path) -> "FileTokenizer | None":
        config = _plain_config(root)
        if config is None:
            return None
        from tokenizers import Tokenizer as Backend  # light: a compiled library and a small wrapper

        try:
            backend = Backend.from_file(str(root / "tokenizer.json"))
        except Exception:  # a file transformers may read differently, or not at all: let it say
            return None
        specials = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
        wanted = {config[key] for key in SPECIAL_KEYS if config.get(key) is not None}
        if not wanted <= specials or backend.truncation is not None or backend.padding is not None:
            return None
        return cls(backend, config)

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend_tokenizer.token_to_id(token)

    @property
    def added_tokens_decoder(self) -> dict:
        """{id: tokenizers.AddedToken} of the added tokens, as transformers names it."""
        return self.backend_tokenizer.get_added_tokens_decoder()

    def convert_tokens_to_ids(self, token: str) -> int | None:
        found = self._id(token)
        return self.unk_token_id if found is None else found

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]:
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def encode(self, text: str, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        if add_special_tokens:
            raise ValueError("FileTokenizer encodes without added special tokens only")
        self.backend_tokenizer.encode_special_tokens = split_special_tokens  # as transformers sets it per call
        return self.backend_tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


def _plain_config(root: Path) -> dict | None:
    """tokenizer_config.json when the directory's tokenizer is a plain tokenizers file (`FileTokenizer`)."""
    if not (root / "tokenizer.json").is_file() or any((root / n).exists() for n in CHAT_TEMPLATE_FILES):
        return None
    try:
        config = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not set(config) <= PLAIN_KEYS:
        return None
    if (config.get("tokenizer_class") != "PreTrainedTokenizerFast"
            or config.get("clean_up_tokenization_spaces") is not False):
        return None
    if not all(isinstance(config.get(key), (str, type(None))) for key in SPECIAL_KEYS):
        return None
    return config
