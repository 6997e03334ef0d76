"""Tasks (answers, checkers, split), the installed-source corpus (filters, dedup, split by path),
functions and their scope, and the row layouts of training batches."""

from __future__ import annotations

import random
import textwrap

import pytest
import torch

from llada.data import code, sources, tasks
from llada.train.corpus import build_corpus
from llada.train.data import Encoded, RowSampler, Rows, to_batch, window_rows, packed_rows
from code_corpus import LIBRARY, write_tree


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_every_task_has_one_checkable_answer(task):
    item = tasks.sample(task, random.Random(3), "train")
    assert item.task == task and item.prompt and item.answer
    assert item.check(item.answer)
    assert not item.check(item.answer + " ")


def test_answers_are_right():
    rng = random.Random(0)
    add = tasks.make_add(rng)
    a, b = add.prompt[:-1].split("+")
    assert int(add.answer) == int(a) + int(b)
    srt = tasks.make_sort(rng)
    assert srt.answer == "".join(sorted(srt.prompt.removeprefix("sort ").removesuffix("=")))
    rev = tasks.make_reverse(rng)
    words = rev.prompt.removeprefix("reverse ").removesuffix(":").split()
    assert rev.answer.split() == words[::-1]
    ren = tasks.make_rename(rng)
    name = ren.prompt[ren.prompt.index("(") + 1:ren.prompt.index(")")]
    assert ren.answer.count(name) >= 1 and ren.answer.endswith("\n")


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_eval_items_never_come_from_training(task):
    held_out = tasks.eval_items(task, 30, seed=5)
    assert len(held_out) == 30 and len({it.prompt for it in held_out}) == 30
    assert all(tasks.is_eval(it) for it in held_out)
    rng = random.Random(1)
    trained = {tasks.sample(task, rng, "train").prompt for _ in range(300)}
    assert not trained & {it.prompt for it in held_out}


def test_eval_items_are_deterministic_per_seed():
    assert tasks.eval_items("add", 5, 0) == tasks.eval_items("add", 5, 0)
    assert tasks.eval_items("add", 5, 0) != tasks.eval_items("add", 5, 1)


def test_unknown_task_and_split_are_refused():
    with pytest.raises(ValueError, match="unknown task"):
        tasks.sample("divide", random.Random(0), "train")
    with pytest.raises(ValueError, match="split"):
        tasks.sample("add", random.Random(0), "test")


# ---- the corpus: installed Python source ----------------------------------------------------------------

def test_sources_are_filtered_deduplicated_and_split_by_path(tmp_path):
    expected = write_tree(tmp_path)
    stats = sources.SourceStats()
    found = sources.load_sources([tmp_path], stats=stats)
    assert sorted(f.key for f in found if f.split == "train") == expected["train"]
    assert [f.key for f in found if f.split == "eval"] == expected["eval"]
    assert stats.duplicates == 1 and stats.dropped == {"generated": 2, "minified": 1}
    assert stats.found == 1 + 6 + 4  # tests/ and _vendor/ are never listed
    assert [f.key for f in sources.load_sources([tmp_path], split="eval")] == expected["eval"]


def test_the_split_key_is_the_path_below_its_root(tmp_path):
    (tmp_path / "a" / "pkg").mkdir(parents=True)
    (tmp_path / "b" / "pkg").mkdir(parents=True)
    (tmp_path / "a" / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "b" / "pkg" / "mod.py").write_text("X = 2\n")
    found = sources.load_sources([tmp_path / "a", tmp_path / "b"])
    assert [f.key for f in found] == ["pkg/mod.py", "pkg/mod.py"]  # same key on every machine: same split
    assert found[0].split == found[1].split


def test_the_installed_standard_library_is_found():
    roots = sources.source_roots(("stdlib",))
    found = sources.load_sources(roots, max_files=5)
    assert len(found) == 5 and all(f.path.suffix == ".py" and not f.key.startswith("/") for f in found)
    with pytest.raises(ValueError, match="unknown source 'pypi'"):
        sources.source_roots(("pypi",))


def test_build_corpus_drops_files_that_are_not_python3(tmp_path):
    write_tree(tmp_path)
    name = next(k for k in (f"old{i}.py" for i in range(200)) if sources.SourceFile(k, tmp_path, "").split == "train")
    (tmp_path / name).write_text('print "python 2"\n')
    corpus = build_corpus((), roots=[tmp_path], progress=False)
    assert corpus.stats.dropped["syntax"] == 1 and name not in {f.key for f in corpus.files}
    assert len(corpus.files) == 6 and len(corpus.held_out) == 1
    assert len(corpus.functions) == 6 * 6  # six functions per training copy, methods and nested ones included


# ---- functions and their scope ------------------------------------------------------------------------

def fns():
    return {f.key.split(":")[1]: f for f in code.functions_of("geometry.py", LIBRARY)}


def test_a_function_is_cut_into_signature_docstring_and_body():
    area = fns()["7"]
    assert area.signature == "def area(width, height):\n"
    assert area.docstring == '    """The area of a width x height rectangle."""\n'
    assert area.body == "    return width * height\n"
    assert area.prompt + area.body == area.text


def test_methods_and_nested_functions_are_dedented_and_see_their_scope():
    found = fns()
    scaled, step = found["21"], found["31"]
    assert scaled.signature == "def scaled(self, factor):\n" and scaled.body.startswith("    radius = ")
    assert "Circle" in scaled.scope and "radius" not in scaled.scope  # class bodies are not visible
    assert step.signature == "def step(by=UNIT):\n" and {"total", "start", "UNIT", "math"} <= step.scope


def test_one_liners_and_docstring_only_functions_are_skipped():
    source = 'def a(): return 1\n\ndef b():\n    """Only a docstring."""\n\ndef c(x):\n    y = x\n    return y\n'
    assert [f.signature for f in code.functions_of("m.py", source)] == ["def c(x):\n"]


def test_a_completion_is_checked_for_parsing_and_scope():
    area = fns()["7"]
    assert code.check_completion(area, "    return width * height\n") == (True, True, (), 1)
    assert code.check_completion(area, "    return width * depth\n") == (True, False, ("depth",), 1)
    assert code.check_completion(area, "    return width *\n") == (False, False, (), 0)
    two = "    size = width * height\n\n    return (\n        size\n    )\n"  # a blank line and a wrapped return
    assert code.check_completion(area, two).body_lines == 5
    assert code.check_completion(area, "")[:2] == (False, False)  # a docstring alone is not a completion
    assert code.check_completion(area, "    import math\n    return math.pi * width\n").in_scope
    hyp = fns()["12"]
    assert code.check_completion(hyp, "    return math.hypot(a, b) + len([k for k in range(3)])\n").in_scope


def test_a_star_import_leaves_the_scope_unknown():
    source = "from os.path import *\n\ndef j(a):\n    \"\"\"Join.\"\"\"\n    return join(a, a)\n"
    (fn,) = code.functions_of("m.py", source)
    assert fn.scope is None and not code.is_eval_item(fn)
    assert code.check_completion(fn, fn.body)[:3] == (True, False, ())


def test_code_items_come_only_from_held_out_files(tmp_path):
    expected = write_tree(tmp_path)
    items = code.code_items(sources.load_sources([tmp_path]), n=50, seed=0)
    assert {it.key.split(":")[0] for it in items} == set(expected["eval"])
    assert len(items) == 5  # the functions with a docstring and a body: area, hypotenuse, scaled, counter, step
    assert code.code_items(sources.load_sources([tmp_path]), n=3, seed=0) == \
        code.code_items(sources.load_sources([tmp_path]), n=3, seed=0)


def test_irregular_indentation_is_kept_only_when_it_parses():
    source = textwrap.dedent('''\
        class K:
            def text(self):
                """A multi-line string that starts at column 0."""
                return """
        line
        """
        ''')
    (fn,) = code.functions_of("k.py", source)
    assert fn.body.endswith('line\n"""\n')  # lines without the method's indentation stay as they are


# ---- rows and batches ---------------------------------------------------------------------------------

def test_batch_rows_are_prompt_answer_eos_padding():
    rows = [Encoded([5, 6, 7], [8, 9, 0]), Encoded([5], [4] * 10 + [0])]
    batch = to_batch(rows, 8, eos_id=0)  # (2, 8); the second answer is cut
    assert batch.ids.tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], [5, 4, 4, 4, 4, 4, 4, 4]]
    assert batch.prompt_len.tolist() == [3, 1] and batch.answer_len.tolist() == [3, 7]
    assert batch.generated()[0].tolist() == [False] * 3 + [True] * 5


def test_window_rows_cut_each_file_and_close_it_with_eos():
    rows = window_rows([[1, 2, 3, 4, 5], [6]], length=4, eos_id=0)  # (3, 4): file 1 -> 2 rows, file 2 -> 1 row
    assert rows.ids.tolist() == [[1, 2, 3, 4], [5, 0, 0, 0], [6, 0, 0, 0]]
    assert rows.answer_len.tolist() == [4, 2, 2] and rows.prompt_len.tolist() == [0, 0, 0]
    assert rows.tokens == 8  # 6 tokens + one EOS per file


def test_row_sampler_visits_every_row_and_heads_become_prompts():
    ids = torch.arange(40, dtype=torch.int32).view(10, 4)
    rows = Rows(ids, torch.zeros(10, dtype=torch.int32), torch.full((10,), 4, dtype=torch.int32))
    sampler = RowSampler(rows, batch_size=5, seed=0, max_prompt=2)
    a, b = sampler.next(), sampler.next()
    assert sorted(torch.cat([a.ids[:, 0], b.ids[:, 0]]).tolist()) == list(range(0, 40, 4))  # one pass
    for batch in (a, b):
        assert ((batch.prompt_len >= 0) & (batch.prompt_len <= 2)).all()
        assert (batch.prompt_len + batch.answer_len == 4).all()


def test_packed_rows_put_functions_on_block_boundaries():
    items = [Encoded([5, 6], [7, 8, 0]), Encoded([9], [3] * 9 + [0]), Encoded([4], [2, 0])]
    rows = packed_rows(items, length=16, eos_id=0, align=4)  # item sizes 8, 12, 4 -> rows [8 | pad], [12, 4]
    assert rows.ids.tolist() == [[5, 6, 7, 8, 0, 0, 0, 0] + [0] * 8,
                                 [9] + [3] * 9 + [0, 0] + [4, 2, 0, 0]]
    assert rows.segment.tolist() == [[0] * 8 + [1] * 8, [0] * 12 + [1] * 4]
    assert rows.gen[0].tolist() == [False] * 2 + [True] * 6 + [False] * 8  # no loss on the empty tail
    assert rows.gen[1].tolist() == [False] + [True] * 11 + [False] + [True] * 3
    assert rows.answer_len.tolist() == [8, 16] and rows.item_tokens == 5 + 11 + 3
    batch = RowSampler(rows, batch_size=2, seed=0).next()
    assert batch.segment is not None and torch.equal(batch.generated(), rows.gen[batch.ids[:, 0].ne(5).long()])
