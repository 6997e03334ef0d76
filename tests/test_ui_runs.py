"""Recorded runs on the tiny random model: the trace matches the engine's own summary, bad input is refused."""

from __future__ import annotations

import os

import pytest

from ui import canvas, learn, record
from ui.handlers import generate_ui
from ui.models import Models, model_dirs
from ui.runs import InputError, check_request, decode_config, finish, record as record_run, record_pair
from ui.trace import Trace, stats

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def models(tiny_model_dir) -> Models:
    return Models([str(tiny_model_dir)])


@pytest.mark.parametrize("mode,mbe", [("S", False), ("Q", True)])
def test_trace_stats_equal_the_cli(models, mode, mbe):
    pipe = models.get(None)
    req = check_request(PROMPT, mode, mbe=mbe, block_length=8, gen_length=16)
    recorder, stream = record_run(pipe, req)
    for _ in stream:
        pass
    trace = finish(recorder, pipe)
    result = pipe.generate(pipe.encode(PROMPT), decode_config(pipe, req))
    s = trace.result["stats"]
    assert trace.result["output_ids"] == result.output_ids
    assert trace.result["text"] == pipe.decode_text(result.output_ids)
    assert (s["decode_forwards"], s["cache_forwards"]) == (result.num_decode_forwards, result.num_cache_forwards)
    assert (s["drafts"], s["edits"], s["mbe_edits"], s["tpf"]) == (result.drafts, result.edits, result.mbe_edits,
                                                                    result.tpf)
    assert trace.tokens_at(trace.steps) == result.records[-1].tokens  # deltas rebuild the engine's sequence
    assert Trace.from_json(trace.to_json()).result == trace.result


def test_ui_handler_streams_frames_and_final_state(models):
    frames = list(generate_ui(models, None, PROMPT, "Q", 0.7, True, 0.5, False, 1, 8, 16, 16, 0.0, 0, False))
    assert len(frames) >= 2
    assert 'data-steps="0"' in frames[0][1]  # the first frame: prompt and masks before any forward
    trace = frames[-1][-1]
    assert frames[-1][0] == "" and frames[-1][8] == trace.result["text"]
    assert f'data-steps="{trace.steps}"' in frames[-1][1] and trace.result["complete"]


def test_closed_run_stops_the_engine(models):
    run = generate_ui(models, None, PROMPT, "S", 0.5, True, 0.0, False, 1, 8, 32, 16, 0.0, 0, False)
    first = next(run)
    run.close()  # what Gradio does when a tab closes or Stop is pressed
    assert first[-1].result is not None and not first[-1].result["complete"]


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": "   "}, "empty"), ({"prompt": "x" * 9000}, "too long"), ({"tau_mask": 1.5}, "tau_mask"),
    ({"tau_edit": -0.1}, "tau_edit"), ({"block_length": 0}, "block_length"), ({"gen_length": 5000}, "gen_length"),
    ({"gen_length": 12.5}, "whole number"), ({"mode": "fast"}, "mode"), ({"tau_mask": float("nan")}, "number")])
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        check_request(**({"prompt": PROMPT} | kwargs))


def test_bad_input_shows_in_error_not_a_crash(models):
    frames = list(generate_ui(models, None, "", "S", 0.5, True, 0.0, False, 1, 8, 16, 16, 0.0, 0, False))
    assert len(frames) == 1 and "Refused" in frames[0][0] and "empty" in frames[0][0]
    long = "def f(): " * 600  # fits the character limit, not the tiny model's 1024 positions
    frames = list(generate_ui(models, None, long, "S", 0.5, True, 0.0, False, 1, 8, 16, 16, 0.0, 0, False))
    assert "positions" in frames[0][0]


def test_pair_interleaves_forward_by_forward(models):
    pipe = models.get(None)
    modes = ("Q", "M2T only")  # no T2T oscillation on a random model: short runs
    runs = {m: record_run(pipe, check_request(PROMPT, m, block_length=8, gen_length=8)) for m in modes}
    labels = [label for label, _ in record_pair({m: s for m, (_, s) in runs.items()})]
    assert labels[:4] == ["Q", "M2T only", "Q", "M2T only"]
    assert [labels.count(m) for m in modes] == [len(runs[m][0].trace.records) for m in modes]


def test_record_script_writes_a_replayable_file(tiny_model_dir, tmp_path):
    out = tmp_path / "learn.json"
    record.main(["--model", str(tiny_model_dir), "--out", str(out), "--runs", "Q", "S+MBE", "--block-length", "8",
                 "--gen-length", "8"])
    recordings = learn.load_recordings(out)
    assert len(recordings) == 2
    trace = recordings[next(k for k in recordings if "MBE" in k)]
    assert trace.settings["mbe"] and stats(trace)["steps"] == trace.steps
    assert f'data-steps="{trace.steps}"' in canvas.render(trace, 1, elem_id="canvas-learn")
    assert "Recording (not live)" in learn.recording_note(trace)


def test_model_dirs_from_cli_and_env(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    dirs = model_dirs([str(a)], env=f"{b}{os.pathsep}{a}", default=None)
    assert dirs == [str(a.resolve()), str(b.resolve())]
    with pytest.raises(ValueError, match="unknown model"):
        Models(dirs).get("/elsewhere")
