"""A replay's stops and starts keep the order they were made in, however late the server answers a stop.

The app here answers every scrub only after SCRUB_DELAY_S (a server under load). A stop (scrub, pause, next
edit) and a start (play, a lesson picked) are separate events: answered out of order, the scrub's "stop"
would land after the play and stop it. The page sends a start only once the stops before it are answered
(ui/player.py `stops` / `starts`, assets/scrub.js `lladaOrder`), so in real Chromium:

* Playground: scrubbed near the end, then *play* at once: no step is drawn past it while the scrub is
  unanswered or the press's pause unsent (the press clicks it a slow frame later), and the replay then
  plays to the run's last step;
* Learn: scrubbed, then another lesson picked at once: it plays (its second canvas moves on) once the scrub
  is answered, and not before.
"""

from __future__ import annotations

import functools
import time

import pytest

from chromium import VIEWPORTS  # skips or fails without Chromium
from test_browser import run, set_number
from ui.learn import lessons as recorded, view as learn
from ui.playground import replay
from ui_helpers import launch_app

SCRUB_DELAY_S = 3.0  # every scrub is answered this late
WAIT = 120_000  # ms: the longest a state is awaited (a loaded machine is slow, never this slow)

# window.movedInFlight: how many stops were in flight when `#id` first showed a step past `after`
WATCH_JS = """([id, after]) => {
  window.movedInFlight = null;
  const seen = () => {
    const c = document.querySelector('#' + id);
    if (c && Number(c.dataset.step) > after && window.movedInFlight === null)
      window.movedInFlight = window.lladaOrder.inFlight();
  };
  new MutationObserver(seen).observe(document.body, {subtree: true, childList: true, attributes: true});
}"""


# the page's next keydown slows the first animation frame asked for after it (a loaded browser): the press on
# the scrubber clicks its pause only then, after the late scrub has been answered
SLOW_FRAME_MS = 5_000
REPLAYED = 24  # steps played after the scrub
SLOW_PRESS_JS = """(ms) => window.addEventListener('keydown', () => {
  const frame = window.requestAnimationFrame;
  window.requestAnimationFrame = (next) => { window.requestAnimationFrame = frame; return setTimeout(next, ms); };
}, {capture: true, once: true})"""


ANSWERED: list[str] = []  # each late scrub answered, by its handler's name


def late(handler):
    @functools.wraps(handler)
    def answer(*args):
        time.sleep(SCRUB_DELAY_S)
        ANSWERED.append(handler.__module__)
        return handler(*args)
    return answer


@pytest.fixture(scope="module")
def app_url(tiny_model_dir):
    with pytest.MonkeyPatch.context() as patch:  # wired when the app is built: patched before it
        patch.setattr(replay, "scrub", late(replay.scrub))
        patch.setattr(learn, "scrub", late(learn.scrub))
        demo, url = launch_app(tiny_model_dir, recordings=recorded.load_recordings())
    yield url
    demo.close()


@pytest.fixture
def page(browser, app_url):
    page = browser.new_page(viewport=VIEWPORTS["desktop"])
    page.set_default_timeout(WAIT)
    page.goto(app_url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    yield page
    page.close()


def test_play_right_after_a_scrub_plays_once_the_scrub_is_answered(page):
    run(page)
    steps = int(page.get_attribute("#canvas", "data-steps"))
    k = steps - REPLAYED  # a late pause stops a replay of this many steps before it ends (0.3 s a step)
    assert k >= 1
    ANSWERED.clear()
    page.evaluate(SLOW_PRESS_JS, SLOW_FRAME_MS)
    set_number(page, "step", k)  # typed: the scrub is sent when the box loses focus, as *play* is pressed;
    # its Enter is a press, whose pause is clicked SLOW_FRAME_MS later
    page.wait_for_selector(f'#canvas[data-step="{k}"]', timeout=WAIT)  # drawn by the browser at once
    page.evaluate(WATCH_JS, ["canvas", k])
    page.click("#play")
    page.wait_for_function(f"document.querySelector('#canvas').dataset.step == '{steps}'", timeout=WAIT)
    assert ANSWERED == ["ui.playground.replay"]  # the scrub was sent and answered late
    assert page.evaluate("window.movedInFlight") == 0  # played only after the scrub was answered


def test_a_lesson_picked_right_after_a_scrub_plays(page):
    recordings = {r.idea: r for r in recorded.load_recordings().values()}
    page.get_by_role("tab", name="Learn").click()
    page.wait_for_selector("#canvas-learn .tok", timeout=WAIT)
    ANSWERED.clear()
    set_number(page, "learn-step", 1)
    page.wait_for_selector('#canvas-learn[data-step="1"]', timeout=WAIT)
    page.evaluate(WATCH_JS, ["canvas-learn-b", 0])
    page.locator("#learn-run label", has_text=recordings["modes"].title).click()
    page.wait_for_function("Number(document.querySelector('#canvas-learn-b')?.dataset.step) >= 2",  # shown once picked
                           timeout=WAIT)
    assert ANSWERED == ["ui.learn.view"]
    assert page.evaluate("window.movedInFlight") == 0
