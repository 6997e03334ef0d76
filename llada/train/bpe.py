"""Train the small byte-level BPE tokenizer of the embedded model, with the `tokenizers` library.

Byte-level: any text encodes (no unknown token) and decodes back exactly. Digits are split one per
token before BPE runs, so numbers keep a fixed shape (`317` -> `3` `1` `7`) that arithmetic can use.
Special tokens: `<|endoftext|>` (EOS, also padding) and `<|mask|>` (the diffusion mask). The result
is saved as `tokenizer.json` + `tokenizer_config.json` with a `PreTrainedTokenizerFast` class, so
`transformers.AutoTokenizer.from_pretrained(dir)` loads it; it has no chat template (plain prompts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

EOS_TOKEN = "<|endoftext|>"
MASK_TOKEN = "<|mask|>"


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """A trained `tokenizers.Tokenizer` (EOS id 0, mask id 1, then the 256 bytes, then merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN, MASK_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tokenizer(tok, out: str | Path, max_length: int = 1024) -> Path:
    """Write tokenizer.json + tokenizer_config.json for `AutoTokenizer.from_pretrained(out)`.

    The class is recorded as `PreTrainedTokenizerFast`, the name every transformers version loads
    (newer versions save an alias of it)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   mask_token=MASK_TOKEN, clean_up_tokenization_spaces=False,
                                   model_max_length=max_length)
    fast.save_pretrained(str(out))
    config_path = Path(out) / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) | {"tokenizer_class": "PreTrainedTokenizerFast"}
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return Path(out)


def load_fast(path: str | Path):
    """The saved tokenizer through transformers, as the engine loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
