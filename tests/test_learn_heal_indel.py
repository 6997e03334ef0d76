"""Learn lessons 6 and 7: a finished answer poked and healed by T2T (the embedded model), and LLaDA2.2's moves
on assets/model22 (a lesson names its model; the recorder loads it; the recording and the view name it), with
the repair-rate benchmark (`python -m llada.bench repair`) on a few trials."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llada.bench import repair
from llada.records import Poke
from ui.learn import lessons, record, view as learn
from ui.learn.lessons import Recording, heal_problems, healed_at, problems
from ui.models import DEFAULT_MODEL, MODEL22
from ui.render.narrate import narrate, story


@pytest.fixture(scope="module")
def by_idea() -> dict[str, Recording]:
    recordings = lessons.load_recordings()
    assert recordings, f"{lessons.RECORDING} is missing or unreadable: run python -m ui.learn.record"
    return {r.idea: r for r in recordings.values()}


# ---- 6 · break it and watch it heal ----------------------------------------------------------------------

def test_the_heal_lesson_pokes_a_verified_answer_and_an_edit_writes_it_back(by_idea):
    rec, draft = by_idea["heal"], by_idea["draft"].runs[0]
    (t,) = rec.runs
    assert problems(rec) == [] and rec.model_dir == "assets/model"
    (step, poke), = t.pokes
    assert t.tokens_at(step - 1) == draft.tokens_at(draft.steps)  # lesson 1's run, finished, before the poke
    assert t.step_record(step).phase == "verify" and not t.step_record(step).changes
    assert healed_at(t) == step + 1 and t.text == draft.text  # the next forward edits it back: the same answer
    assert t.tokens_at(step)[poke.pos] == poke.token != poke.old
    line = narrate(t, step)
    assert "is verified and final; then, from outside the model, a poke: position 21 'el' → 'comp'" in line
    assert "block 0 is open again" in line
    assert "changed 'comp' → 'el'" in narrate(t, step + 1) and f"poked after step {step}" in narrate(t, step + 1)
    assert Recording.run_name(t) == "S + poke" and "pokes 1" in learn.stats_html(rec)


def test_heal_problems_bite(by_idea):
    t = by_idea["heal"].runs[0]
    assert heal_problems(by_idea["draft"].runs[0]) == ["the run has 0 pokes, not one"]
    data = t.to_dict()
    step = t.pokes[0][0]
    heal = next(r for r in data["records"] if r["kind"] == "decode" and r["step"] == step + 1)
    heal["edits"] = [[pos, 5, old, p] for pos, _, old, p in heal["edits"]]  # the edit writes another token
    broken = type(t).from_dict(data)
    assert heal_problems(broken) == ["no edit restores the poked token"]


# ---- 7 · insertion and deletion, on assets/model22 -----------------------------------------------------------

def test_the_indel_lesson_is_a_model22_run_that_inserts_and_deletes(by_idea):
    rec = by_idea["indel"]
    (t,) = rec.runs
    assert (rec.model, rec.model_dir) == ("llada2.2-cpu-moe", "assets/model22") and problems(rec) == []
    assert t.inserts >= 1 and t.deletes >= 1 and rec.right(t) is True
    lines = " ".join(story(t))
    assert "DELETE removed 'bat'" in lines and "SPLIT opened a mask at position" in lines
    caption = learn.caption_html(rec)
    assert "<code>llada2.2-cpu-moe</code> (its card: <code>assets/model22/README.md</code>)" in caption
    stats = learn.stats_html(rec)
    assert f"inserts {t.inserts}" in stats and f"deletes {t.deletes}" in stats
    assert "inserts" not in learn.stats_html(by_idea["draft"])  # a 2.1 lesson shows no empty move counts


def test_a_lesson_names_its_model_and_the_recorder_loads_it(tmp_path):
    (indel,) = [lesson for lesson in record.LESSONS if lesson.idea == "indel"]
    models = record.Models(tmp_path / "other")
    assert models.dir_of(indel) == MODEL22  # its own model, whatever --model says
    assert models.dir_of(record.LESSONS[0]) == tmp_path / "other"  # the embedded model's lessons follow --model
    out = tmp_path / "indel.json"
    data = record.record_file(DEFAULT_MODEL, out, (indel,))
    (made,) = data["lessons"]
    assert (made["model"], made["model_dir"]) == ("llada2.2-cpu-moe", "assets/model22")
    assert data["model"] == "llada2-lease-moe"  # the file's default model
    (rec,) = lessons.load_recordings(out).values()
    assert rec.runs[0].model == "llada2.2-cpu-moe" and rec.runs[0].inserts >= 1


def test_a_lesson_whose_runs_name_another_model_is_refused(by_idea):
    d = {"title": "x", "model": "llada2-lease-moe", "runs": [by_idea["indel"].runs[0].to_dict()]}
    with pytest.raises(ValueError, match="names model 'llada2-lease-moe' but its runs were made by"):
        Recording.from_dict(d)


# ---- the repair benchmark --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pipe():
    from llada.pipeline import Pipeline

    return Pipeline.load(DEFAULT_MODEL)


def test_a_corruption_is_never_a_special_token_nor_the_one_there(pipe):
    rng = random.Random(0)
    special = repair.special_ids(pipe)
    assert all(repair.random_token(pipe, 7, rng) not in special | {7} for _ in range(500))


def test_an_earlier_block_poke_lands_in_a_finished_block_after_the_next_ones_first_forward(pipe):
    from llada.data.tasks import eval_items

    item = eval_items("reverse", 1, 0)[0]
    trace, _ = repair.decode(pipe, item, pipe.config("Q", block_length=8, eos_early_stop=True))
    poke = repair.poke_in_earlier_block(pipe, trace, random.Random(0))
    assert isinstance(poke, Poke)
    record = trace.step_record(poke.step)
    assert record.block_step == 1 and record.block == (trace.prompt_length + poke.pos) // 8 + 1


def test_repair_bench_runs_a_few_trials(tmp_path, capsys):
    out = tmp_path / "repair.json"
    assert repair.main(["--n", "4", "--tasks", "add,rename", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 4 and {"command", "commit", "machine", "load_average"} <= set(report)
    finished = report["results"]["finished"]
    assert list(finished) == list(repair.SETTINGS)
    assert all(f["trials"] == 4 and 0 <= f["repaired"] <= 4 for f in finished.values())
    assert {task: c["trials"] for task, c in finished["Q"]["by_task"].items()} == {"add": 2, "rename": 2}
    assert finished["editing off"]["repaired"] == 0  # without T2T a written token never changes
    shipped_q = json.loads((DEFAULT_MODEL / "presets.json").read_text())["Q"]
    assert report["results"]["settings"]["Q"]["tau_edit"] == shipped_q["editing_threshold"]  # the model's own Q
    assert report["results"]["earlier_block"]["MBE off"]["repaired"] == 0  # a finished block is frozen
    assert json.loads(capsys.readouterr().out) == report


def test_repair_bench_refuses_a_model22_and_a_bad_n(capsys):
    assert repair.main(["--model", str(MODEL22), "--n", "1"]) == 2
    assert "measures LLaDA2.1 runs only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        repair.main(["--n", "0"])
    assert "--n must be at least 1" in capsys.readouterr().err


def test_shipped_recording_keeps_each_lesson_model():
    data = json.loads(Path(lessons.RECORDING).read_text(encoding="utf-8"))
    assert {lesson["model_dir"] for lesson in data["lessons"]} == {"assets/model", "assets/model22"}
