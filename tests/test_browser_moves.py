"""A LLaDA2.2 run in real Chromium: the canvas draws its deletes and inserts, live, in a replay and scrubbed.

The app runs a tiny 2.2 replica in the real format (`python -m llada.weights.replica DIR --shape tiny
--version 2.2`), passed as `--model DIR` would pass it, its model nudged (tests/model22.py) to write DELETE
at one position and SPLIT at another of the first decoded block wherever a token stands there. Seen in the page:

* while its replay plays (the server draws each step, from the step before the first move), a struck-out
  token (`.gone`) and an inserted mask (`data-state="insert"`) are drawn (a live run's frames may skip the
  steps that moved: it is not required);
* scrubbed step by step from 0 to the end, the browser's canvas is the server's last frame;
* scrubbed to a step that deleted, the struck-out token's gap closes (its width shrinks) and the text after
  it reads as the server draws that step; at a step that inserted, the mask's gap opens;
* both read at 4.5:1 or more (tests/contrast.py), on a phone in the dark theme and on a desktop in the light
  one.
"""

from __future__ import annotations

import pytest

from chromium import VIEWPORTS  # skips or fails without Chromium
from contrast import AA, CANVAS_CONTRAST_JS
from model22 import nudged
from ui_helpers import launch_app

WAIT = 120_000  # ms: a state is awaited this long at most (a loaded machine is slow, never this slow)
PROMPT, GEN_LENGTH = "hi", 32
DELETE_AFTER, SPLIT_AFTER = 4, 9  # nudged positions, counted from the prompt's end (its chat template included)

# window.movesSeen: which moves the canvas drew while window.movesStage names the stage
WATCH_JS = """() => {
  window.movesSeen = {};
  new MutationObserver(() => {
    const c = document.querySelector('#canvas');
    if (!c) return;
    const seen = window.movesSeen[window.movesStage] = window.movesSeen[window.movesStage] || {};
    if (c.querySelector('.gone[data-state="delete"]')) seen.delete = true;
    if (c.querySelector('.tok[data-state="insert"]')) seen.insert = true;
  }).observe(document.querySelector('#canvas-box'), {subtree: true, childList: true, attributes: true});
}"""
SCRUB_JS = """(k) => {
  const range = document.querySelector('#step input[type=range]');
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  return Number(document.querySelector('#canvas').dataset.step);
}"""
# the steps of the kept replay whose patch draws a delete / an insert
STEPS_WITH_JS = """(what) => window.lladaReplays.canvas.replays[0].patches
  .map((p, i) => p.cells.some(([, html]) => html.includes(what)) ? i + 1 : 0).filter(k => k)"""
# the canvas as drawn: header, tokens, counts
DRAWN_JS = """() => ['.canvas-head', '.seq', '.counts'].map(s => document.querySelector('#canvas ' + s).innerHTML)"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    from llada.weights import replica
    from ui.models import Models, cli_models, model_dirs

    root = tmp_path_factory.mktemp("llada22") / "LLaDA2.2-tiny"
    assert replica.main([str(root), "--shape", "tiny", "--version", "2.2"]) == 0
    models = Models(model_dirs(cli_models([str(root)]), env="", default=None))  # as `app.py --model DIR`
    assert [m.path for m in models.offered] == [str(root.resolve())], models.withheld
    pipe = models.get(models.default)
    assert pipe.model.config.version == "2.2" and pipe.presets["S"]["steps"] == 32
    end = len(pipe.encode(PROMPT))
    pipe.model = nudged(pipe.model, pipe.mask_id, (end + DELETE_AFTER,), (end + SPLIT_AFTER,))
    demo, url = launch_app(models)
    yield url
    demo.close()


def open_page(browser, app_url, viewport: str, theme: str):
    page = browser.new_context(viewport=VIEWPORTS[viewport], has_touch=viewport == "phone").new_page()
    page.set_default_timeout(WAIT)
    page.said = []
    page.on("pageerror", lambda e: page.said.append(str(e)))
    page.goto(f"{app_url}?__theme={theme}", wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    return page


def stage(page, name: str) -> None:
    page.evaluate(f"window.movesStage = {name!r}")


def generate(page) -> int:
    page.locator("#teach input").uncheck()
    page.fill("#prompt textarea", PROMPT)
    box = page.locator("#gen-length input[type=number]")
    box.fill(str(GEN_LENGTH))
    box.press("Enter")
    stage(page, "live")
    page.click("#generate")
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=WAIT)
    page.wait_for_function("window.lladaReplays && window.lladaReplays.canvas", timeout=WAIT)
    return int(page.get_attribute("#canvas", "data-steps"))


def contrast(page) -> dict:
    return page.evaluate(f"({CANVAS_CONTRAST_JS.strip()})(document.querySelector('#canvas'))")


@pytest.mark.parametrize("viewport,theme", [("phone", "dark"), ("desktop", "light")])
def test_a_22_run_draws_its_deletes_and_inserts(browser, app_url, viewport, theme):
    page = open_page(browser, app_url, viewport, theme)
    page.evaluate(WATCH_JS)
    steps = generate(page)
    by_server = page.evaluate(DRAWN_JS)  # the finished run's last frame, drawn by the server
    stats = page.inner_text("#stats")
    assert "inserts" in stats and "deletes" in stats, stats
    deleting = page.evaluate(STEPS_WITH_JS, 'class="gone"')
    inserting = page.evaluate(STEPS_WITH_JS, 'data-state="insert"')
    assert deleting and inserting, (steps, deleting, inserting)

    assert page.evaluate(SCRUB_JS, deleting[0]) == deleting[0]
    gone = '#canvas .gone[data-state="delete"]'
    assert page.locator(gone).first.is_visible()
    line = page.evaluate(f"getComputedStyle(document.querySelector('{gone} .old')).textDecorationLine")
    assert "line-through" in line
    # the gap closes: the drawn width shrinks under half the struck-out text's own width (scrollWidth, which the
    # animation leaves alone: the width drawn before it may already be the closed one on a slow machine)
    page.wait_for_function(f"(el => el.getBoundingClientRect().width < el.scrollWidth / 2)"
                           f"(document.querySelector('{gone}'))", timeout=WAIT)
    ratios = contrast(page)
    assert page.evaluate(SCRUB_JS, inserting[0]) == inserting[0]
    assert page.locator('#canvas .tok[data-state="insert"]').first.is_visible()
    ratios |= {k: v for k, v in contrast(page).items() if v < ratios.get(k, 99)}
    assert "delete replaced text" in ratios and "insert key" in ratios and "delete key" in ratios, ratios
    low = {name: round(r, 2) for name, r in ratios.items() if r < AA}
    assert low == {}, f"{theme} theme on a {viewport}: text under {AA}:1: {low}"

    stage(page, "replay")
    first = min(deleting + inserting)  # played from the step before the first move to the first of each kind
    page.evaluate(SCRUB_JS, first - 1)
    page.click("#play")
    page.wait_for_function(f"Number(document.querySelector('#canvas').dataset.step) >= "
                           f"{max(deleting[0], inserting[0])}", timeout=WAIT)
    seen = page.evaluate("window.movesSeen")
    print(viewport, theme, steps, "steps; deleting at", deleting, "inserting at", inserting, "drawn:", seen)
    assert seen.get("replay") == {"delete": True, "insert": True}, seen
    page.click("#pause")
    for k in range(steps + 1):  # one patch at a time: each step's struck-out tokens go with their cells
        assert page.evaluate(SCRUB_JS, k) == k
    assert page.evaluate(DRAWN_JS) == by_server
    assert "deletes and inserts" in page.inner_text("#edit-log")  # its rows: tests/test_canvas22.py
    assert not page.said, page.said
    page.context.close()
