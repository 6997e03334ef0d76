"""Every event the page's own client can call, called as any client could (raw HTTP to the queue), with values
no widget would send: each is refused with a message naming what was wrong, never a silent failure, and the
server log holds no traceback for any of them. Gradio's upload route takes no large file.
"""

from __future__ import annotations

import functools
import json
import time
import uuid

import httpx
import pytest

from ui_helpers import api_client, launch_app

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    from ui.learn.lessons import load_recordings

    demo, url = launch_app(tiny_model_dir, recordings=load_recordings())
    yield demo, url.rstrip("/")
    demo.close()


def fn_index(demo, qualname: str) -> int:
    """The index of the event whose handler is `qualname` (the one the page's client calls it by)."""
    found = [i for i, f in demo.fns.items() if f.fn and f"{f.fn.__module__}.{f.fn.__qualname__}".endswith(qualname)]
    assert len(found) >= 1, qualname
    return found[0]


@functools.cache
def http() -> httpx.Client:
    """One HTTP client for every call, as a page keeps one (each new client builds a TLS context: a second or
    more on a loaded machine, twice per call)."""
    return httpx.Client(timeout=120)


def call(url: str, index: int, data: list) -> dict:
    """One queued call of event `index` with `data`, as the page's client makes it; the final message."""
    session = uuid.uuid4().hex
    body = json.dumps({"data": data, "fn_index": index, "session_hash": session, "event_data": None,
                       "trigger_id": None})  # NaN and Infinity travel as JSON's extensions, as any client may
    joined = http().post(f"{url}/gradio_api/queue/join", content=body, timeout=30,
                         headers={"content-type": "application/json"})
    if joined.status_code != 200:
        return {"msg": "refused at join", "success": False, "output": {"error": joined.text}}
    with http().stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session}) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                msg = json.loads(line[6:])
                if msg.get("msg") in ("process_completed", "unexpected_error"):
                    return msg
    return {"msg": "no answer"}


def by_elem(demo, index: int, values: dict) -> list:
    """The data of event `index` with each input given by its elem_id (`values`)."""
    return [values.get(c.elem_id) for c in demo.fns[index].inputs]


def error_of(msg: dict) -> str:
    out = msg.get("output") or {}
    return str(out.get("error") or "") if not msg.get("success") else ""


STEP_CASES = [NAN, INF, -1, 2.5, "3", [1], True]
SIMPLE = [  # (handler, inputs before the bad one, the bad one's position values, the word the message must hold)
    ("replay.scrub", lambda v: [None, v, False], STEP_CASES, "step"),
    ("replay.tick", lambda v: [None, v, False], STEP_CASES, "step"),
    ("replay.jump_to_edit", lambda v: [None, v, False], STEP_CASES, "step"),
    ("replay.start_play", lambda v: [None, v, False, "1"], STEP_CASES, "step"),
    ("replay.start_play", lambda v: [None, 0, False, v], ["9", 2, None, "nan"], "speed"),
    ("replay.scrub", lambda v: [None, 0, v], ["x", "false", 1, None], "ghost"),
    ("replay.teach", lambda v: [None, v, False], ["false", 0, None], "replay slowly"),
    ("compare.compare_step", lambda v: [None, v], STEP_CASES, "step"),
    ("run.stopped_ui", lambda v: [None, v], ["x", 1], "ghost"),
    ("controls.example_values", lambda v: [v], [99, -1, NAN, "0", None, 1.5], "example index"),
    ("wire._wire_controls.<locals>.mode_picked", lambda v: [None, v], ["fast", 3, None], "mode"),
    ("wire._wire_controls.<locals>.mode_picked", lambda v: [v, "S"], ["/etc", 3, ["x"]], "model"),
    ("wire._wire_controls.<locals>.model_picked", lambda v: [v, "S"], ["/etc", 3], "model"),
    ("learn.view.scrub", lambda v: [None, v], STEP_CASES, "step"),
    ("learn.view.tick", lambda v: [None, v], STEP_CASES, "step"),
    ("learn.view.pick", lambda v: [v], ["no such lesson", 3, ["x"]], "lesson"),
]


def test_every_ui_event_refuses_what_no_widget_sends(app, capfd):
    demo, url = app
    told = 0
    for name, data, values, word in SIMPLE:
        index = fn_index(demo, name)
        for v in values:
            msg = call(url, index, data(v))
            assert msg.get("msg") == "process_completed" and not msg.get("success"), (name, v, msg)
            assert word in error_of(msg), (name, v, msg)
            told += 1
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    print(f"\n{told} malformed UI-event calls, each refused with a message naming its input")


@pytest.mark.parametrize("bad", [99, -1, NAN, INF, "0", None, 1.5, True, [0]])
def test_an_example_index_refusal_names_the_real_range(bad):
    from ui.playground import controls
    from ui.settings import InputError

    last = len(controls.examples()) - 1
    with pytest.raises(InputError, match=f"example index must be a whole number from 0 to {last}, got"):
        controls.example_values(bad)
    assert controls.example_values(last)


def _run_inputs(**bad) -> dict:
    good = {"prompt": "def add(a, b):", "mode": "Custom", "tau-mask": 0.5, "edit-on": True, "tau-edit": 0.5,
            "mbe": False, "mbe-window": 1, "block-length": 8, "gen-length": 16, "max-post-steps": 4,
            "temperature": 0.0, "seed": 0, "ghost": False, "model": None}
    return good | bad


@pytest.mark.parametrize("bad, word", [
    ({"edit-on": "false"}, "editing"), ({"ghost": "x"}, "ghost"), ({"tau-mask": NAN}, "tau_mask"),
    ({"gen-length": "16"}, "gen_length"), ({"block-length": INF}, "block_length"), ({"seed": "x"}, "seed"),
    ({"model": "/etc"}, "model"), ({"mode": "fast"}, "mode"), ({"temperature": -1}, "temperature"),
])
def test_the_run_event_refuses_in_the_error_box(app, bad, word, capfd):
    demo, url = app
    index = fn_index(demo, "wire._wire_run.<locals>.run")
    msg = call(url, index, by_elem(demo, index, _run_inputs(**bad)))
    assert msg.get("success"), msg
    error = msg["output"]["data"][[c.elem_id for c in demo.fns[index].outputs].index("error")]
    assert "Refused" in error and word in error, (bad, error)
    assert "Traceback" not in capfd.readouterr().err


def test_gradios_own_refusals_are_one_line(app, capfd):
    demo, url = app
    index = fn_index(demo, "replay.scrub")
    msg = call(url, index, [None, 0])  # one input short: Gradio refuses before any handler runs
    assert not msg.get("success")
    browser_only = next(i for i, f in demo.fns.items() if f.fn is None)  # an event the browser runs alone (js)
    assert not call(url, browser_only, []).get("success")
    err = capfd.readouterr().err
    assert "Traceback" not in err and len(err) < 600, err


def test_no_large_upload_is_taken(app):
    _, url = app
    big = httpx.post(f"{url}/gradio_api/upload", files={"files": ("big.bin", b"x" * (50 * 2**20))}, timeout=120)
    assert big.status_code == 413, big.status_code


def test_a_sweep_click_finding_one_running_answers_without_a_decode_slot(app, monkeypatch):
    """Both decode slots busy with long runs and a sweep running: Run sweep is told at once, while they still run."""
    pytest.importorskip("gradio_client")
    from ui import runs
    from ui.explorer.sweeps import BUSY, SWEEP_LOCK

    demo, url = app
    monkeypatch.setattr(runs, "BUDGET", runs.Budget(forwards=100_000, seconds=60.0))
    long_runs = [api_client(url).submit("def f(x):", "Custom", 1.0, 0.0, True, 4, 1000,
                                                                  api_name="/generate") for _ in range(2)]
    assert SWEEP_LOCK.acquire(timeout=60)  # a sweep is running (a sweep of an earlier test has ended)
    try:
        deadline = time.monotonic() + 300
        for job in long_runs:  # waits until both hold their decode slot, with a generous bound
            while job.status().code.name not in ("ITERATING", "FINISHED") and time.monotonic() < deadline:
                time.sleep(0.05)  # waits for: both long runs iterating (poll interval of the bounded wait above)
        answers = [call(url, fn_index(demo, "sweeps.sweep_free"), []) for _ in range(5)]
        still_running = [not job.done() for job in long_runs]
    finally:
        SWEEP_LOCK.release()
    assert all(not a.get("success") and BUSY in error_of(a) for a in answers), answers
    assert all(still_running), "the check waited for a decode slot"
    assert call(url, fn_index(demo, "sweeps.sweep_free"), []).get("success")  # free again: it lets the sweep queue
