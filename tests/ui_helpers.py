"""Shared pieces of the playground tests: a hand-made trace, a recorded tiny-model run and a live app.

`hand_trace()` is a trace built by hand (no model) whose every step is known, for exact renderer tests:
prompt of 3 tokens, block length 4, gen_length 5 -> 8 positions, blocks 0 and 1, MBE window 1.

    step 1  block 0  draft  pos 3 (p .9)
    step 2  block 0  verify edit pos 3: HTML -> NL (p .8)
    step 3  block 1  draft  pos 4, 5
    step 4  block 1  draft  pos 6 (below τ_mask: the most confident mask), MBE edit pos 3: NL -> EOS
    step 5  block 1  draft  pos 7
    step 6  block 1  verify (no change)
"""

from __future__ import annotations

import logging
import socket
import sys
from contextlib import closing

from llada.config import DecodeConfig
from llada.trace import Change, StepRecord, Trace

MASK, EOS, HTML, NL, A, B = 1, 0, 7, 8, 9, 10
TEXTS = {MASK: "[MASK]", EOS: "<|endoftext|>", HTML: "<img src=x onerror=alert(1)>", NL: "\n    ", A: "def", B: " f"}


def _decode(step, block, phase, drafts=(), edits=(), mbe=(), window=None):
    lo, hi = block * 4, block * 4 + 4
    window = window or (lo, hi)
    n = window[1] - window[0]
    return StepRecord(kind="decode", phase=phase, step=step, block=block, block_step=1, window=window,
                      active=(lo, hi), drafts=[Change(pos, tok, MASK, p) for pos, tok, p in drafts],
                      edits=[Change(*e) for e in edits], mbe_edits=[Change(*e) for e in mbe], guesses=[B] * n,
                      confidence=[0.25] * n, seconds=0.01)


def hand_trace() -> Trace:
    settings = DecodeConfig(threshold=0.5, editing_threshold=0.0, max_post_steps=16, block_length=4, gen_length=5,
                            mbe=True, mbe_window=1)
    records = [_decode(1, 0, "draft", drafts=[(3, HTML, 0.9)]),
               _decode(2, 0, "verify", edits=[(3, NL, HTML, 0.8)]),
               _decode(3, 1, "draft", drafts=[(4, A, 0.7), (5, B, 0.6)], window=(0, 8)),
               _decode(4, 1, "draft", drafts=[(6, A, 0.3)], mbe=[(3, EOS, NL, 0.95)], window=(0, 8)),
               _decode(5, 1, "draft", drafts=[(7, B, 0.99)], window=(0, 8)),
               _decode(6, 1, "verify", window=(0, 8))]
    return Trace(prompt_ids=[A, B, A], settings=settings, mask_id=MASK, eos_id=EOS, model="hand", prompt="def f",
                 mode="Custom", texts=dict(TEXTS), records=records)


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StderrOfTheMoment(logging.StreamHandler):
    """A handler writing to `sys.stderr` as it is when a record comes: pytest swaps it per test, so a server's
    error lands in the report of the test that met it (the stream uvicorn's handler keeps is closed by then)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def report_server_errors() -> None:
    """Route the web server's error log (an exception in a request) to the current test's captured stderr."""
    for name in ("uvicorn", "uvicorn.access"):  # uvicorn.error propagates to "uvicorn"
        logging.getLogger(name).handlers = [StderrOfTheMoment()]


def serve(demo, tries: int = 5) -> str:
    """Launch `demo` in this process, queued as the app queues it, on a free local port; returns its URL.

    A port another process takes between `free_port()` and the launch (tests run in parallel workers) is
    given up for another one."""
    from ui.demo import LOOK

    for attempt in range(tries):
        port = free_port()
        try:
            demo.queue(max_size=16, default_concurrency_limit=8).launch(
                server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **LOOK)
            report_server_errors()  # each launch configures uvicorn's logging anew
            return f"http://127.0.0.1:{port}/"
        except OSError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def launch_app(model_dir, recordings: dict | None = None):
    """The playground on `model_dir` (or a `Models`), served in this process on a free port; returns (demo, url)."""
    from ui.demo import build_demo
    from ui.models import Models

    models = model_dir if isinstance(model_dir, Models) else Models([str(model_dir)])
    demo = build_demo(models, recordings=recordings or {})
    return demo, serve(demo)


def shipped_app(cache_dir, recordings: dict | None = None):
    """Yield the URL of the app as a visitor meets it: the shipped model and budget, an empty explorer cache.

    For a module fixture: `yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"))`."""
    import os
    from pathlib import Path

    from ui import runs

    model = Path(__file__).resolve().parents[1] / "assets" / "model"
    before, budget = os.environ.get("LLADA_EXPLORER_CACHE"), runs.BUDGET
    os.environ["LLADA_EXPLORER_CACHE"] = str(cache_dir)  # no sweep from before
    runs.BUDGET = runs.Budget()  # short example runs: the session's generous test budget is not needed here
    demo, url = launch_app(model, recordings=recordings)
    try:
        yield url
    finally:
        demo.close()
        runs.BUDGET = budget
        if before is None:
            os.environ.pop("LLADA_EXPLORER_CACHE", None)
        else:
            os.environ["LLADA_EXPLORER_CACHE"] = before


def api_client(url: str):
    """A `gradio_client.Client` for `url` whose HTTP reads wait as long as a loaded CI machine needs
    (the client's own 5-second default expires while a busy two-core machine starts the app's answer)."""
    import gradio_client

    return gradio_client.Client(url, verbose=False, httpx_kwargs={"timeout": 300})
