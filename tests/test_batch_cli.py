"""`python -m llada generate --prompts-file F`: one prompt per line in, one result per line out, each the
result of that prompt alone; bad files are one clear error line."""

import json

import pytest

from llada.__main__ import main
from golden_cases import case_config


def _cli(capsys, *args):
    code = main(["generate", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _case_args(case, golden) -> list:
    args = ["--threshold", case["threshold"], "--editing-threshold", case["editing_threshold"],
            "--max-post-steps", case["max_post_steps"], "--block-length", case["block_length"],
            "--gen-length", case["gen_length"], "--mask-id", golden["mask_id"], "--eos-id", golden["eos_id"]]
    return args + (["--eos-early-stop"] if case["eos_early_stop"] else [])


def test_prompts_file_of_ids_gives_each_prompt_its_lone_result(capsys, tmp_path, fixture_dir, golden):
    same = [c for c in golden["generate"] if case_config(c) == case_config(golden["generate"][2])]
    assert len(same) >= 2  # golden cases that share their settings, different prompts
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(",".join(map(str, c["prompt_ids"])) for c in same) + "\n\n")
    code, out, err = _cli(capsys, "--model", fixture_dir, "--prompts-file", path, "--batch-size", 2, "--json",
                          *_case_args(same[0], golden))
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == len(same)
    for got, case in zip(lines, same):
        assert got["output_ids"] == case["output_ids"] and got["num_decode_forwards"] == case["num_forwards"]
        assert got["block_states_before_each_forward"] == case["block_states_before_each_forward"]
        assert set(got) == {"output_ids", "num_decode_forwards", "num_cache_forwards", "tpf", "tps", "drafts",
                            "edits", "mbe_edits", "inserts", "deletes", "block_states_before_each_forward"}


def test_prompts_file_of_text_and_json_lines(capsys, tmp_path, tiny_model_dir):
    path = tmp_path / "prompts.txt"
    path.write_text('def add(\n' + json.dumps("def f(x):\n    return") + "\n")
    base = ["--model", tiny_model_dir, "--mode", "Q", "--gen-length", 16, "--block-length", 8, "--json"]
    code, out, err = _cli(capsys, *base, "--prompts-file", path)
    assert code == 0, err
    batch = [json.loads(line) for line in out.splitlines()]
    alone = [json.loads(_cli(capsys, *base, "--prompt", p)[1]) for p in ("def add(", "def f(x):\n    return")]
    assert [b | {"tps": 0} for b in batch] == [a | {"tps": 0} for a in alone] and "text" in batch[0]
    code, out, err = _cli(capsys, *base[:-1], "--prompts-file", path)  # without --json: text + summary per prompt
    assert code == 0 and out.count("decode +") == 2


@pytest.mark.parametrize("content, extra, message", [
    ("", [], "no prompt in it"),
    ('"unclosed\n', [], "line 1: not a valid JSON string"),
    ("def add(\n   \n[1, 2]\n", [], None),  # blank lines are skipped; [1, 2] is text
    ('"def"\n""\n', [], "line 2: the prompt is empty"),
    ("def add(\n", ["--batch-size", 0], "max_batch must be a positive integer"),
])
def test_bad_prompts_files_are_one_clear_line(capsys, tmp_path, tiny_model_dir, content, extra, message):
    path = tmp_path / "prompts.txt"
    path.write_text(content)
    code, out, err = _cli(capsys, "--model", tiny_model_dir, "--prompts-file", path, "--gen-length", 8, *extra)
    if message is None:
        assert code == 0 and out.count("decode +") == 2
        return
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_ids_file_for_a_model_without_tokenizer_and_missing_file(capsys, tmp_path, fixture_dir, tiny_model_dir):
    path = tmp_path / "prompts.txt"
    path.write_text("1,2,3\nhello\n")
    code, _, err = _cli(capsys, "--model", fixture_dir, "--prompts-file", path, "--mask-id", 258, "--eos-id", 257)
    assert code == 2 and "line 2: expected comma-separated token ids" in err and "no tokenizer" in err
    code, _, err = _cli(capsys, "--model", tiny_model_dir, "--prompts-file", tmp_path / "none.txt")
    assert code == 2 and "cannot read it" in err
    code, _, err = _cli(capsys, "--model", tiny_model_dir, "--prompt", "x", "--batch-size", 2)
    assert code == 2 and "--batch-size needs --prompts-file" in err
