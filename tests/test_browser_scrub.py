"""Scrubbing, replays and exports of a run in real Chromium, on the shipped model.

* a scrub of a finished run is drawn by the browser inside the scrubber's own input event (no server round
  trip), and the canvas it draws is the one the server draws for that step; the page reports its timing;
* a press on the scrubber pauses a slow replay (a run started during one, then stopped: tests/test_browser.py);
* a finished run counts no masks "in later blocks" at its last step (they are past its end), a step in
  the middle of it does;
* M2T only disables the τ_edit slider; the engine line is one plain sentence;
* the exported HTML replay is one file that shows a token's details on a tap, on a phone.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

from chromium import ARTIFACTS, VIEWPORTS, quiet  # skips or fails without Chromium
from ui_helpers import shipped_app

WAIT = 90_000  # ms: a state is awaited this long at most (a loaded machine is slow, never this slow)

# a press on the range, its new value and input event: what the canvas shows when the event returns
SCRUB_NOW_JS = """
(k) => {
  const range = document.querySelector('#step input[type=range]');
  range.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true}));
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  const step = Number(document.querySelector('#canvas').dataset.step);
  range.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
  return step;
}
"""
# the canvas as drawn, without what a tap adds (the picked token, its details panel)
DRAWN_JS = """() => {
  const c = document.querySelector('#canvas').cloneNode(true);
  c.querySelectorAll('.tok-pop').forEach(e => e.remove());
  c.querySelectorAll('.picked').forEach(e => e.classList.remove('picked'));
  return [c.querySelector('.canvas-head').innerHTML, c.querySelector('.seq').innerHTML,
          c.querySelector('.counts').innerHTML];
}"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"))


def open_page(browser, app_url, viewport: str = "desktop", theme: str = "light"):
    context = browser.new_context(viewport=VIEWPORTS[viewport], has_touch=viewport == "phone")
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.said = []  # the browser's console and page errors
    page.on("console", lambda m: page.said.append(m.text))
    page.on("pageerror", lambda e: page.said.append(str(e)))
    page.goto(f"{app_url}?__theme={theme}", wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    return page


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def pick_mode(page, mode: str) -> None:
    page.locator("#mode label", has_text=re.compile(rf"^\s*{mode}\s*$")).click()


def wait_done(page) -> None:
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=WAIT)


def run(page, prompt: str, mode: str, gen_length: int, slow: bool = False) -> int:
    """One run to its end; returns its steps."""
    if not slow:
        page.locator("#teach input").uncheck()
    page.fill("#prompt textarea", prompt)
    pick_mode(page, mode)
    set_number(page, "gen-length", gen_length)
    page.click("#generate")
    wait_done(page)
    return int(page.get_attribute("#canvas", "data-steps"))


def step_of(page) -> int:
    return int(page.get_attribute("#canvas", "data-step"))


def test_a_scrub_is_drawn_by_the_browser_as_the_server_draws_it(browser, app_url):
    from ui.bench.scrub_timing import SCRUB_JS

    page = open_page(browser, app_url)
    steps = run(page, "def cube(zelmivo):\n", "M2T only", 32)  # 5 forwards on the shipped model
    assert steps >= 3
    page.wait_for_function("window.lladaReplays && window.lladaReplays.canvas", timeout=WAIT)
    drawn_by_server = page.evaluate(DRAWN_JS)  # the final frame: rendered by the server
    for k in (1, steps, 0, steps - 1, 2, steps):  # forward from the step shown, and back from step 0
        assert page.evaluate(SCRUB_NOW_JS, k) == k  # drawn inside the input event: no server round trip
        assert int(page.input_value("#step input[type=number]")) == k
    assert page.evaluate(DRAWN_JS) == drawn_by_server  # step 0 plus every patch is the server's canvas
    page.click("#play")  # the server draws the replay's steps again from step 0 ...
    page.wait_for_function("Number(document.querySelector('#canvas').dataset.step) >= 1", timeout=WAIT)
    page.click("#pause")
    page.wait_for_timeout(500)
    shown = step_of(page)
    assert page.evaluate(SCRUB_NOW_JS, 1 if shown != 1 else 2) in (1, 2)  # ... and the browser scrubs on top of it
    times = [page.evaluate(SCRUB_JS, k) for k in [0, steps, 1, steps - 1, 2] * 2]
    print(f"scrub to paint over {steps} steps: median {statistics.median(times):.0f} ms, slowest {max(times):.0f} ms")
    page.wait_for_timeout(1500)  # the release events' answers come back: none draws another step
    assert step_of(page) == 2
    assert not [s for s in page.said if "rror" in s]
    page.context.close()


def test_a_press_on_the_scrubber_pauses_a_slow_replay(browser, app_url):
    page = open_page(browser, app_url)
    steps = run(page, "def add(a, b):\n", "M2T only", 32, slow=True)
    page.wait_for_function(f"Number(document.querySelector('#canvas').dataset.step) < {steps}",
                           timeout=WAIT)  # the slow replay starts from step 0 ...
    page.wait_for_function("Number(document.querySelector('#canvas').dataset.step) >= 2", timeout=WAIT)
    assert step_of(page) < steps  # ... and walks on
    page.evaluate(SCRUB_NOW_JS, 1)  # a hand on the scrubber pauses it (a step already asked for may land)
    quiet(page)  # the press's pause answered, and the ticks sent before it drawn
    held = step_of(page)
    page.wait_for_timeout(2500)  # several steps of the replay's pace
    # held still (how many asked-for steps landed before the press depends on the machine's load)
    assert step_of(page) == held and int(page.input_value("#step input[type=number]")) == held
    page.context.close()


def test_a_finished_run_counts_no_masks_still_to_come(browser, app_url):
    page = open_page(browser, app_url, "phone", "dark")
    steps = run(page, "176+771=", "S", 128)
    assert steps >= 1
    counts = page.inner_text("#canvas .counts")
    assert "masks in" not in counts
    assert "past the end of the output" in counts  # the blocks after its EOS, counted as such
    page.evaluate(SCRUB_NOW_JS, 0)  # before the first forward every later block is still to come
    assert re.search(r"\+ \d+ masks in \d+ later blocks", page.inner_text("#canvas .counts"))
    page.context.close()


def test_m2t_only_disables_tau_edit_and_the_engine_line_is_plain(browser, app_url):
    page = open_page(browser, app_url)
    pick_mode(page, "M2T only")
    page.wait_for_function("document.querySelector('#tau-edit input[type=range]').disabled", timeout=WAIT)
    pick_mode(page, "Q")
    page.wait_for_function("!document.querySelector('#tau-edit input[type=range]').disabled", timeout=WAIT)
    run(page, "176+771=", "S", 32)
    line = page.inner_text("#stats small")
    assert line == "Engine: the PyTorch reference (the fast kernels need a GPU)."
    assert "TRITON" not in page.inner_text("body")
    page.context.close()


def test_the_exported_replay_shows_a_tokens_details_on_a_tap(browser, app_url, tmp_path):
    page = open_page(browser, app_url, "phone")
    run(page, "def cube(jozelnim):\n", "S", 32)
    page.click("#export")
    link = page.locator('#export-files a[download$="-replay.html"]')
    link.wait_for(timeout=WAIT)
    name = link.get_attribute("download")
    assert re.fullmatch(r"llada-S-def-cube-jozelnim-\d{8}-\d{6}-replay\.html", name)  # named after the run
    html = page.request.get(link.get_attribute("href")).text()
    page.context.close()
    assert "<link" not in html and not re.search(r"""src=["']?https?:""", html)  # one file, no network
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")

    phone = browser.new_context(viewport=VIEWPORTS["phone"], has_touch=True).new_page()
    phone.goto(Path(path).as_uri(), wait_until="load")
    token = phone.locator('#canvas-frame .tok[data-state="stable"]').first
    token.scroll_into_view_if_needed()
    token.tap()
    panel = phone.locator("#canvas-frame .tok-pop")
    panel.wait_for(state="visible", timeout=WAIT)
    assert panel.inner_text().startswith(f"#{token.get_attribute('data-pos')} ")
    box = panel.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= VIEWPORTS["phone"]["width"]
    phone.screenshot(path=str(ARTIFACTS / "export-phone-token.png"))
    phone.evaluate("""() => { const s = document.getElementById('step'); s.value = '1';
                              s.dispatchEvent(new Event('input', {bubbles: true})); }""")  # the player's scrubber
    assert phone.get_attribute("#canvas-frame .canvas", "data-step") == "1"
    phone.context.close()
