"""The Learn view in real Chromium, desktop (1440×900) and phone (390×844), light and dark theme.

Replays the shipped lessons (assets/learn_trace.json): play advances the canvas and the narration step by
step, pause holds it, the scrubber and *next edit* jump, the S vs Q lesson shows two canvases (side by
side on a desktop, stacked on a phone) and a verdict, the MBE lesson's next edit shows an MBE edit in an
earlier block. Screenshots go to tests/artifacts/learn-*.png. Skips like tests/test_browser.py when
Chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from chromium import ARTIFACTS, VIEWPORTS, quiet  # skips or fails without Chromium
from test_browser import set_number
from ui.learn import lessons as recorded, view as learn
from ui_helpers import launch_app

NARRATION = "document.querySelector('#learn-narration .narration')"
# window.seenAt: the narration's current lines and the canvas's draft tokens when both first show step k
SEEN_AT_JS = """(k) => {
  window.seenAt = null;
  const look = () => {
    const c = document.querySelector('#canvas-learn'), n = document.querySelector('#learn-narration .narration');
    if (window.seenAt !== null || !c || !n || Number(c.dataset.step) !== k || Number(n.dataset.step) !== k) return;
    window.seenAt = {narration: n.querySelector('.now').innerText,
                     drafts: c.querySelectorAll('.tok[data-state="draft"]').length};
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                     characterData: true});
}"""


@pytest.fixture(scope="module")
def lessons() -> dict[str, recorded.Recording]:
    recordings = recorded.load_recordings()
    assert recordings, "assets/learn_trace.json is missing: run python -m ui.learn.record"
    return {r.idea: r for r in recordings.values()}


REPLAY_SECONDS = 0.6  # a tick's time here: half the app's (learn.STEP_SECONDS, slow enough to read), the same steps


@pytest.fixture(scope="module")
def learn_url(tiny_model_dir):
    with pytest.MonkeyPatch.context() as patch:  # the timers are made with the pace the module holds
        patch.setattr(learn, "STEP_SECONDS", REPLAY_SECONDS)
        demo, url = launch_app(tiny_model_dir, recordings=recorded.load_recordings())
        yield url
        demo.close()


@pytest.fixture(scope="module", params=[(v, t) for v in VIEWPORTS for t in ("light", "dark")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def page(request, browser, learn_url):  # noqa: F811 - browser is the imported fixture
    """One page per viewport and theme, shared by the tests in file order (each picks its lessons; a page load
    costs Chromium ~2 CPU seconds)."""
    viewport, theme = request.param
    page = browser.new_page(viewport=VIEWPORTS[viewport])
    page.set_default_timeout(90_000)  # clicks and reads wait this long for their element on a loaded machine
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(learn_url + ("?__theme=dark" if theme == "dark" else ""), wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=60_000)
    page.get_by_role("tab", name="Learn").click()
    page.wait_for_selector("#canvas-learn .tok", timeout=60_000)
    page.name = f"{viewport}-{theme}"
    yield page
    page.close()


@pytest.fixture(autouse=True)
def no_dialog(page):
    yield
    assert page.dialogs == []


def step_of(page, elem_id: str = "canvas-learn") -> int:
    return int(page.get_attribute(f"#{elem_id}", "data-step"))


def narration(page) -> str:
    return page.inner_text("#learn-narration .narration .now")


def pick(page, rec: recorded.Recording) -> None:
    """Pick a lesson and wait until it is on screen (it starts playing from step 0)."""
    page.locator("#learn-run label", has_text=rec.title).click()
    page.wait_for_function(f"document.querySelector('#learn-caption').innerText.includes({json.dumps(rec.caption)})",
                           timeout=60_000)


def settled_step(page, elem_id: str = "canvas-learn") -> int:
    """The canvas's step once nothing is on its way (the pause answered, a tick sent before it drawn)."""
    quiet(page)
    return step_of(page, elem_id)


def first_step(trace, state: str) -> int:
    """The first decode step of `trace` with a change of this canvas state ("edit": T2T, "mbe": MBE)."""
    kind = {"edit": "edits", "mbe": "mbe_edits"}[state]
    return min(r.step for r in trace.records if r.kind == "decode" and getattr(r, kind))


def hold(page, step: int) -> None:
    """Pause, then scrub to `step` once no tick is on its way."""
    page.click("#learn-pause")
    settled_step(page)
    set_number(page, "learn-step", step)
    page.wait_for_selector(f'#canvas-learn[data-step="{step}"]', timeout=60_000)


def shot(page, what: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"learn-{page.name}-{what}.png"), full_page=False)


def test_play_pause_scrub_and_narrate(page, lessons):
    draft = lessons["draft"]
    assert "Step 0:" in narration(page) and step_of(page) == 0
    assert page.locator("#learn-run label").count() == len(lessons) == 7
    page.locator("#learn-narration").scroll_into_view_if_needed()
    shot(page, "first")
    page.evaluate(SEEN_AT_JS, 1)  # step 1 is on screen for one tick: the page notes what it shows then
    page.click("#learn-play")
    page.wait_for_function("window.seenAt !== null", timeout=60_000)
    seen = page.evaluate("window.seenAt")
    assert seen["narration"].startswith("Step 1 (block 0):") and "drafted together" in seen["narration"]
    assert seen["drafts"] >= 3
    shot(page, "draft-step1")
    steps = draft.runs[0].steps
    page.wait_for_function(f"document.querySelector('#canvas-learn').dataset.step == '{steps}'", timeout=60_000)
    assert "verified and final" in narration(page)  # the last tick's frame: no event of this tab is in flight

    # picked now, not after a scrub: a scrub's own event (it stops the timer) could land after the pick's
    pick(page, lessons["modes"])  # a lesson plays from step 0 when picked: pause holds it
    page.wait_for_function("Number(document.querySelector('#canvas-learn-b').dataset.step) >= 1", timeout=60_000)
    page.click("#learn-pause")
    held = settled_step(page, "canvas-learn-b")
    time.sleep(2 * learn.STEP_SECONDS + 0.2)  # two more ticks' time: nothing may move (a slow machine only waits)
    assert step_of(page, "canvas-learn-b") == held < lessons["modes"].steps

    set_number(page, "learn-step", 1)  # scrub back
    page.wait_for_selector('#canvas-learn[data-step="1"]', timeout=60_000)
    page.wait_for_function(f"{NARRATION}.dataset.step == '1'", timeout=60_000)
    assert narration(page).startswith("S · Step 1 (block 0):")  # the lesson's first run is S mode's


def test_next_edit_shows_the_repair_and_the_mbe_edit(page, lessons):
    pick(page, lessons["edit"])
    hold(page, 0)
    page.click("#learn-next-edit")
    page.wait_for_selector('#canvas-learn .tok[data-state="edit"]', timeout=60_000)
    edit = page.locator('#canvas-learn .tok[data-state="edit"]').first
    assert edit.get_attribute("data-prev") and edit.locator(".old").count() == 1
    assert "changed" in narration(page) and "→" in narration(page) and "τ_edit" in narration(page)
    page.locator("#canvas-learn").scroll_into_view_if_needed()
    shot(page, "edit")

    pick(page, lessons["mbe"])
    hold(page, first_step(lessons["mbe"].runs[1], "mbe") - 1)  # past any T2T edit before it: the next is MBE
    page.click("#learn-next-edit")
    page.wait_for_selector('#canvas-learn-b .tok[data-state="mbe"]', timeout=60_000)
    mbe = page.locator('#canvas-learn-b .tok[data-state="mbe"]').first
    assert mbe.get_attribute("data-prev") and int(mbe.get_attribute("data-block")) < step_block(page)
    assert "MBE: in the finished block" in page.inner_text("#learn-narration")
    page.locator("#canvas-learn-b").scroll_into_view_if_needed()
    shot(page, "mbe")


def step_block(page) -> int:
    """The active block of the second canvas."""
    return int(page.get_attribute("#canvas-learn-b .blk.act", "data-block"))


def test_s_vs_q_side_by_side_with_a_verdict_in_either_theme(page, lessons):
    pick(page, lessons["modes"])
    verdict = page.inner_text("#learn-stats .verdict")
    assert "S needs" in verdict and "fewer forwards" in verdict and "S is wrong, Q is right" in verdict
    hold(page, 2)
    # both boxes and the page width are read in one frame, waited for: a canvas still settling cannot tear the reading
    stacked = page.viewport_size["width"] < 500  # a phone stacks the two runs
    page.wait_for_function("""stacked => {
        const [a, b] = ['#canvas-learn', '#canvas-learn-b'].map(i => document.querySelector(i).getBoundingClientRect());
        const side = stacked ? b.top >= a.bottom - 1 && a.width > 300
                             : Math.abs(a.top - b.top) < 2 && b.left > a.right - 1;
        return side && document.documentElement.scrollWidth <= window.innerWidth;  // and no sideways scroll
    }""", arg=stacked, timeout=90_000)
    ink = page.evaluate(f"getComputedStyle({NARRATION}).color")
    light = luminance(ink) > 0.5
    assert light == page.name.endswith("dark")  # the narration's text follows the theme
    page.locator("#canvas-learn").scroll_into_view_if_needed()
    shot(page, "s-vs-q")


def luminance(css_color: str) -> float:
    r, g, b = (float(x) for x in re.findall(r"[\d.]+", css_color)[:3])  # rgb(r, g, b) or rgba(r, g, b, a)
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_the_heal_lesson_shows_the_poke_and_its_repair_and_the_indel_lesson_its_moves(page, lessons):
    heal = lessons["heal"]
    (poke_step, poke), = heal.runs[0].pokes
    pick(page, heal)
    hold(page, poke_step)
    cell = page.locator(f'#canvas-learn .tok[data-pos="{poke.pos}"]')
    assert cell.get_attribute("data-state") == "poke" and "a poke" in narration(page)
    set_number(page, "learn-step", poke_step + 1)  # the next forward edits it back
    page.wait_for_selector(f'#canvas-learn .tok.poked[data-pos="{poke.pos}"][data-state="edit"]', timeout=60_000)
    assert "poked after step" in narration(page)
    page.locator("#canvas-learn").scroll_into_view_if_needed()
    shot(page, "heal")

    indel = lessons["indel"]
    pick(page, indel)
    assert "assets/model22/README.md" in page.inner_text("#learn-caption")
    t = indel.runs[0]
    for state, kind in (("delete", "deletes"), ("insert", "inserts")):
        step = min(r.step for r in t.records if r.kind == "decode" and getattr(r, kind))
        hold(page, step)
        page.wait_for_selector(f'#canvas-learn [data-state="{state}"]', timeout=60_000)
        assert ("DELETE removed" if state == "delete" else "SPLIT opened") in narration(page)
    page.locator("#canvas-learn").scroll_into_view_if_needed()
    shot(page, "indel")
