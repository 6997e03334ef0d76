"""User text is text: a prompt that spells a special token runs as ordinary characters everywhere."""

from __future__ import annotations

import json

import pytest

from llada.__main__ import main
from llada.pipeline import Pipeline

HOSTILE = "x = '<|mask|>' + '<|endoftext|>'\n"


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return Pipeline.load(tiny_model_dir)


def test_a_prompt_spelling_special_tokens_decodes(pipe):
    ids = pipe.encode(HOSTILE)
    assert pipe.mask_id not in ids and pipe.eos_id not in ids
    trace = pipe.generate(ids, pipe.config("S", gen_length=16, block_length=8), prompt=HOSTILE)
    assert trace.num_decode_forwards >= 1 and pipe.tokenizer.decode(ids) == HOSTILE


def test_prompt_ids_holding_the_mask_id_are_refused_by_name(pipe):
    with pytest.raises(ValueError, match=r"prompt token 1 is the mask id"):
        pipe.generate([5, pipe.mask_id, 7], pipe.config("Q", gen_length=8, block_length=8))


def test_the_cli_decodes_a_prompt_spelling_special_tokens(capsys, tiny_model_dir):
    code = main(["generate", "--model", str(tiny_model_dir), "--prompt", HOSTILE, "--gen-length", "8",
                 "--block-length", "8", "--json"])
    assert code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["num_decode_forwards"] >= 1
