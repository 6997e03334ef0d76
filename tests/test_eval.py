"""The eval harness: JSON shape of UI_CONTRACT.md (and the keys added to it), determinism, the tables,
and the code track on held-out functions of a source tree written by the test."""

from __future__ import annotations

import pytest

from types import SimpleNamespace

from llada.eval import codetrack, harness as evaluation
from llada.pipeline import Pipeline
from code_corpus import write_tree

KEYS = {"threshold", "editing_threshold", "accuracy", "tpf", "tps", "edits_per_100", "tasks"}  # UI_CONTRACT.md
ADDED = {"mbe_runs"}  # added beside them: share of block-crossing runs in which MBE edited an earlier block
CODE_KEYS = {"threshold", "editing_threshold", "parses", "in_scope", "multi_line", "tpf", "tps", "edits_per_100",
             "mbe_runs"}


@pytest.fixture(scope="module")
def pipe(tiny_model_dir):
    return Pipeline.load(tiny_model_dir)


def run(pipe, modes=None):
    return evaluation.evaluate(pipe, ["add", "sort"], n=2, seed=0, modes=modes, gen_length=8, progress=False)


def test_report_has_the_contract_shape(pipe):
    report = run(pipe)
    assert set(report) == {"model", "seed", "n", "modes"} and report["n"] == 2
    assert list(report["modes"]) == ["S", "Q", "M2T", "S_noedit", "S_MBE"]
    for name, mode in report["modes"].items():
        assert set(mode) == KEYS | ADDED, name
        assert set(mode["tasks"]) == {"add", "sort"}
        assert all(set(t) == {"accuracy", "tpf"} for t in mode["tasks"].values())
        assert mode["accuracy"] == 0.0  # a random model never writes an exact sum or sorted digits
    assert report["modes"]["S_noedit"]["editing_threshold"] is None
    assert report["modes"]["S_noedit"]["edits_per_100"] == 0.0


def test_overall_numbers_weigh_tasks_equally_and_tokens_by_forward():
    report = evaluation.ModeReport(0.5, 0.0)
    report.tasks["add"] = evaluation.Tally(correct=1, items=2, tokens=10, forwards=5, seconds=2.0, edits=1)
    report.tasks["sort"] = evaluation.Tally(correct=4, items=4, tokens=6, forwards=3, seconds=1.0, edits=0)
    out = report.to_dict()
    assert out["accuracy"] == (1 / 2 + 4 / 4) / 2  # per-task accuracies averaged, as the paper averages benchmarks
    assert out["tpf"] == 16 / 8 and out["tps"] == 16 / 3 and out["edits_per_100"] == 100 / 16
    assert out["mbe_runs"] == 0.0  # no run crossed a block
    assert out["tasks"] == {"add": {"accuracy": 0.5, "tpf": 2.0}, "sort": {"accuracy": 1.0, "tpf": 2.0}}


def test_an_item_is_scored_by_exact_match_of_its_answer(pipe):
    from llada.data.tasks import Item

    item = Item("add", "1+1=", "2")
    assert evaluation.score_item(pipe, item, evaluation.mode_config(pipe, "S", 8)).correct == 0
    assert item.check("2") and not item.check("2 ") and not item.check(" 2")


def test_report_is_deterministic_except_time(pipe):
    strip = lambda r: {m: {k: v for k, v in d.items() if k != "tps"} for m, d in r["modes"].items()}  # noqa: E731
    modes = ["S", "S_MBE"]
    assert strip(run(pipe, modes)) == strip(run(pipe, modes))


def test_table_and_cli_arguments(pipe, capsys):
    table = evaluation.format_table(run(pipe, ["S", "S_MBE"]))
    assert "| S_MBE |" in table and "add acc" in table
    with pytest.raises(SystemExit):
        evaluation.parse_args(["--tasks", "divide"])
    capsys.readouterr()


# ---- the code track ---------------------------------------------------------------------------------

def run_of(prompt_length: int, tokens: int, mbe_edits: int):
    return SimpleNamespace(prompt_length=prompt_length, output_ids=[7] * tokens, forwards=4, seconds=0.5, edits=1,
                           mbe_edits=mbe_edits)


def test_mbe_runs_counts_only_runs_that_cross_a_block():
    cfg = SimpleNamespace(block_length=32)
    inside, crossing = evaluation.run_tally(run_of(10, 20, 0), cfg), evaluation.run_tally(run_of(30, 5, 2), cfg)
    assert (inside.multi_block, crossing.multi_block, crossing.mbe_fired) == (0, 1, 1)
    total = evaluation.Tally()
    for t in (inside, crossing, evaluation.run_tally(run_of(60, 40, 0), cfg)):
        total.add(t)
    assert total.summary()["mbe_runs"] == 1 / 2  # two runs crossed a block, MBE fired in one


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    write_tree(root)
    return codetrack.held_out_items(10, 0, [root])


def test_code_track_has_its_json_shape(pipe, held_out):
    assert len(held_out) == 5  # area, hypotenuse, scaled, counter, step of the held-out file
    report = codetrack.evaluate_code(pipe, held_out[:3], modes=["S", "S_noedit", "S_MBE"], gen_length=8,
                                     progress=False)
    assert report["n"] == 3 and report["gen_length"] == 8
    assert report["reference"]["parses"] == report["reference"]["in_scope"] == 1.0  # the bodies pass their own checks
    lines = [len([x for x in it.body.splitlines() if x.strip()]) for it in held_out[:3]]
    assert report["reference"]["multi_line"] == sum(n >= 2 for n in lines) / 3
    assert list(report["modes"]) == ["S", "S_noedit", "S_MBE"]
    for name, mode in report["modes"].items():
        assert set(mode) == CODE_KEYS, name
        assert mode["parses"] == 0.0  # a random model writes no parsing function body in 8 tokens
    assert report["modes"]["S_noedit"]["edits_per_100"] == 0.0
    assert "| S_MBE |" in codetrack.format_code_table(report)


def test_code_track_scores_what_the_model_wrote(pipe, held_out, monkeypatch):
    """Completions: the true body for the first item, a name out of scope for the second, junk for the rest."""
    decode = codetrack.decode_texts

    def decode_texts(pipe_, prompts, cfg, batch, progress=None):
        fake = [{0: item.body, 1: "    return undefined_name\n"}.get(i, "    return (\n")
                for i, item in enumerate(held_out)]
        return [(text, trace, s) for text, (_, trace, s) in zip(fake, decode(pipe_, prompts, cfg, batch, progress))]

    monkeypatch.setattr(codetrack, "decode_texts", decode_texts)
    mode = codetrack.evaluate_code(pipe, held_out, modes=["Q"], gen_length=8, progress=False)["modes"]["Q"]
    assert mode["parses"] == 2 / 5 and mode["in_scope"] == 1 / 5
    first = len([x for x in held_out[0].body.splitlines() if x.strip()])
    assert mode["multi_line"] == (first >= 2) / 5  # the one-line `return undefined_name` is not multi-line


def test_the_report_keeps_its_shape_without_the_code_track(pipe):
    args = evaluation.parse_args(["--n", "1", "--tasks", "add", "--modes", "S", "--code-n", "0", "--gen-length", "8"])
    report = evaluation.full_report(pipe, args)
    assert set(report) == {"model", "seed", "n", "modes"}
    with pytest.raises(SystemExit):
        evaluation.parse_args(["--code-n", "-1"])
