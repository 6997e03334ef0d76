"""The playground's examples (assets/examples.json) say what each run shows; on the shipped model it does.

Each label makes a claim about one run of the embedded model (a body drafted in one forward, a name
edited in the next, ...). The claims are checked here on runs made through the playground's own path, so
a re-trained model that no longer shows them fails this test until the examples are chosen again
(`python -m ui.learn.lesson_search` finds candidates)."""

from __future__ import annotations

import pytest

from llada.pipeline import Pipeline
from ui.learn.record import RunSpec, run_trace
from ui.playground.controls import example_model, examples


def _decodes(trace):
    return [r for r in trace.records if r.kind == "decode"]


def _one_forward_drafts_all(trace) -> bool:
    """Every answer token was drafted by the first decode forward and none changed afterwards."""
    first = _decodes(trace)[0]
    drafted = {c.pos for c in first.drafts}
    answer = range(len(trace.prompt_ids), len(trace.prompt_ids) + len(trace.output_ids))
    return set(answer) <= drafted and trace.edits == 0 and trace.mbe_edits == 0


def _edited_in_second(trace) -> bool:
    """The first forward drafts and edits nothing; every edit of the run is made by the second."""
    steps = _decodes(trace)
    return not steps[0].edits and bool(steps[1].edits) and trace.edits == len(steps[1].edits)


def _one_position_edited_twice(trace) -> bool:
    positions = [c.pos for r in _decodes(trace) for c in r.edits]
    return any(positions.count(p) == 2 for p in positions)


def _steps_with(trace, kind: str) -> list[int]:
    """Indices of the decode steps that made at least one move of `kind` ("inserts" or "deletes")."""
    return [i for i, r in enumerate(_decodes(trace)) if getattr(r, kind)]


def _delete_then_insert(trace) -> bool:
    deletes, inserts = _steps_with(trace, "deletes"), _steps_with(trace, "inserts")
    return bool(deletes) and bool(inserts) and deletes[0] < inserts[0]


def _insert_filled_next(trace) -> bool:
    """A step inserts a mask, and the next step drafts at the position the mask landed on."""
    steps = _decodes(trace)
    return any(any(c.pos == m.mask for c in steps[i + 1].drafts)
               for i in _steps_with(trace, "inserts") if i + 1 < len(steps) for m in steps[i].inserts)


CLAIMS = {  # label prefix -> (the check of what the label says, the answer the run writes)
    "Code (S)": (_one_forward_drafts_all, "    return batpami * batpami * batpami\n"),
    "Edit (S)": (_edited_in_second, "    return paholbat == 0\n"),
    "Addition (S)": (_one_forward_drafts_all, "947"),
    "Careful (Q)": (_one_position_edited_twice, "    lomi = lomi - 1\n    return lomi\n"),
    "MBE (Q, blocks of 4)": (lambda t: t.mbe_edits >= 1, "    return pavo * pavo * pavo\n"),
    "Sorting digits (S)": (lambda t: t.num_decode_forwards == 2, "13479"),
    "Reversing words (S)": (lambda t: t.num_decode_forwards == 2, " door snow tree sun"),
    "Delete, then insert (LLaDA2.2 model, S)": (_delete_then_insert, "    return febatbat * febatbat\n"),
    "Insert (LLaDA2.2 model, S)": (_insert_filled_next, "    ixturen = ixturen + 1\n    return ixturen\n"),
    "Deletes (LLaDA2.2 model, S)": (lambda t: t.deletes >= 2, "    pagri = pagri - 1\n    return pagri\n"),
    "Sorting nine digits (LLaDA2.2 model, S)": (_insert_filled_next, "112346668"),
}


@pytest.fixture(scope="module")
def pipes():
    """The Pipeline of each model the examples name, loaded once (the embedded model for the others)."""
    loaded = {}

    def get(example: dict):
        path = example_model(example)
        if path not in loaded:
            loaded[path] = Pipeline.load(path)
        return loaded[path]
    return get


@pytest.fixture(scope="module")
def pipe(pipes):
    return pipes({})


def _claim(label: str):
    found = [claim for prefix, claim in CLAIMS.items() if label.startswith(prefix)]
    assert len(found) == 1, f"no claim written for the example {label!r}: add one to CLAIMS"
    return found[0]


@pytest.mark.parametrize("example", examples(), ids=lambda e: e["label"].split(":")[0])
def test_the_example_shows_what_its_label_says(pipes, example):
    pipe = pipes(example)
    check, answer = _claim(example["label"])
    spec = RunSpec(example["mode"], mbe=example["mbe"], block_length=example["block_length"])
    trace = run_trace(pipe, example["prompt"], spec, example["gen_length"])
    text = pipe.decode_text(trace.output_ids)
    assert text == answer, f"{example['label']!r}: the run wrote {text!r}"
    assert check(trace), f"{example['label']!r} is not what the run shows: {[r.to_dict() for r in _decodes(trace)]}"


def test_a_check_fails_on_a_run_that_does_not_show_it(pipe):
    """The checks can fail: the edit example's prompt in M2T only shows no edit."""
    trace = run_trace(pipe, "def is_zero(paholbat):\n", RunSpec("M2T only"), 32)
    assert not _edited_in_second(trace) and not _one_position_edited_twice(trace)
