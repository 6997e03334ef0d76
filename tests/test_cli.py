"""`python -m llada generate`: the JSON contract on the reference fixture, and clean errors.

The command runs in-process (`main(argv)`); one test crosses the process boundary (exit status,
stdin closed, stderr)."""

import json
import subprocess
import sys

import pytest

from llada.__main__ import main


def _cli(capsys, *args):
    code = main(["generate", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("index", [2, 6])
def test_cli_json_reproduces_the_fixture(capsys, fixture_dir, golden, index):
    case = golden["generate"][index]
    args = ["--model", fixture_dir, "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
            "--threshold", case["threshold"], "--editing-threshold", case["editing_threshold"],
            "--max-post-steps", case["max_post_steps"], "--block-length", case["block_length"],
            "--gen-length", case["gen_length"], "--mask-id", golden["mask_id"], "--eos-id", golden["eos_id"], "--json"]
    if case["eos_early_stop"]:
        args.append("--eos-early-stop")
    code, out, err = _cli(capsys, *args)
    assert code == 0, err
    got = json.loads(out)
    assert got["output_ids"] == case["output_ids"]
    assert got["num_decode_forwards"] == case["num_forwards"]
    assert got["block_states_before_each_forward"] == case["block_states_before_each_forward"]
    assert got["tpf"] == len(case["output_ids"]) / (got["num_decode_forwards"] + got["num_cache_forwards"])
    assert got["tps"] > 0 and got["drafts"] >= len(case["output_ids"]) and "text" not in got  # no tokenizer


def test_explicit_thresholds_override_the_mode(capsys, tiny_model_dir):
    base = ["--model", tiny_model_dir, "--prompt", "def add(", "--gen-length", 16, "--block-length", 8, "--json"]
    outs = [json.loads(_cli(capsys, *base, *extra)[1]) for extra in
            (["--mode", "Q"], ["--mode", "Q", "--threshold", 0.7, "--editing-threshold", 0.5],
             ["--mode", "Q", "--threshold", 0.0, "--no-edit"])]
    assert outs[0] == outs[1] | {"tps": outs[0]["tps"]}  # Q's own values, given explicitly: the same run
    assert outs[2]["edits"] == 0 and outs[2]["num_decode_forwards"] < outs[0]["num_decode_forwards"]


def test_cli_text_prompt_prints_text_and_summary(capsys, tiny_model_dir):
    code, out, err = _cli(capsys, "--model", tiny_model_dir, "--prompt", "def add(", "--mode", "Q",
                          "--gen-length", 16, "--mbe")
    assert code == 0, err
    assert "decode +" in out and "TPF" in out and "MBE edits" in out


@pytest.mark.parametrize("args, message", [
    (["--threshold", "1.5"], "threshold must be a number in [0.0, 1.0]"),
    (["--gen-length", "0"], "gen_length must be a positive integer"),
    (["--prompt", "   "], "the prompt is empty"),
    (["--mode", "fast"], "unknown mode 'fast'"),
])
def test_cli_bad_input_is_one_clear_line(capsys, tiny_model_dir, args, message):
    base = ["--model", tiny_model_dir] + ([] if "--prompt" in args else ["--prompt", "x"])
    code, _, err = _cli(capsys, *base, *args)
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1


def test_the_process_exits_2_with_one_line_and_no_prompt(tmp_path):
    out = subprocess.run([sys.executable, "-m", "llada", "generate", "--model", str(tmp_path / "none"),
                          "--prompt-ids", "1,2"], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: ") and "model directory not found" in out.stderr
