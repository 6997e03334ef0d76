"""A LLaDA2.2 checkpoint's token ids against its tokenizer: the edit tokens, the mask and the stop ids.

A 2.2 model writes DELETE and SPLIT as token ids (config.json `delete_token_id`, `split_token_id`), stops at its
stop ids (`eos_token_id`) and decodes at the mask id. The config and the tokenizer are written apart; when they
disagree the model still runs, but its moves land on the wrong tokens: a DELETE id that is the tokenizer's
ordinary word `the` would drop every `the` the model writes, and a stray mask id would never be filled. So a
2.2 directory's ids are checked when it loads (`check_token_ids`), wherever the tokenizer has a say:

* `delete_token_id` / `split_token_id`: where the tokenizer holds a token named `<|delete|>` / `<|split|>`
  (what `assets/model22` and `python -m llada.replica --version 2.2` write), it is that id; the token at
  each id, where the tokenizer has one, is a special token (one added as special, never text a prompt
  spells); neither id is the mask or a stop id;
* the mask: the tokenizer's mask token, config.json's and generation_config.json's `mask_token_id` name one
  id (each where given), and the token there is special;
* the stop ids: the token at each, where the tokenizer has one, is special, and the tokenizer's EOS token is
  one of them.

The ids' range (inside `vocab_size`) is config.json's own check (`llada.config`). The real checkpoints' names
for the edit tokens are not public here: a tokenizer without `<|delete|>` / `<|split|>` is checked only for
special tokens at the config's ids. Each mismatch is a `CheckpointError` naming the key, the id and the token.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ..config import ModelConfig
from .checkpoint import CheckpointError
from .tokenizer import Tokenizer

EDIT_TOKENS = {"delete_token_id": "<|delete|>", "split_token_id": "<|split|>"}  # config key -> the token's name


class DeclaredId(NamedTuple):
    """A token id a file names, and where: `config.json: mask_token_id`."""

    source: str
    value: int


def check_token_ids(cfg: ModelConfig, root: Path, tokenizer: Tokenizer | None, mask_id: int,
                    masks: list[DeclaredId] = ()) -> None:
    """CheckpointError where a 2.2 directory's edit, mask or stop ids disagree with its tokenizer (the module
    docstring lists the checks); `masks`: the mask ids the directory's files name besides the tokenizer's."""
    if cfg.version != "2.2":
        return
    _check_edit_ids(cfg, root, tokenizer, mask_id)
    _check_mask(root, tokenizer, mask_id, masks)
    _check_stops(cfg, root, tokenizer)


def _check_edit_ids(cfg: ModelConfig, root: Path, tokenizer: Tokenizer | None, mask_id: int) -> None:
    where = root / "config.json"
    for key, name in EDIT_TOKENS.items():
        value = getattr(cfg, key)
        if value == mask_id:
            raise CheckpointError(f"{where}: {key} {value} is the mask id: the model could not tell a mask it may "
                                  f"fill from a {name} move")
        if value in cfg.stop_token_ids:
            raise CheckpointError(f"{where}: {key} {value} is also a stop id (eos_token_id): a {name} move would "
                                  "end the run")
        if tokenizer is None:
            continue
        named = tokenizer.id_of(name)
        if named is not None and named != value:
            raise CheckpointError(f"{where}: {key} is {value}, but the tokenizer's {name} is {named} "
                                  f"({_shown(tokenizer, value)} is at {value}); make them one id")
        _check_special(tokenizer, value, f"{where}: {key} {value}", f"a special token such as {name}")


def _check_mask(root: Path, tokenizer: Tokenizer | None, mask_id: int, masks: list[DeclaredId]) -> None:
    for declared in masks:
        if declared.value != mask_id:
            raise CheckpointError(f"{declared.source} is {declared.value}, but the mask id is {mask_id} "
                                  f"({_shown(tokenizer, mask_id)}, the tokenizer's mask token); make them one id")
    if tokenizer is not None:
        _check_special(tokenizer, mask_id, f"{root}: the mask id {mask_id}", "a special mask token")


def _check_stops(cfg: ModelConfig, root: Path, tokenizer: Tokenizer | None) -> None:
    if tokenizer is None or not cfg.stop_token_ids:
        return
    where = root / "config.json"
    for stop in cfg.stop_token_ids:
        _check_special(tokenizer, stop, f"{where}: stop id (eos_token_id) {stop}", "a special token")
    if tokenizer.eos_id is not None and tokenizer.eos_id not in cfg.stop_token_ids:
        raise CheckpointError(f"{where}: the stop ids (eos_token_id) {list(cfg.stop_token_ids)} leave out the "
                              f"tokenizer's EOS token {_shown(tokenizer, tokenizer.eos_id)} ({tokenizer.eos_id})")


def _check_special(tokenizer: Tokenizer, token_id: int, what: str, wanted: str) -> None:
    """CheckpointError when the tokenizer holds an ordinary (not special) token at `token_id`."""
    text, special = tokenizer.entry(token_id)
    if text is not None and not special:
        raise CheckpointError(f"{what} is the tokenizer's ordinary token {text!r}, not {wanted}: a prompt that "
                              "spells it, or a model that writes it as text, would be read as that id")


def _shown(tokenizer: Tokenizer | None, token_id: int) -> str:
    text = tokenizer.entry(token_id)[0] if tokenizer is not None else None
    return repr(text) if text is not None else "no token"
