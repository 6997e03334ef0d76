"""Recorded runs on the tiny random model: the trace matches the engine's own summary, bad input is refused."""

from __future__ import annotations

import os

import pytest

from ui.handlers import generate_ui
from ui.models import Models, model_dirs
from ui import runs
from ui.runs import InputError, check_request, decode_config, drain, interleave, start

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def models(tiny_model_dir) -> Models:
    return Models([str(tiny_model_dir)])


@pytest.mark.parametrize("mode,mbe", [("S", False), ("Q", True)])
def test_recorded_run_equals_the_cli(models, mode, mbe):
    pipe = models.get(None)
    req = check_request(PROMPT, mode, mbe=mbe, block_length=8, gen_length=16)
    trace = drain(start(pipe, req))
    result = pipe.generate(pipe.encode(PROMPT), decode_config(pipe, req))
    assert trace.status == "done" and trace.output_ids == result.output_ids
    assert trace.text == pipe.decode_text(result.output_ids)
    strip = lambda d: {k: v for k, v in d.items() if k != "tps"}  # noqa: E731 - time differs run to run
    assert strip(trace.summary()) == strip(result.summary())
    assert [r.to_dict() | {"seconds": 0} for r in trace.records] == [r.to_dict() | {"seconds": 0}
                                                                     for r in result.records]


def _ui(models, prompt=PROMPT, mode="Q", gen_length=16):
    return generate_ui(models, None, prompt, mode, 0.7, True, 0.5, False, 1, 8, gen_length, 16, 0.0, 0, False)


def test_ui_handler_streams_named_frames_and_a_final_state(models):
    frames = list(_ui(models))
    assert len(frames) >= 2
    assert 'data-steps="0"' in frames[0].canvas  # the first frame: prompt and masks before any forward
    last = frames[-1]
    trace = last.trace
    assert last.error == "" and last.text == trace.text and trace.status == "done"
    assert f'data-steps="{trace.steps}"' in last.canvas and len(last.edit_log) == trace.edits + trace.mbe_edits


def test_closing_the_handler_stops_the_engine(models, monkeypatch):
    pipe = models.get(None)
    engines = []
    real = pipe.stream
    monkeypatch.setattr(pipe, "stream", lambda *a: engines.append(real(*a)) or engines[-1])
    run = _ui(models, mode="S", gen_length=64)
    first = next(run)
    next(run)  # the engine has started
    run.close()  # what Gradio does when a tab closes or Stop is pressed
    engine = engines[0]
    assert engine.gi_frame is None and next(engine, None) is None  # the decode generator is finished
    assert first.trace.status == "stopped" and first.trace.steps < 64


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": "   "}, "empty"), ({"prompt": "x" * 9000}, "too long"), ({"tau_mask": 1.5}, "tau_mask"),
    ({"tau_edit": -0.1}, "tau_edit"), ({"block_length": 0}, "block_length"), ({"gen_length": 5000}, "gen_length"),
    ({"gen_length": 12.5}, "whole number"), ({"mode": "fast"}, "mode"), ({"tau_mask": float("nan")}, "number")])
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        check_request(**({"prompt": PROMPT} | kwargs))


def test_bad_input_shows_in_error_not_a_crash(models):
    frames = list(_ui(models, prompt=""))
    assert len(frames) == 1 and "Refused" in frames[0].error and "empty" in frames[0].error
    long = "def f(): " * 600  # fits the character limit, not the tiny model's 1024 positions
    frames = list(_ui(models, prompt=long))
    assert "positions" in frames[0].error


def test_mbe_settings_reach_the_engine(models):
    pipe = models.get(None)
    cfg = decode_config(pipe, check_request(PROMPT, "S", mbe=True, mbe_window=3, block_length=8))
    assert (cfg.mbe, cfg.mbe_window, cfg.block_length) == (True, 3, 8)
    trace = drain(start(pipe, check_request(PROMPT, "S", mbe=True, mbe_window=3, block_length=8, gen_length=32)))
    first = len(trace.prompt_ids) // 8
    assert {trace.step_record(k).window[0] for k in range(1, trace.steps + 1)} >= {first * 8}
    assert max(r.block - r.window[0] // 8 for r in map(trace.step_record, range(1, trace.steps + 1))) == 3


def test_runs_interleave_forward_by_forward(models):
    pipe = models.get(None)
    modes = ("Q", "M2T only")  # no T2T oscillation on a random model: short runs
    runs = {m: start(pipe, check_request(PROMPT, m, block_length=8, gen_length=8)) for m in modes}
    labels = [label for label, _ in interleave(runs)]
    assert labels[:4] == ["Q", "M2T only", "Q", "M2T only"]
    assert [labels.count(m) for m in modes] == [len(runs[m].trace.records) for m in modes]
    assert all(run.trace.status == "done" for run in runs.values())


def test_model_dirs_from_cli_and_env(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    dirs = model_dirs([str(a)], env=f"{b}{os.pathsep}{a}", default=None)
    assert dirs == [str(a.resolve()), str(b.resolve())]
    with pytest.raises(ValueError, match="unknown model"):
        Models(dirs).get("/elsewhere")


def test_a_failure_mid_run_reaches_the_user_as_a_message(models, monkeypatch):
    pipe = models.get(None)
    real = pipe.stream

    def failing(*args):
        stream = real(*args)
        yield next(stream)
        raise RuntimeError("the accelerator went away")

    monkeypatch.setattr(pipe, "stream", failing)
    frames = list(_ui(models))
    last = frames[-1]
    assert "Error:" in last.error and "RuntimeError: the accelerator went away" in last.error
    assert last.trace.status == "stopped" and "could not finish" in last.trace.note
    assert "stopped at forward" in last.stats


def test_a_refused_input_clears_the_old_run(models):
    frames = list(_ui(models, prompt="\u200b"))
    assert len(frames) == 1 and "no visible characters" in frames[0].error
    assert frames[0].trace is None and 'data-steps="0"' in frames[0].canvas and frames[0].text == ""


def test_stop_shows_the_run_stopped_with_its_edit_log(models):
    from ui.handlers import stopped_ui

    run = _ui(models, mode="S", gen_length=64)
    first = next(run)
    next(run)
    run.close()  # what the Stop button's cancel does
    shown = stopped_ui(first.trace, False)
    assert shown.stats.startswith(f"stopped at forward {first.trace.forwards}")
    assert len(shown.edit_log) == first.trace.edits + first.trace.mbe_edits and shown.text == first.trace.text


def test_a_run_stops_at_its_budget_and_keeps_what_it_wrote(models):
    pipe = models.get(None)
    req = check_request(PROMPT, "Custom", tau_mask=1.0, edit=False, block_length=4, gen_length=64)
    trace = drain(start(pipe, req, runs.Budget(forwards=10, seconds=60)))
    assert trace.status == "stopped" and trace.forwards == 10 and trace.note.startswith("budget reached: 10")
    assert 0 < len(trace.output_ids) < 64 and trace.text == pipe.decode_text(trace.output_ids)


def test_old_export_folders_are_swept(tmp_path):
    import os

    from ui.export import ExportDir

    exports = ExportDir(tmp_path, keep_s=300)
    old, fresh = exports.new(), exports.new()
    os.utime(old, (0, 0))  # made long ago
    assert exports.sweep() == 1 and not old.exists() and fresh.exists()
