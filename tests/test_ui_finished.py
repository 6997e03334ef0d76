"""What the page says about a run once it is over, without a server: the counts under a finished canvas, the
browser's replay of a run (step 0 and one patch per step), the engine's sentence, the exported file's scripts."""

from __future__ import annotations

import re

from ui import ASSETS, export
from ui.render import canvas, live, tables
from ui_helpers import hand_trace

from test_canvas import _eos_trace


def counts(trace, step) -> list[str]:
    return re.findall(r'class="more">([^<]*)', canvas.render(trace, step))


def test_a_finished_run_has_no_masks_to_come_at_its_last_step():
    trace = _eos_trace()  # EOS first, block 2 never decoded
    assert counts(trace, trace.steps) == ["+ 4 masks in 1 later block"]  # running: block 2 may still come
    trace.finish("done")
    assert counts(trace, trace.steps) == ["+ 4 positions past the end of the output (never decoded: the text "
                                          "ended before them)"]
    assert counts(trace, 1) == ["+ 8 masks in 2 later blocks"]  # mid-replay they are still to come
    stopped = _eos_trace().finish("stopped", "stopped by the user")
    assert counts(stopped, stopped.steps) == ["+ 4 masks in 1 later block (never decoded: the run stopped early)"]
    patch = canvas.patch(trace, trace.steps - 1, trace.steps)  # the browser's last step says the same
    assert "masks in" not in patch["counts"] and "past the end" in patch["counts"]


def test_the_browsers_replay_is_step_0_and_one_patch_per_step():
    trace = hand_trace().finish()
    value = live.replay_value(trace, ghost=True)
    assert value["steps"] == trace.steps == len(value["patches"]) and value["target"] == "canvas"
    assert value["first"] == canvas.render(trace, 0, True)
    assert [p["step"] for p in value["patches"]] == list(range(1, trace.steps + 1))
    assert live.replay_value(trace)["id"] != value["id"]  # every replay is its own: a canvas knows whose it is
    running = hand_trace()
    assert live.replay_value(running) is None and live.replay_value(None) is None  # the server draws a live run


def test_the_engine_is_one_plain_sentence():
    cpu = {"engine": "reference", "requested": "auto", "fell_back": False, "self_check": "none",
           "reason": "the fast engine runs on a CUDA GPU; this model is on cpu (Triton's CPU interpreter: set "
                     "TRITON_INTERPRET=1 before starting)"}
    said = {
        tables.engine_sentence(cpu, "cpu"): "Engine: the PyTorch reference (the fast kernels need a GPU).",
        tables.engine_sentence(cpu | {"fell_back": True, "self_check": "failed"}, "cuda:0"):
            "Engine: the PyTorch reference (the fast GPU kernels failed their check when the model loaded).",
        tables.engine_sentence(cpu, "cuda:0"): "Engine: the PyTorch reference (the fast GPU kernels do not run on "
                                               "this GPU).",
        tables.engine_sentence(cpu | {"requested": "reference"}, "cpu"): "Engine: the PyTorch reference.",
        tables.engine_sentence({"engine": "fast", "self_check": "passed"}, "cuda:0"):
            "Engine: the fast GPU kernels (checked against the reference when the model loaded).",
    }
    for got, want in said.items():
        assert got == want and len(got) < 100 and "TRITON" not in got
    line = tables.stats_line(hand_trace().finish(), engine=tables.engine_sentence(cpu, "cpu"))
    assert line.endswith("<small>Engine: the PyTorch reference (the fast kernels need a GPU).</small>")


def test_the_exported_replay_carries_the_token_details_script():
    html = export.replay_html(hand_trace().finish())
    for name in ("canvas.js", "tokens.js", "replay.js"):
        assert (ASSETS / name).read_text(encoding="utf-8") in html, name
    assert "tap a token for details" in html
