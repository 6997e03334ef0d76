"""The playground under load and abuse, on localhost only, with bounded loops that stop by themselves.

* every malformed API input is refused with a message that names its field;
* concurrent sessions each get their own trace; S vs Q runs 30 times without a failure;
* a maximal request is bounded by the budget and a short one does not wait behind it;
* a client that drops its connection stops its decode;
* a long run exports in a few megabytes, and live frames are patches far smaller than the canvas.

The figures each test measures are printed (pytest -s shows them).
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc

import httpx
import pytest

gradio_client = pytest.importorskip("gradio_client")

from ui import runs  # noqa: E402
from ui_helpers import api_client, launch_app  # noqa: E402

PROMPT = "def add(a, b):"
# prompt, mode, tau_mask, tau_edit, mbe, block, gen, model, pokes
OK = (PROMPT, "Q", None, None, False, 8, 16, "", None)


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    demo, url = launch_app(tiny_model_dir)
    yield url
    demo.close()


@pytest.fixture
def client(app):
    return api_client(app)


def _with(index: int, value) -> tuple:
    args = list(OK)
    args[index] = value
    return tuple(args)


MALFORMED = [  # (generate arguments, the field the message must name)
    *[(_with(0, v), "prompt") for v in (None, 123, 4.5, True, [1, 2], {"a": 1}, "", "   ", "\u200b\u200b",
                                        "\u200b \ufeff", "a\ud800b", "x" * 9000)],
    *[(_with(1, v), "mode") for v in ("fast", "s", 3, None, ["S"], "")],
    *[(_with(2, v), "tau_mask") for v in (1.5, -0.1, "0.5", True, float("inf"), float("nan"), [0.5])],
    *[(_with(3, v), "tau_edit") for v in (2.0, -1, "off", False, float("-inf"))],
    *[(_with(4, v), "mbe") for v in ("false", "true", 1, 0, None, "yes")],
    *[(_with(5, v), "block_length") for v in (0, 3, 999, 8.5, "8", float("inf"), -8, True)],
    *[(_with(6, v), "gen_length") for v in (0, 5000, 12.5, "16", float("inf"), None, -16, 10**30)],
    *[(_with(7, v), "model") for v in ("nonexistent", 3, ["x"], "tiny")],
]
COMPARE_OK = (PROMPT, 8, 8, "")
MALFORMED_COMPARE = [  # (compare arguments, the field the message must name)
    *[((v, 8, 8, ""), "prompt") for v in (None, 7, ["x"], "", "\u2060", "\udfff")],
    *[((PROMPT, v, 8, ""), "block_length") for v in (0, "8", 2.5, float("nan"), False)],
    *[((PROMPT, 8, v, ""), "gen_length") for v in (-1, 2000, "8", float("inf"), [8])],
    *[((PROMPT, 8, 8, v), "model") for v in ("nope", 1.5)],
]


def call(app: str, api: str, args) -> tuple[str, str]:
    """One raw HTTP call of the API, as any client could send it (JSON escapes, Infinity and NaN included):
    the event that ended it ("complete" or "error") and its data."""
    base = app.rstrip("/") + f"/gradio_api/call/{api}"
    body = json.dumps({"data": list(args)})  # ASCII escapes: a lone surrogate travels as \ud800
    event_id = httpx.post(base, content=body, headers={"content-type": "application/json"}, timeout=30).json()
    kind, data = "", ""
    with httpx.stream("GET", f"{base}/{event_id['event_id']}", timeout=60) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind in ("complete", "error"):
                return kind, line[6:]
    return kind, data


def test_every_malformed_input_is_refused_with_its_field_named(app):
    cases = [("generate", args, field) for args, field in MALFORMED]
    cases += [("compare", args, field) for args, field in MALFORMED_COMPARE]
    clean = 0
    for api, args, field in cases:
        kind, message = call(app, api, args)
        assert kind == "error" and message not in ("", "null"), (api, args, kind, message)
        assert field in message or (field == "prompt" and "the prompt" in message), (api, args, message)
        clean += 1
    print(f"\nmalformed inputs: {clean} of {len(cases)} refused with a message naming the field")
    assert call(app, "generate", OK)[0] == call(app, "compare", COMPARE_OK)[0] == "complete"  # still serving


def test_concurrent_sessions_each_get_their_own_trace(app):
    n, results, errors = 16, {}, []

    def session(i: int) -> None:
        try:
            c = api_client(app)
            c.predict(f"def f{i}(x):", "S", None, None, False, 8, 16, api_name="/generate")  # model: default
            results[i] = c.predict(api_name="/trace")["prompt"]
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(repr(err))

    threads = [threading.Thread(target=session, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and results == {i: f"def f{i}(x):" for i in range(n)}
    print(f"\n{n} concurrent sessions: every /trace was the session's own")


def test_compare_thirty_times_without_a_failure(client):
    failures = 0
    for _ in range(30):
        try:
            out = client.predict(PROMPT, 8, 8, api_name="/compare")
            failures += set(out) != {"S", "Q"}
        except Exception:  # noqa: BLE001 - counted
            failures += 1
    print(f"\ncompare x30: {failures} failures")
    assert failures == 0


def test_a_maximal_request_is_bounded_and_a_short_one_does_not_wait(client, app, monkeypatch):
    # the budget's forwards bound the long run (its clock is far away): nothing here depends on the machine's speed
    monkeypatch.setattr(runs, "BUDGET", runs.Budget(forwards=600, seconds=3600.0))  # the app reads it per request
    t0 = time.monotonic()
    big = client.submit(PROMPT, "Custom", 1.0, 0.0, True, 4, 1000, api_name="/generate")  # 1 token per forward
    while big.status().code.name not in ("ITERATING", "FINISHED") and time.monotonic() - t0 < 300:
        time.sleep(0.05)  # waits for: the big run iterating (poll interval, 300 s bound)
    short_client = api_client(app)
    _, short = short_client.predict(*OK, api_name="/generate")
    big_was_running = not big.done()  # the short request ran beside the long one, not after it
    _, stats = big.result(timeout=600)
    print(f"\nmaximal request: {stats['forwards']} forwards, {stats['status']} ({stats['note']}); a short request "
          f"of {short['forwards']} forwards finished while it was {'running' if big_was_running else 'already done'}")
    assert stats["status"] == "stopped" and stats["forwards"] == 600
    assert stats["note"] == "budget reached: 600 forwards (at most 600 per run)"
    assert short["status"] == "done" and short["forwards"] < 600
    assert big_was_running


LAG = 1.0  # seconds a client may take to hear that a run has ended (its slot is free before it hears)


def test_with_both_decode_slots_busy_a_request_waits_in_the_queue_and_is_told(app, monkeypatch):
    from ui.frame import DECODE_CONCURRENCY

    monkeypatch.setattr(runs, "BUDGET", runs.Budget(forwards=1500, seconds=3600.0))  # long runs: 1 token a forward
    longs = [api_client(app).submit(PROMPT, "Custom", 1.0, 0.0, True, 4, 1000,
                                                             api_name="/generate") for _ in range(DECODE_CONCURRENCY)]
    deadline = time.monotonic() + 300
    while any(j.status().code.name not in ("ITERATING", "FINISHED") for j in longs) and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for: both long runs decoding (poll interval, 300 s bound)
    short = api_client(app).submit(*OK, api_name="/generate")
    heard, ended = [], {}  # (when, status, rank) of the short request; when the client saw each long run end
    while not short.done() and time.monotonic() < deadline:
        status, now = short.status(), time.monotonic()
        heard.append((now, status.code.name, status.rank))
        first_in_line = [when for when, code, rank in heard if (code, rank) == ("IN_QUEUE", 0)]
        if first_in_line and now - first_in_line[0] > 3 * LAG and not ended:
            for job in longs:  # told first in line for a while: the long runs stop at their next frame, not after
                job.cancel()   # 1,000 tokens (whatever the client hears of their end, a slot was busy till then)
        ended |= {i: now for i, j in enumerate(longs) if j.done() and i not in ended}
        time.sleep(0.05)  # waits for: the short request (poll interval, 300 s bound)
    _, stats = short.result(timeout=60)
    ended |= {i: time.monotonic() for i in range(len(longs)) if i not in ended}
    # the client hears of a run's end a little after its slot is free: a slot counts as busy until LAG before that
    busy_until = min(ended.values()) - LAG
    told = [(code, rank) for when, code, rank in heard if when < busy_until]
    print(f"\nwith {DECODE_CONCURRENCY} long runs decoding the short request heard: {sorted(set(told))}; the first "
          f"long run ended {min(ended.values()) - heard[0][0]:.1f} s after it was sent")
    assert stats["status"] == "done"
    assert ("IN_QUEUE", 0) in told  # held first in line while both slots were busy, and the client told so
    assert all(code in ("STARTING", "JOINING_QUEUE", "IN_QUEUE") for code, _ in told)  # it never ran beside them


def _wait_for(done, seconds: float) -> bool:
    """Polls `done()` until it holds or `seconds` pass: the state is waited for, not assumed."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for: done() (poll interval, bounded by `seconds`)
    return done()


def test_a_dropped_client_stops_its_decode(app, monkeypatch):
    monkeypatch.setattr(runs, "BUDGET", runs.Budget(forwards=5000, seconds=60.0))
    base = app.rstrip("/") + "/gradio_api/call/generate"
    event = httpx.post(base, json={"data": [PROMPT, "Custom", 1.0, 0.0, True, 4, 1000, "", None]}, timeout=30).json()
    with httpx.stream("GET", f"{base}/{event['event_id']}", timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("event: generating"):
                break  # the decode is running
        running = _wait_for(lambda: runs.active_runs() >= 1, 60)  # seen while connected: then drop the connection
    assert running
    start = time.monotonic()
    closed = _wait_for(lambda: runs.active_runs() == 0, 120)  # a generous bound: the dropped client's run closes
    print(f"\ndropped client: {runs.active_runs()} runs still open {time.monotonic() - start:.1f} s later")
    assert closed


def test_a_long_run_exports_small_and_streams_patches(tiny_model_dir, tmp_path):
    from llada.pipeline import Pipeline
    from ui import export
    from ui.render import canvas
    from ui.render.live import LiveCanvas

    pipe = Pipeline.load(tiny_model_dir)
    cfg = pipe.config("S", threshold=1.0, editing_threshold=None, block_length=4, gen_length=1000)
    trace = pipe.generate(pipe.encode(PROMPT), cfg)  # one draft per forward: ~1,250 forwards
    trace.name_tokens(pipe.token_texts, pipe.token_bytes)
    tracemalloc.start()
    paths = export.write_exports(trace, tmp_path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sizes = {p.suffix: p.stat().st_size for p in paths}
    live, frame_bytes = LiveCanvas(), []
    for k in range(1, 61):  # as the app streams: a keyframe once a second (every 15th frame), patches between
        update = live.update(_prefix(trace, k), keyframe=k % 15 == 1)
        if update.patch is not None:
            frame_bytes.append(len(json.dumps(update.patch)))
    full = len(canvas.render(trace, 60))
    print(f"\n{trace.forwards}-forward run: JSON {sizes['.json'] / 2**20:.2f} MB, HTML replay "
          f"{sizes['.html'] / 2**20:.2f} MB, export peak memory {peak / 2**20:.1f} MB; live patch "
          f"{sum(frame_bytes) / len(frame_bytes) / 1024:.1f} KB on average vs {full / 1024:.0f} KB for the canvas")
    assert trace.forwards >= 1000
    assert sizes[".json"] < 5 * 2**20 and sizes[".html"] < 5 * 2**20 and peak < 100 * 2**20
    assert max(frame_bytes) < full / 10  # patches since the last keyframe, a small share of the canvas


def _prefix(trace, steps: int):
    """The trace as it stood after `steps` decode steps (what a live view had then)."""
    from llada.trace import Trace

    cut = trace.steps_index[steps - 1] + 1
    return Trace(trace.prompt_ids, trace.settings, trace.mask_id, trace.eos_id, texts=trace.texts,
                 partial=trace.partial, records=trace.records[:cut])
