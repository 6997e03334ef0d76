"""A LLaDA2.2 checkpoint's edit, mask and stop ids against its tokenizer (llada/weights/token_ids.py): a 2.2
replica whose config.json (or tokenizer) is edited to disagree is refused on load, before any weight is read,
with a CheckpointError naming the key, the id and the token."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from llada.config import ModelConfig
from llada.pipeline import Pipeline, declared_masks
from llada.weights import replica
from llada.weights.checkpoint import CheckpointError, read_config
from llada.weights.token_ids import check_token_ids
from llada.weights.tokenizer import load_tokenizer

ASSETS = Path(__file__).resolve().parents[1] / "assets"
TEXT_TOKEN = 1000  # an ordinary byte-level BPE token of the replica's tokenizer (no special token below 156891)


@pytest.fixture(scope="module")
def replica_22(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("replica22") / "LLaDA2.2-mini"
    assert replica.main([str(out), "--shape", "tiny", "--version", "2.2"]) == 0
    return out


@pytest.fixture
def edited(replica_22, tmp_path):
    """A copy of the replica (weights linked, not copied) whose config.json `edit(raw)` changes (and its
    tokenizer.json `tokenizer(raw)`)."""
    def make(edit=lambda raw: None, tokenizer=lambda tok: None) -> Path:
        d = tmp_path / str(len(list(tmp_path.iterdir()))) / "LLaDA2.2-mini"
        d.mkdir(parents=True)
        for f in replica_22.iterdir():
            if f.suffix == ".safetensors":
                (d / f.name).symlink_to(f)
            else:
                shutil.copy(f, d / f.name)
        for name, change in (("config.json", edit), ("tokenizer.json", tokenizer)):
            raw = json.loads((d / name).read_text())
            change(raw)
            (d / name).write_text(json.dumps(raw))
        return d
    return make


def _set(**values):
    return lambda raw: raw.update(values)


def _renamed(old: str, new: str):
    """The tokenizer's added token `old` named `new` (a tokenizer that names the edit tokens otherwise)."""
    def change(tok):
        for token in tok["added_tokens"]:
            if token["content"] == old:
                token["content"] = new
    return change


def _refused(d: Path, *words: str) -> str:
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as err:
        Pipeline.load(d)
    message = str(err.value)
    assert all(w in message for w in words), message
    assert time.perf_counter() - start < 60  # refused from the config and the tokenizer: no weight was read
    return message


def test_the_replica_and_the_shipped_22_model_agree_with_their_tokenizers(replica_22):
    for root in (replica_22, ASSETS / "model22"):
        cfg, raw = read_config(root)
        tokenizer = load_tokenizer(root)
        assert cfg.version == "2.2"
        check_token_ids(cfg, root, tokenizer, tokenizer.mask_id, declared_masks(root, raw))
        assert tokenizer.entry(cfg.delete_token_id) == ("<|delete|>", True)
        assert tokenizer.entry(cfg.split_token_id) == ("<|split|>", True)


def test_swapped_edit_ids_are_refused_naming_the_id_and_the_token(edited):
    d = edited(_set(delete_token_id=156931, split_token_id=156930))
    message = _refused(d, "config.json", "delete_token_id is 156931", "the tokenizer's <|delete|> is 156930",
                       "'<|split|>' is at 156931")
    assert message.startswith(str(d / "config.json"))


def test_an_edit_id_on_an_ordinary_token_is_refused(edited):
    _refused(edited(_set(split_token_id=TEXT_TOKEN)), "split_token_id is 1000", "the tokenizer's <|split|> is 156931")
    # a tokenizer that names its edit tokens otherwise: the token at the config's id must still be a special one
    d = edited(_set(split_token_id=TEXT_TOKEN), tokenizer=_renamed("<|split|>", "<|reserved_edit_1|>"))
    text = load_tokenizer(d).entry(TEXT_TOKEN)[0]
    _refused(d, "split_token_id 1000 is the tokenizer's ordinary token", repr(text), "not a special token")


@pytest.mark.parametrize("values, words", [
    ({"delete_token_id": 156895}, ("delete_token_id 156895 is the mask id",)),
    ({"split_token_id": 156900}, ("split_token_id 156900 is also a stop id",)),
    ({"mask_token_id": 156894}, ("config.json: mask_token_id is 156894", "the mask id is 156895", "'<|mask|>'")),
    ({"eos_token_id": [156892, TEXT_TOKEN]}, ("stop id (eos_token_id) 1000 is the tokenizer's ordinary token",)),
    ({"eos_token_id": [156900]}, ("stop ids (eos_token_id) [156900] leave out", "'<|endoftext|>' (156892)")),
], ids=["delete-is-mask", "split-is-stop", "mask-disagrees", "stop-on-text", "stops-miss-eos"])
def test_a_mismatched_mask_or_stop_id_is_refused(edited, values, words):
    _refused(edited(_set(**values)), *words)


def test_a_mask_given_explicitly_overrides_the_declared_one(replica_22):
    cfg, raw = read_config(replica_22)
    tokenizer = load_tokenizer(replica_22)
    declared = declared_masks(replica_22, raw | {"mask_token_id": 156894})
    with pytest.raises(CheckpointError, match="mask_token_id is 156894"):
        check_token_ids(cfg, replica_22, tokenizer, 156895, declared)
    check_token_ids(cfg, replica_22, tokenizer, 156895, [])  # Pipeline.load(mask_id=...) passes none


def test_a_21_checkpoint_is_not_held_to_the_22_checks(replica_22):
    raw = json.loads((replica_22 / "config.json").read_text())
    for key in ("expert_capacity", "delete_token_id", "split_token_id", "block_size"):
        raw.pop(key)
    cfg = ModelConfig.from_dict(raw)
    assert cfg.version == "2.1"
    check_token_ids(cfg, replica_22, load_tokenizer(replica_22), 156895, declared_masks(replica_22,
                                                                                         {"mask_token_id": 7}))
