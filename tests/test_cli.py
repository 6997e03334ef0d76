"""`python -m llada generate`: the JSON contract on the reference fixture, and clean errors."""

import json
import subprocess
import sys

import pytest


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "llada", "generate", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("index", [2, 6])
def test_cli_json_reproduces_the_fixture(fixture_dir, golden, index):
    case = golden["generate"][index]
    args = ["--model", fixture_dir, "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
            "--threshold", case["threshold"], "--editing-threshold", case["editing_threshold"],
            "--max-post-steps", case["max_post_steps"], "--block-length", case["block_length"],
            "--gen-length", case["gen_length"], "--mask-id", golden["mask_id"], "--eos-id", golden["eos_id"], "--json"]
    if case["eos_early_stop"]:
        args.append("--eos-early-stop")
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["output_ids"] == case["output_ids"]
    assert got["num_decode_forwards"] == case["num_forwards"]
    assert got["block_states_before_each_forward"] == case["block_states_before_each_forward"]
    for key in ("num_cache_forwards", "tpf", "tps", "drafts", "edits", "mbe_edits"):
        assert key in got


def test_cli_text_prompt_prints_text_and_summary(tiny_model_dir):
    out = _cli("--model", tiny_model_dir, "--prompt", "def add(", "--mode", "Q", "--gen-length", 16, "--mbe")
    assert out.returncode == 0, out.stderr
    assert "decode +" in out.stdout and "TPF" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--threshold", "1.5"], "threshold must be a number in [0.0, 1.0]"),
    (["--gen-length", "0"], "gen_length must be a positive integer"),
    (["--prompt", "   "], "the prompt is empty"),
])
def test_cli_bad_input_is_one_clear_line(tiny_model_dir, args, message):
    base = ["--model", tiny_model_dir] + ([] if "--prompt" in args else ["--prompt", "x"])
    out = _cli(*base, *args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_cli_missing_model_directory(tmp_path):
    out = _cli("--model", tmp_path / "none", "--prompt-ids", "1,2")
    assert out.returncode == 2 and "model directory not found" in out.stderr and "Traceback" not in out.stderr
