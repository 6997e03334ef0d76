"""The playground in real Chromium: type, run, read the canvas hooks, scrub, compare S vs Q, take screenshots.

Needs the Debian `chromium` package at /usr/bin/chromium and Python Playwright. Without them the module
skips with the reason, except under CI (CI=true), where a missing browser is a failure. Every test opens
its own page, so none depends on another's order. Screenshots go to tests/artifacts/ (not versioned).
"""

from __future__ import annotations

import logging
import re

import pytest

from chromium import ARTIFACTS  # skips or fails without Chromium

from ui_helpers import hand_trace, launch_app  # noqa: E402

STATES = {"prompt", "mask", "draft", "edit", "mbe", "stable"}
XSS = "<img src=x onerror=alert(1)>"
WAIT = 120_000  # ms: a state is awaited this long at most (a loaded machine is slow, never this slow)


@pytest.fixture(scope="module")
def app_url(tiny_model_dir):
    demo, url = launch_app(tiny_model_dir, recordings={"S + MBE: a hand-made run": hand_trace()})
    yield url
    demo.close()


@pytest.fixture
def page(browser, app_url):
    """A fresh page of the app: every test starts from the first visit."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(app_url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    yield page
    assert page.dialogs == []  # no token text ever ran as markup
    page.close()


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def canvas_attr(page, name: str, elem_id: str = "canvas") -> int:
    return int(page.get_attribute(f"#{elem_id}", name))


def run(page, prompt: str = "def add(a, b):", gen_length: int = 16) -> None:
    """Run one short generation and wait until it is done (no slow replay after it: these tests scrub)."""
    page.locator("#teach input").uncheck()
    page.fill("#prompt textarea", prompt)
    set_number(page, "block-length", 8)
    set_number(page, "gen-length", gen_length)
    page.click("#generate")
    page.wait_for_function("document.querySelector('#stats').innerText.includes('done')", timeout=WAIT)
    # and the scrubber set to the last step: a scrub made before that update lands would be undone by it
    page.wait_for_function("document.querySelector('#step input[type=number]').value"
                           " === document.querySelector('#canvas').dataset.steps", timeout=WAIT)


def test_run_shows_every_position_in_a_state(page):
    page.locator("#teach input").uncheck()  # the final step stays on screen (no slow replay from step 0)
    page.fill("#prompt textarea", f"{XSS} def add(a, b):")
    for mode, tau in (("Q", "0.7"), ("S", "0.5")):  # a preset sets the sliders to its values
        page.locator("#mode label", has_text=re.compile(rf"^\s*{mode}\s*$")).click()
        page.wait_for_function(f"document.querySelector('#tau-mask input[type=number]').value == '{tau}'",
                               timeout=WAIT)
    set_number(page, "block-length", 8)
    set_number(page, "gen-length", 16)
    page.click("#generate")
    page.wait_for_selector("#canvas .tok", timeout=WAIT)
    page.wait_for_function("document.querySelector('#stats').innerText.includes('done')", timeout=WAIT)
    steps = canvas_attr(page, "data-steps")
    assert steps > 0 and canvas_attr(page, "data-step") == steps
    toks = page.locator("#canvas .tok")
    states = toks.evaluate_all("els => els.map(e => e.dataset.state)")
    positions = toks.evaluate_all("els => els.map(e => Number(e.dataset.pos))")
    assert set(states) <= STATES and positions == list(range(len(positions)))
    assert "prompt" in states and len(positions) % 8 == 0
    shown = page.inner_text("#canvas .seq").replace("·", " ")  # spaces are drawn as faint dots
    assert XSS in shown and page.locator("#canvas img").count() == 0
    stats = page.inner_text("#stats")
    for word in ("forwards", "tokens", "TPF", "TPS", "drafts", "edits", "MBE edits"):
        assert word in stats
    assert "Engine: the PyTorch reference (the fast kernels need a GPU)." in stats  # which MoE engine ran
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)


def test_scrub_replays_the_stored_run(page):
    run(page)
    set_number(page, "step", 1)
    page.wait_for_selector('#canvas[data-step="1"]', timeout=WAIT)
    drafts = page.locator('#canvas .tok[data-state="draft"]')
    assert drafts.count() >= 1 and float(drafts.first.get_attribute("data-p")) > 0
    assert page.locator('#canvas .tok[data-state="mask"]').count() >= 1
    assert not page.locator('#canvas .tok.far').first.is_visible()  # later blocks' masks are only counted
    page.locator("#canvas").screenshot(path=str(ARTIFACTS / "scrub-step1.png"))
    page.click("#next-edit")
    page.wait_for_selector('#canvas .tok[data-state="edit"]', timeout=WAIT)
    edit = page.locator('#canvas .tok[data-state="edit"]').first
    assert edit.get_attribute("data-prev") is not None and edit.locator(".old").count() == 1
    page.locator("#canvas").screenshot(path=str(ARTIFACTS / "next-edit.png"))
    set_number(page, "step", 1)
    page.wait_for_selector('#canvas[data-step="1"]', timeout=WAIT)
    page.click("#play")
    page.wait_for_function("Number(document.querySelector('#canvas').dataset.step) > 1", timeout=WAIT)
    page.click("#pause")


def test_export_gives_json_and_html(page):
    run(page)
    page.click("#export")
    page.wait_for_selector('#export-files a[download$="-replay.html"]', timeout=WAIT)
    assert page.locator('#export-files a[download$="-trace.json"]').count() == 1


def test_compare_s_and_q_side_by_side(page):
    page.fill("#prompt textarea", "def add(a, b):")
    set_number(page, "block-length", 8)
    set_number(page, "gen-length", 16)
    page.click("#run-compare")
    page.wait_for_function("document.querySelector('#diff .diff-key') !== null", timeout=WAIT)
    for elem_id in ("canvas-s", "canvas-q"):
        assert canvas_attr(page, "data-steps", elem_id) > 0
        assert page.locator(f"#compare #{elem_id} .tok").count() > 0
    table = page.inner_text("#compare-table")
    assert "TPF" in table and "S" in table and "Q" in table
    page.locator("#compare").screenshot(path=str(ARTIFACTS / "compare.png"))


def test_refused_input_is_explained_and_clears_the_old_run(page):
    run(page)
    page.fill("#prompt textarea", "   ")
    page.click("#generate")
    page.wait_for_selector("#error .error-box", timeout=WAIT)
    assert "empty" in page.inner_text("#error")
    page.wait_for_selector("#canvas.empty", timeout=WAIT)  # the previous run is no longer on screen
    assert page.inner_text("#stats").startswith("No run yet")


def test_live_frames_patch_the_canvas_and_stop_shows_the_stopped_run(page):
    page.fill("#prompt textarea", "def add(a, b):")
    page.locator("#mode label", has_text=re.compile(r"^\s*Custom\s*$")).click()
    set_number(page, "tau-mask", 1)  # one draft per forward: a long run
    set_number(page, "block-length", 4)
    set_number(page, "gen-length", 800)
    for attempt in range(3):  # on a starved machine the run may end before the Stop click lands: run again
        page.click("#generate")
        page.wait_for_function("document.querySelector('#stats').innerText.includes('running')", timeout=WAIT)
        # between keyframes the canvas advances by patches: its step passes the keyframe it was drawn at
        page.wait_for_function("(() => { const c = document.querySelector('#canvas');"
                               " return c && c.dataset.base && Number(c.dataset.step) > Number(c.dataset.base); })()",
                               timeout=WAIT)
        # the click event itself: a renderer starved by a loaded machine may never finish the scroll and
        # stability checks of a pointer click while frames keep arriving
        page.dispatch_event("#stop", "click", timeout=WAIT)
        page.wait_for_function("(() => { const t = document.querySelector('#stats').innerText;"
                               " return t.startsWith('stopped at forward') || /done|budget reached/.test(t); })()",
                               timeout=WAIT)
        if page.inner_text("#stats").startswith("stopped at forward"):
            break
    else:
        pytest.fail(f"three runs each ended before Stop was taken: {page.inner_text('#stats')[:200]}")
    forwards = int(re.search(r"stopped at forward (\d+)", page.inner_text("#stats")).group(1))
    assert 0 < forwards < 1000 and canvas_attr(page, "data-steps") > 0
    page.locator("#canvas").screenshot(path=str(ARTIFACTS / "stopped.png"))


class Lines(logging.Handler):
    """The server's log lines (the app runs in this process)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_run_during_a_slow_replay_then_stop_keeps_the_stopped_step(page):
    log, handler = logging.getLogger(), Lines()
    log.addHandler(handler)
    said = []
    page.on("console", lambda m: said.append(m.text))
    try:
        page.fill("#prompt textarea", "def add(a, b):")
        set_number(page, "block-length", 8)
        set_number(page, "gen-length", 32)
        page.click("#generate")  # the slow replay after it is on by default
        page.wait_for_function("document.querySelector('#stats').innerText.includes('done')", timeout=WAIT)
        page.wait_for_function("(() => { const c = document.querySelector('#canvas'), k = Number(c.dataset.step);"
                               " return k >= 2 && k < Number(c.dataset.steps); })()",
                               timeout=WAIT)  # the replay walks from step 0, past step 1 (a slider maximum of 1)
        page.locator("#mode label", has_text=re.compile(r"^\s*Custom\s*$")).click()
        set_number(page, "tau-mask", 1)  # one draft per forward: a long run
        set_number(page, "block-length", 4)
        set_number(page, "gen-length", 800)
        page.click("#generate")  # during the slow replay
        page.wait_for_function("document.querySelector('#stats').innerText.startsWith('running')", timeout=WAIT)
        page.wait_for_function("Number(document.querySelector('#canvas').dataset.steps) >= 3", timeout=WAIT)
        page.click("#stop", timeout=WAIT)
        page.wait_for_function("document.querySelector('#stats').innerText.startsWith('stopped at forward')",
                               timeout=WAIT)
        stopped = canvas_attr(page, "data-steps")
        page.wait_for_timeout(3000)  # a slow replay would have taken the canvas back to step 0 by now
        assert canvas_attr(page, "data-step") == stopped == canvas_attr(page, "data-steps")
        toasts = page.locator(".toast-body").all_inner_texts()
    finally:
        log.removeHandler(handler)
    heard = handler.lines + said + toasts
    assert not [line for line in heard if "greater than maximum" in line or "less than minimum" in line], heard


def test_learn_view_replays_a_recording(page):
    page.get_by_role("tab", name="Learn").click()
    page.wait_for_selector("#canvas-learn .tok", timeout=WAIT)
    assert "Recording (not live)" in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / "learn.png"), full_page=True)
