"""Compare with two models: the same prompt on the embedded LLaDA2.1-format model and on assets/model22, side by
side; each side's numbers and the charts count the 2.2 model's inserts and deletes; bad choices are refused."""

from __future__ import annotations

import gradio as gr
import pytest

from tests.ui_helpers import hand_trace
from ui.models import DEFAULT_MODEL, MODEL22, Models
from ui.playground import compare, view
from ui.render import charts
from ui.settings import InputError

PROMPT = "def square(febatbat):\n"  # an example of assets/examples.json on which model22 deletes and inserts


@pytest.fixture(scope="module")
def models() -> Models:
    return Models([str(DEFAULT_MODEL), str(MODEL22)])


@pytest.fixture(scope="module")
def last(models) -> compare.CompareFrame:
    frames = list(compare.compare_ui(models, None, PROMPT, 32, versus="two models", other=str(MODEL22)))
    assert frames[-1].error == ""
    return frames[-1]


def test_two_models_run_the_same_prompt_side_by_side(models, last):
    names = models.names()
    assert list(last.pair) == names  # the chosen model on the left, the second on the right
    left, right = last.pair.values()
    assert left.prompt == right.prompt == PROMPT and left.status == right.status == "done"
    assert [r["target"] for r in last.replay["replays"]] == list(compare.CANVAS_IDS)
    assert list(last.table["run"]) == names
    assert "Both ran mode S, each with its own preset" in last.verdict and names[1] in last.verdict


def test_each_side_counts_its_own_moves(models, last):
    left, right = last.pair.values()
    s21, s22 = left.stats(), right.stats()
    assert s21["inserts"] == s21["deletes"] == 0  # a LLaDA2.1 model never moves a token
    assert s22["inserts"] > 0 and s22["deletes"] > 0
    assert last.stats_s.startswith(f"**{models.names()[0]}**") and "inserts" not in last.stats_s
    assert f"inserts {s22['inserts']} · deletes {s22['deletes']}" in last.stats_q
    assert f"TPF {s22['tpf']:.2f}" in last.stats_q and f"drafts {s22['drafts']}" in last.stats_q
    row = last.table.iloc[1]
    assert (row["inserts"], row["deletes"], row["drafts"]) == (s22["inserts"], s22["deletes"], s22["drafts"])


def test_the_charts_draw_the_second_models_inserts_and_deletes(models, last):
    figure = charts.steps_figure(list(last.pair.items()))
    names = {t.name for t in figure.data}
    right = models.names()[1]
    assert {f"{right} inserts (SPLIT)", f"{right} deletes (DELETE)"} <= names
    assert not any(n.startswith(models.names()[0]) and ("SPLIT" in n or "DELETE" in n) for n in names)
    assert "inserted and deleted" in figure.layout.title.text
    drawn = {t.name: sum(t.y) for t in figure.data}
    assert drawn[f"{right} inserts (SPLIT)"] == last.pair[right].stats()["inserts"]


def test_custom_runs_each_models_s_preset(models):
    runs = compare.model_runs(models, None, str(MODEL22), PROMPT, 16, mode=compare.model_mode("Custom"))
    try:
        assert [run.trace.settings.threshold for run in runs.values()] == [
            compare.presets_of(path)["S"]["threshold"] for path in (str(DEFAULT_MODEL), str(MODEL22))]
    finally:
        for run in runs.values():
            run.close()


@pytest.mark.parametrize("other, message", [(None, "pick the second model"), ("", "pick the second model"),
                                            (str(DEFAULT_MODEL), "both sides would be the same run"),
                                            ("no-such-model", "unknown model 'no-such-model'")])
def test_a_second_model_that_is_none_or_the_same_is_refused(models, other, message):
    with pytest.raises(ValueError, match=message):
        compare.model_runs(models, None, other, PROMPT, 16)
    first = list(compare.compare_ui(models, None, PROMPT, 16, versus="two models", other=other))
    assert len(first) == 1 and message.split("'")[0] in first[0].error


def test_a_comparison_that_is_none_is_refused(models):
    out = list(compare.compare_ui(models, None, PROMPT, 16, versus="both"))
    assert len(out) == 1 and "compare must be one of S vs Q, two models" in out[0].error
    with pytest.raises(InputError, match="compare must be one of"):
        view.compare_choice(None)


def test_the_choice_shows_the_second_model_and_names_the_button(models):
    button, other = view.compare_choice("two models")
    assert button["value"] == "Compare two models" and other["visible"] is True
    button, other = view.compare_choice("S vs Q")
    assert button["value"] == "Compare S vs Q" and other["visible"] is False
    assert view.second_model(models) == str(MODEL22)  # the 2.2 model against the embedded 2.1 one
    assert view.second_model(Models([str(DEFAULT_MODEL)])) is None


def test_a_live_pair_of_models_is_drawn_by_position():
    running = {"llada2-lease-moe": hand_trace(), "llada2.2-cpu-moe": hand_trace()}
    left, right = compare.compare_step(running, 2)
    assert 'id="canvas-s"' in left and 'id="canvas-q"' in right and 'data-step="2"' in right
    assert all(isinstance(x, type(gr.skip())) for x in compare.compare_step({k: t.finish() for k, t in
                                                                             running.items()}, 1))
