"""The embedded model's byte-level BPE: special tokens, digits, exact round trips, AutoTokenizer."""

from __future__ import annotations

import pytest

from llada.train.bpe import EOS_TOKEN, MASK_TOKEN, build_tokenizer, load_fast, save_tokenizer
from llada.weights.tokenizer import Tokenizer

TEXTS = ["def add(a, b):\n    return a + b\n", "317+985=1302", "sort 73914=13479",
         "reverse red blue cat: cat blue red"] * 20


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe")
    save_tokenizer(build_tokenizer(TEXTS, vocab_size=300), out)
    return Tokenizer(load_fast(out))


def test_special_tokens_are_found_by_name(tok):
    assert tok.eos_id == tok.hf.convert_tokens_to_ids(EOS_TOKEN) == tok.hf.pad_token_id
    assert tok.mask_id == tok.hf.convert_tokens_to_ids(MASK_TOKEN) != tok.eos_id
    assert not tok.has_chat_template


@pytest.mark.parametrize("text", ["def fibonacci(n):\n    if n < 2:\n        return n\n", "  tabs\tand\nnewlines ",
                                  "unicode: héllo wörld ✓", "<b>&amp;</b>", "1234567890"])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_digits_are_one_token_each(tok):
    ids = tok.encode("1302")
    assert tok.pieces(ids) == ["1", "3", "0", "2"]


@pytest.mark.parametrize("special", [MASK_TOKEN, EOS_TOKEN])
def test_special_token_text_in_user_text_stays_text(tok, special):
    """A prompt that spells a special token gets ordinary characters, never the special id."""
    text = f"x = '{special}'"
    ids = tok.encode(text)
    assert tok.mask_id not in ids and tok.eos_id not in ids
    assert tok.decode(ids) == text


def test_the_chat_template_keeps_its_own_specials_and_user_text_stays_text(tmp_path):
    save_tokenizer(build_tokenizer(TEXTS, vocab_size=300), tmp_path)
    hf = load_fast(tmp_path)
    hf.chat_template = "{{ messages[0]['content'] }}" + EOS_TOKEN + "A:"
    chat = Tokenizer(hf)
    ids = chat.encode("1+1=" + MASK_TOKEN)
    assert ids.count(chat.eos_id) == 1 and ids[-3] == chat.eos_id  # the template's EOS, then "A:"
    assert chat.mask_id not in ids
    hf.chat_template = "no user text here"
    with pytest.raises(ValueError, match="does not place the user's message"):
        chat.encode("hi")


def test_saved_config_names_the_fast_class(tmp_path):
    import json

    save_tokenizer(build_tokenizer(TEXTS, vocab_size=280), tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == config["pad_token"] == EOS_TOKEN and config["mask_token"] == MASK_TOKEN


def test_loads_through_auto_tokenizer_without_remote_code(tmp_path):
    import json

    from transformers import AutoTokenizer

    save_tokenizer(build_tokenizer(TEXTS, vocab_size=300), tmp_path)
    assert "auto_map" not in json.loads((tmp_path / "tokenizer_config.json").read_text())  # nothing to execute
    hf = AutoTokenizer.from_pretrained(str(tmp_path), trust_remote_code=False)
    assert hf.mask_token == MASK_TOKEN and hf.eos_token == EOS_TOKEN
    assert hf.decode(hf.encode("def f(x):\n    return x\n", add_special_tokens=False)) == "def f(x):\n    return x\n"


def test_code_indentation_becomes_few_tokens(tmp_path):
    """Trained on code, a newline plus an indentation level and a keyword take at most two tokens."""
    from code_corpus import LIBRARY

    save_tokenizer(build_tokenizer([LIBRARY] * 50, vocab_size=400), tmp_path)
    hf = load_fast(tmp_path)
    assert len(hf.encode("\n        return", add_special_tokens=False)) <= 2


def test_the_code_preset_sizes_its_vocabulary_for_code():
    from llada.train.recipes import TRAINING_PRESETS

    assert 4096 <= TRAINING_PRESETS["code"].values["vocab_size"] <= 8192


def test_a_plain_tokenizer_file_is_read_without_transformers_and_answers_alike(tmp_path):
    """The embedded model's kind of tokenizer is read by `tokenizers` alone; every call the engine makes
    answers exactly as the transformers tokenizer of the same files."""
    import json
    import random

    from llada.weights.tokenizer import FileTokenizer, bytes_to_unicode, load_tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode as hf_bytes_to_unicode

    save_tokenizer(build_tokenizer(TEXTS, vocab_size=300), tmp_path)
    light, full = load_tokenizer(tmp_path), Tokenizer(load_fast(tmp_path))
    assert isinstance(light.calls, FileTokenizer) and light._hf is None  # transformers not asked
    assert (light.eos_id, light.mask_id, light.has_chat_template) == (full.eos_id, full.mask_id, False)
    texts = TEXTS[:4] + ["unicode: héllo wörld ✓ 日本語", "  \t\n ", "", f"x = '{MASK_TOKEN}' {EOS_TOKEN}"]
    for text in texts:
        assert light.encode(text) == full.encode(text) and light._markup_ids(text) == full._markup_ids(text)
    rng = random.Random(0)
    for _ in range(50):
        ids = [rng.randrange(300) for _ in range(rng.randrange(12))]
        assert light.decode(ids) == full.decode(ids) and light.pieces(ids) == full.pieces(ids)
        assert light.token_bytes(ids) == full.token_bytes(ids)
    assert bytes_to_unicode() == hf_bytes_to_unicode()
    assert light.hf.mask_token == MASK_TOKEN  # the transformers tokenizer, loaded when asked for
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": "{{ messages }}"}))
    assert not isinstance(load_tokenizer(tmp_path).calls, FileTokenizer)  # a template: transformers renders it


def test_loading_the_embedded_model_does_not_import_transformers():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import sys; from llada.pipeline import Pipeline; p = Pipeline.load('assets/model'); "
            "print(p.decode_text(p.encode('1+1=')), 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1+1=", "False"]
