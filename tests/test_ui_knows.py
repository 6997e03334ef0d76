"""What a model knows, in one line on the page, and the note a prompt outside it (or a blank output) gets."""

from __future__ import annotations

import json
import shutil

from llada.train.loop import MODEL_INFO
from llada.trace import Trace
from tests.ui_helpers import EOS, NL, _decode, hand_trace
from ui import knows as k
from ui.models import DEFAULT_MODEL, Models
from ui.playground import controls
from ui.playground.run import generate_ui
from ui.render import tables


def test_the_file_name_is_the_trainers():
    assert k.MODEL_INFO == MODEL_INFO


def test_the_shipped_model_says_what_it_knows():
    info = k.knows(DEFAULT_MODEL)
    assert info.limited and "addition" in info.line and "\n" not in info.line
    assert info.line in controls.knows_note(str(DEFAULT_MODEL))


def test_model_info_then_model_card_then_name(tmp_path):
    (tmp_path / MODEL_INFO).write_text(json.dumps({"knows": "  Adds numbers.\n"}))
    assert k.knows(tmp_path) == k.Knows("Adds numbers.", True)
    (tmp_path / MODEL_INFO).write_text('{"knows": 3}')  # not the documented shape: the card speaks instead
    (tmp_path / "README.md").write_text("---\nlicense: x\n---\n# Title\n\n![img](a.png)\n\nA big model. It "
                                        "knows much.\n")
    assert k.knows(tmp_path) == k.Knows("A big model.", False)
    (tmp_path / "README.md").unlink()
    assert k.knows(tmp_path).line.startswith(f"A LLaDA2.x checkpoint ({tmp_path.name})")
    assert not k.knows(None).limited


def test_a_prompt_outside_a_limited_model_gets_a_hint():
    small, big = k.Knows("Adds numbers.", True), k.Knows("Anything.", False)
    for inside in ("176+771=", "sort 7391=", "reverse red fox:", "def inc(tuyul):\n", "import os\n", "  def f(x):"):
        assert k.scope_hint(inside, small) == "", inside
    hint = k.scope_hint("What is the capital of France?", small)
    assert "no format the model learned" in hint and hint.endswith("Adds numbers.")
    assert k.scope_hint("What is the capital of France?", big) == ""


def test_a_blank_output_gets_a_note_and_the_hint_follows():
    hand = hand_trace()  # block 0 drafts a line break and spaces, block 1 ends the text
    records = [_decode(1, 0, "draft", drafts=[(3, NL, 0.9)]),
               _decode(2, 1, "draft", drafts=[(p, EOS, 0.9) for p in range(4, 8)])]
    trace = Trace(hand.prompt_ids, hand.settings, hand.mask_id, hand.eos_id, texts=hand.texts, records=records)
    trace.finish(text="\n    ")
    assert trace.output_ids == [NL, EOS]
    note = tables.output_note(trace, "HINT")
    assert note.startswith("The output is only whitespace") and note.endswith("HINT")
    assert tables.output_note(None, "HINT") == ""


def test_the_playground_run_ends_with_the_hint(tiny_model_dir, tmp_path):
    model = shutil.copytree(tiny_model_dir, tmp_path / "m")
    (model / MODEL_INFO).write_text(json.dumps({"knows": "Only additions."}))
    models = Models([str(model)])
    page = {"mode": "S", "tau_mask": 0.5, "edit": True, "tau_edit": 0.0, "mbe": False, "mbe_window": 1,
            "block_length": 8, "gen_length": 16, "max_post_steps": 4, "temperature": 0.0, "seed": 0}
    last = list(generate_ui(models, prompt="Tell me a story", model=str(model), **page))[-1]
    assert last.error == "" and "Only additions." in last.note
    last = list(generate_ui(models, prompt="12+34=", model=str(model), **page))[-1]
    assert "Only additions." not in last.note
