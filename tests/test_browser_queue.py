"""With both decode slots busy, a Generate clicked on the page waits in the queue, and the page says so.

Two long runs over the API hold the `decode` group's slots (ui/frame.py DECODE_CONCURRENCY); the page's
run then shows Gradio's queue status ("queue: 1/1 | 2.3s") over its outputs until a slot frees, then runs.
"""

from __future__ import annotations

import time

import pytest

from chromium import VIEWPORTS  # skips or fails without Chromium

gradio_client = pytest.importorskip("gradio_client")

from ui import runs  # noqa: E402
from ui.frame import DECODE_CONCURRENCY  # noqa: E402
from ui_helpers import api_client, launch_app  # noqa: E402


@pytest.fixture(scope="module")
def app_url(tiny_model_dir):
    budget, runs.BUDGET = runs.BUDGET, runs.Budget(forwards=3000, seconds=3600.0)  # long runs: 1 token a forward
    demo, url = launch_app(tiny_model_dir)
    yield url
    demo.close()
    runs.BUDGET = budget


def test_a_run_clicked_while_both_slots_are_busy_shows_its_place_in_the_queue(browser, app_url):
    page = browser.new_page(viewport=VIEWPORTS["desktop"])
    page.set_default_timeout(90_000)  # a loaded machine
    page.goto(app_url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=60_000)
    page.fill("#prompt textarea", "def add(a, b):")
    longs = [api_client(app_url).submit("def f():", "Custom", 1.0, 0.0, True, 4, 1000,
                                                                 api_name="/generate")
             for _ in range(DECODE_CONCURRENCY)]
    deadline = time.monotonic() + 300
    while any(j.status().code.name not in ("ITERATING", "FINISHED") for j in longs) and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for: both long runs decoding (poll interval, 300 s bound)
    page.click("#generate")
    page.wait_for_function("/queue: 1\\/\\d/.test(document.body.innerText)", timeout=60_000)
    waited_while_busy = sum(not j.done() for j in longs) == DECODE_CONCURRENCY
    for job in longs:  # seen: the long runs stop at their next frame (not 1,000 tokens each) and free the slots
        job.cancel()
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=600_000)
    assert waited_while_busy  # the queue status was shown while both slots were taken
