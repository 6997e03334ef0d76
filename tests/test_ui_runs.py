"""Recorded runs on the tiny random model: the trace matches the engine's own summary, bad input is refused."""

from __future__ import annotations

import os

import pytest

from llada.presets import merged
from ui import runs
from ui.frame import problem
from ui.models import Models, model_dirs
from ui.playground.run import generate_ui, widget_settings
from ui.runs import drain, interleave, start
from ui.settings import InputError, check_request, check_settings

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def models(tiny_model_dir) -> Models:
    return Models([str(tiny_model_dir)])


@pytest.mark.parametrize("mode,mbe", [("S", False), ("Q", True)])
def test_recorded_run_equals_the_cli(models, mode, mbe):
    pipe = models.get(None)
    req = check_request(pipe.presets, PROMPT, mode, mbe=mbe, block_length=8, gen_length=16)
    trace = drain(start(pipe, req))
    result = pipe.generate(pipe.encode(PROMPT), req.settings.config)
    assert trace.status == "done" and trace.output_ids == result.output_ids
    assert trace.text == pipe.decode_text(result.output_ids)
    strip = lambda d: {k: v for k, v in d.items() if k != "tps"}  # noqa: E731 - time differs run to run
    assert strip(trace.summary()) == strip(result.summary())
    assert [r.to_dict() | {"seconds": 0} for r in trace.records] == [r.to_dict() | {"seconds": 0}
                                                                     for r in result.records]


def _ui(models, prompt=PROMPT, mode="Q", gen_length=16, **widgets):
    """The playground's handler with the widgets' values by name (the ones not given: a typical page)."""
    page = {"tau_mask": 0.7, "edit": True, "tau_edit": 0.5, "mbe": False, "mbe_window": 1, "block_length": 8,
            "max_post_steps": 16, "temperature": 0.0, "seed": 0, "ghost": False}
    return generate_ui(models, prompt=prompt, mode=mode, gen_length=gen_length, **(page | widgets))


def test_ui_handler_streams_named_frames_and_a_final_state(models):
    frames = list(_ui(models))
    assert len(frames) >= 2
    assert 'data-steps="0"' in frames[0].canvas  # the first frame: prompt and masks before any forward
    last = frames[-1]
    trace = last.trace
    assert last.error == "" and last.text == trace.text and trace.status == "done"
    assert f'data-steps="{trace.steps}"' in last.canvas and len(last.edit_log) == trace.edits + trace.mbe_edits


def test_closing_the_handler_stops_the_engine(models):
    pipe = models.get(None)
    run = _ui(models, mode="S", gen_length=64)
    first = next(run)
    next(run)  # the engine has started
    run.close()  # what Gradio does when a tab closes or Stop is pressed
    batch = runs.scheduler(pipe).batch  # the model's step scheduler, where the run was a row
    row = batch.rows - 1
    assert row in batch.done and all(r.index != row for r in batch.active)  # its decode loop is closed
    assert first.trace.status == "stopped" and first.trace.steps < 64


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": "   "}, "empty"), ({"prompt": "x" * 9000}, "too long"), ({"tau_mask": 1.5}, "tau_mask"),
    ({"tau_edit": -0.1}, "tau_edit"), ({"block_length": 0}, "block_length"), ({"gen_length": 5000}, "gen_length"),
    ({"gen_length": 12.5}, "whole number"), ({"mode": "fast"}, "mode"), ({"tau_mask": float("nan")}, "number")])
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        check_request(None, **({"prompt": PROMPT} | kwargs))


def test_bad_input_shows_in_error_not_a_crash(models):
    frames = list(_ui(models, prompt=""))
    assert len(frames) == 1 and "Refused" in frames[0].error and "empty" in frames[0].error
    long = "def f(): " * 600  # fits the character limit, not the tiny model's 1024 positions
    frames = list(_ui(models, prompt=long))
    assert "positions" in frames[0].error


def test_mbe_settings_reach_the_engine(models):
    pipe = models.get(None)
    cfg = check_request(pipe.presets, PROMPT, "S", mbe=True, mbe_window=3, block_length=8).settings.config
    assert (cfg.mbe, cfg.mbe_window, cfg.block_length) == (True, 3, 8)
    req = check_request(pipe.presets, PROMPT, "S", mbe=True, mbe_window=3, block_length=8, gen_length=32)
    trace = drain(start(pipe, req))
    first = len(trace.prompt_ids) // 8
    assert {trace.step_record(k).window[0] for k in range(1, trace.steps + 1)} >= {first * 8}
    assert max(r.block - r.window[0] // 8 for r in map(trace.step_record, range(1, trace.steps + 1))) == 3


def test_runs_interleave_forward_by_forward(models):
    pipe = models.get(None)
    modes = ("Q", "M2T only")  # no T2T oscillation on a random model: short runs
    runs = {m: start(pipe, check_request(pipe.presets, PROMPT, m, block_length=8, gen_length=8)) for m in modes}
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
    real, calls = pipe.model.forward_rows, []

    def failing(rows):  # the model call of the run's second step fails
        calls.append(rows)
        if len(calls) > 1:
            raise RuntimeError("the accelerator went away")
        return real(rows)

    monkeypatch.setattr(pipe.model, "forward_rows", failing)
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
    from ui.playground.run import stopped_ui

    run = _ui(models, mode="S", gen_length=64)
    first = next(run)
    next(run)
    run.close()  # what the Stop button's cancel does
    shown = stopped_ui(first.trace, False)
    assert shown.stats.startswith(f"stopped at forward {first.trace.forwards}")
    assert len(shown.edit_log) == first.trace.edits + first.trace.mbe_edits and shown.text == first.trace.text


def test_a_run_stops_at_its_budget_and_keeps_what_it_wrote(models):
    pipe = models.get(None)
    req = check_request(pipe.presets, PROMPT, "Custom", tau_mask=1.0, edit=False, block_length=4, gen_length=64)
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


# ---- what the widgets mean (ui/playground/run.py: widget_settings) ----------------------------------------

OWN_S = {"threshold": 0.42, "editing_threshold": 0.17, "max_post_steps": 5, "block_length": 16}  # not official


def test_custom_starts_from_the_models_s_mode():
    presets = merged({"S": OWN_S, "Q": {"threshold": 0.8, "editing_threshold": 0.6, "max_post_steps": 7}})
    custom, s = check_settings(presets, "Custom").config, check_settings(presets, "S").config
    assert custom == s and (custom.threshold, custom.editing_threshold, custom.max_post_steps,
                            custom.block_length) == tuple(OWN_S.values())
    assert check_settings(presets, "Custom").mode == "Custom"  # the label stays the UI's


def test_slider_values_that_differ_from_the_mode_override_it():
    presets = merged({"S": OWN_S})
    s = widget_settings(presets, "Custom", tau_mask=0.3, edit=True, tau_edit=0.25, block_length=8,
                        max_post_steps=2).config
    assert (s.threshold, s.editing_threshold, s.block_length, s.max_post_steps) == (0.3, 0.25, 8, 2)
    q = check_settings(presets, "Q").config
    named = widget_settings(presets, "Q", tau_mask=0.3, edit=False, tau_edit=0.25, block_length=8,
                            max_post_steps=2).config
    # a named mode sets the thresholds (its sliders only show them); the lengths are the sliders'
    assert (named.threshold, named.editing_threshold) == (q.threshold, q.editing_threshold)
    assert (named.block_length, named.max_post_steps) == (8, 2) != (q.block_length, q.max_post_steps)


def test_custom_with_editing_unticked_edits_nothing(models):
    widgets = {"mode": "Custom", "tau_mask": 0.5, "tau_edit": 0.0, "block_length": 8, "gen_length": 32}
    ticked = list(_ui(models, **widgets, edit=True))[-1].trace
    assert ticked.settings.editing_threshold == 0.0 and ticked.edits + ticked.mbe_edits > 0  # editing does edit
    unticked = list(_ui(models, **widgets, edit=False))[-1].trace
    assert unticked.settings.editing_threshold is None
    assert unticked.edits == unticked.mbe_edits == 0 and unticked.status == "done"


def test_the_error_box_escapes_what_the_user_sent(models):
    sent = '<img src=x onerror="alert(1)">'  # a mode only an API client can send
    (shown,) = list(_ui(models, mode=sent))
    assert "mode must be one of" in shown.error and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in shown.error
    assert "<img" not in shown.error
    failed = problem(RuntimeError(sent))  # a failure quoting user text is escaped too
    assert not failed.refused and "<img" not in failed.html and "&lt;img" in failed.html


def test_exports_served_by_the_app_do_not_pile_up(tiny_model_dir, tmp_path, monkeypatch):
    """Export twice in a live app whose exports are kept 2 s: Gradio's copies and the originals are deleted."""
    import time
    import uuid

    from ui import demo as page_module
    from ui.bench import soak
    from ui.export import ExportDir
    from ui.playground import replay
    from ui_helpers import launch_app

    monkeypatch.setattr(page_module, "CACHE_SWEEP", (1, 2))  # Gradio deletes its copies 2 s after making them
    monkeypatch.setattr(replay, "EXPORTS", ExportDir(tmp_path, keep_s=1))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    app, url = launch_app(tiny_model_dir)
    try:
        page, session = soak.Page(url.rstrip("/")), uuid.uuid4().hex
        visitor = soak.Visitor(page, seed=0)
        run, export = page.event("generate", "click"), page.event("export", "click")
        visitor.call(session, run, page.data(run, prompt=PROMPT, gen_length=8))
        served = [f["path"] for f in visitor.call(session, export, [None])["output"]["data"][0]]
        first = {p.parent for p in tmp_path.glob("llada-export-*/*")}
        assert len(served) == 2 and all(os.path.exists(p) for p in served) and len(first) == 1
        time.sleep(1.5)  # waits for: the first export to be older than keep_s = 1 (time itself: safe when slow)
        visitor.call(session, export, [None])  # a new export sweeps the earlier originals
        assert not any(folder.exists() for folder in first)
        deadline = time.monotonic() + 30  # the sweep runs every second: waited for, not assumed
        while any(os.path.exists(p) for p in served) and time.monotonic() < deadline:
            time.sleep(0.2)  # waits for: Gradio's copies to be swept (poll interval, 30 s bound)
        assert not any(os.path.exists(p) for p in served), served
        assert visitor.errors == 0, visitor.last_error
    finally:
        app.close()


def test_the_cache_sweep_survives_an_export_made_while_it_runs(tmp_path, monkeypatch):
    """Gradio's sweep walked the live set of cached files: an export added during a sweep ended all sweeping."""
    import time
    from types import SimpleNamespace

    from ui import export

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text("{}")
    # Gradio reads a file's ctime, which utime cannot set back
    time.sleep(0.05)  # waits for: the file to be older than the age below
    files = {str(old)}
    blocks = SimpleNamespace(blocks={}, temp_file_sets=[files])
    remove = os.remove

    def remove_while_exporting(path):  # another thread's export lands in the set mid-sweep
        new.write_text("{}")
        files.add(str(new))
        remove(path)

    monkeypatch.setattr(os, "remove", remove_while_exporting)
    export.sweep_cached(blocks, age=0.01)
    assert not old.exists() and new.exists() and files == {str(new)}
