"""Scrubbing a Learn lesson and an S vs Q pair in real Chromium: drawn in the page, no server round trip.

While the scrubber moves, every event sent to the server is held (none reaches it, none is answered): the
canvases (and a lesson's narration) still show the scrubbed step inside the scrubber's own input event, and
what they show is what the server's renderers draw for that step (`ui.learn.view`, `ui.render.canvas`),
compared part by part in the page. A shorter run of a pair shows its last step past its end. Scrubbing an
S vs Q pair sends one event, when the hand lets go (the server draws a live pair's step); a lesson's scrub
sends one, which stops a lesson that plays. Waits are on states, with generous bounds (CI runs on a loaded
machine).
"""

from __future__ import annotations

import json
import time

import pytest

from chromium import SETTLED_JS, VIEWPORTS  # skips or fails without Chromium
from ui.learn import lessons as recorded, view as learn
from ui.render import canvas
from ui_helpers import launch_app

WAIT = 120_000  # ms: a state is awaited this long at most (a loaded machine is slow, never this slow)

# a press on the range, its new value and input event; what the page shows when the event returns
PRESS_JS = """
([slider, k, canvases]) => {
  const range = document.querySelector('#' + slider + ' input[type=range]');
  range.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true}));
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  const narration = document.querySelector('#learn-narration .narration');
  return {steps: canvases.map(id => Number(document.getElementById(id).dataset.step)),
          narration: narration ? Number(narration.dataset.step) : null};
}
"""
RELEASE_JS = """(slider) => document.querySelector('#' + slider + ' input[type=range]')
                              .dispatchEvent(new PointerEvent('pointerup', {bubbles: true}))"""
# a canvas on screen and the one the server renders, parsed by the page: their step and drawn parts
CANVAS_PARTS_JS = """
([id, html]) => {
  const box = document.createElement('template');
  box.innerHTML = html;
  const parts = (c) => [c.id, c.dataset.step, c.dataset.steps,
                        ...['.canvas-head', '.seq', '.counts'].map(s => c.querySelector(s).innerHTML)];
  return [parts(document.getElementById(id)), parts(box.content.firstElementChild)];
}
"""
NARRATION_PARTS_JS = """
(html) => {
  const box = document.createElement('template');
  box.innerHTML = html;
  const parts = (n) => [n.dataset.step, n.innerHTML];
  return [parts(document.querySelector('#learn-narration .narration')), parts(box.content.firstElementChild)];
}
"""


@pytest.fixture(scope="module")
def app(tiny_model_dir):
    demo, url = launch_app(tiny_model_dir, recordings=recorded.load_recordings())
    yield demo, url
    demo.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport=VIEWPORTS["desktop"])
    page.set_default_timeout(WAIT)
    page.said = []  # the browser's console errors and page errors
    page.on("console", lambda m: page.said.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.said.append(str(e)))
    page.goto(url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    return page


class Held:
    """Every event the page sends to the server (a queue join) held, not sent on, while in use; `events` says
    which events of the app (their handler's name) the page asked for meanwhile."""

    PATTERN = "**/gradio_api/queue/join*"

    def __init__(self, page, demo):
        self.page, self.demo, self.routes = page, demo, []

    def __enter__(self) -> "Held":
        self.page.route(self.PATTERN, lambda route: self.routes.append(route))
        return self

    def __exit__(self, *exc) -> None:
        for route in self.routes:
            route.continue_()
        self.routes.clear()
        self.page.unroute(self.PATTERN)  # (requests held until now are sent on with it)

    def events(self, at_least: int) -> list[str]:
        """The events asked for, once `at_least` of them are (and the page has settled since)."""
        deadline = time.monotonic() + WAIT / 1000
        while len(self.routes) < at_least and time.monotonic() < deadline:
            self.page.wait_for_timeout(50)
        self.page.evaluate(SETTLED_JS)
        return [self.demo.fns[json.loads(r.request.post_data)["fn_index"]].fn.__qualname__ for r in self.routes]


def scrub(page, slider: str, k: int, canvases: list[str]) -> dict:
    """Press the scrubber and move it to `k` (not let go): what the page shows when the input event returns."""
    return page.evaluate(PRESS_JS, [slider, k, canvases])


def same_canvas(page, elem_id: str, html: str) -> None:
    shown, rendered = page.evaluate(CANVAS_PARTS_JS, [elem_id, html])
    assert shown == rendered


def test_a_learn_scrub_is_drawn_in_the_page_as_the_server_draws_it(browser, app):
    demo, url = app
    rec = next(r for r in recorded.load_recordings().values() if r.idea == "modes")  # two runs, of unequal steps
    runs = [t.steps for t in rec.runs]
    assert len(set(runs)) == 2
    page = open_page(browser, url)
    page.get_by_role("tab", name="Learn").click()
    page.locator("#learn-run label", has_text=rec.title).click()  # it plays from step 0 to its end
    page.wait_for_function(f"document.querySelector('#learn-narration .narration').dataset.step == '{rec.steps}'",
                           timeout=WAIT)
    page.wait_for_function("window.lladaReplays.learn && window.lladaReplays.learn.replays.length == 2",
                           timeout=WAIT)
    for k in (0, min(runs) + 1, 1, rec.steps, 2):  # back from the end, past the shorter run's end, forward
        with Held(page, demo) as held:
            shown = scrub(page, "learn-step", k, list(learn.CANVAS_IDS))
            assert shown == {"steps": [min(k, n) for n in runs], "narration": k}  # drawn in the input event
            for elem_id, html in zip(learn.CANVAS_IDS, learn.canvases(rec, k)):
                same_canvas(page, elem_id, html)
            shown_narration, rendered = page.evaluate(NARRATION_PARTS_JS, learn.narration_html(rec, k))
            assert shown_narration == rendered
            page.evaluate(RELEASE_JS, "learn-step")
            assert held.events(1) == ["scrub"]  # one event, which stops a lesson that plays
        assert int(page.input_value("#learn-step input[type=number]")) == k
    page.wait_for_timeout(1500)  # the held requests are answered: none draws another step
    assert page.get_attribute("#canvas-learn-b", "data-step") == "2"
    assert not page.said
    page.close()


def test_a_compare_scrub_is_drawn_in_the_page_as_the_server_draws_it(browser, app, monkeypatch):
    from ui.playground import compare

    demo, url = app
    pairs = []  # the pair the server finished: what the page's replay must show
    final = compare._compare_final
    monkeypatch.setattr(compare, "_compare_final", lambda traces, *a: pairs.append(traces) or final(traces, *a))
    page = open_page(browser, url)
    page.fill("#prompt textarea", "def add(a, b):")
    box = page.locator("#gen-length input[type=number]")
    box.fill("24")
    box.press("Enter")
    page.click("#run-compare")
    page.wait_for_function("window.lladaReplays.compare && document.querySelector('#diff .diff-key')", timeout=WAIT)
    traces = pairs[-1]
    runs = {side: traces[side].steps for side in ("S", "Q")}
    top = max(runs.values())
    assert min(runs.values()) >= 2
    ids = list(compare.CANVAS_IDS)  # the left (S) and the right (Q) canvas
    for k in (0, top, 1, min(runs.values()) + 1, top - 1):
        k = min(k, top)
        with Held(page, demo) as held:
            shown = scrub(page, "compare-step", k, ids)
            assert shown["steps"] == [min(k, n) for n in runs.values()]  # drawn in the input event
            for side, elem_id in zip(runs, ids):
                same_canvas(page, elem_id, canvas.render(traces[side], k, elem_id=elem_id))
            page.evaluate(RELEASE_JS, "compare-step")
            assert held.events(1) == ["compare_step"]  # one event, once the hand lets go (a live pair's step)
        assert int(page.input_value("#compare-step input[type=number]")) == k
    page.wait_for_timeout(1500)  # the release's answers come back: none draws another step
    assert [int(page.get_attribute(f"#{i}", "data-step")) for i in ids] == [min(top - 1, n) for n in runs.values()]
    assert page.get_attribute("#canvas", "data-step") == "0"  # the Playground's own canvas is not the pair's
    assert not page.said
    page.close()
