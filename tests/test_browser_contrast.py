"""Every canvas token state reads at 4.5:1 or more (WCAG AA) in the light and the dark theme, measured in
real Chromium on the shipped model at every stage of a run.

One server serves both themes (Gradio's `?__theme=`). With the ghost on, two example runs cover the seven
states: MBE (Q, blocks of 4) drafts, then edits a finished block (MBE edit) while the next one decodes;
Careful (Q) leaves masks in the active block (the ghost guesses inside them) and edits a token twice (T2T).
While each runs, every frame the live canvas draws is measured; then the finished run, then each step
scrubbed to (step 0: the prompt and its masks, the steps between: drafts and edits). A text's contrast
is its computed colour against its ancestors' computed backgrounds composited down to the first opaque
one (tests/contrast.py); the failure names the state, the ratio and where it was seen.
Screenshots: tests/artifacts/contrast-{mbe,careful,ghost}-{light,dark}.png (not versioned).
"""

from __future__ import annotations

import pytest

from chromium import ARTIFACTS, VIEWPORTS  # skips or fails without Chromium
from contrast import AA, CANVAS_CONTRAST_JS
from ui_helpers import shipped_app

WAIT = 90_000  # ms: a state is awaited this long at most (a loaded machine is slow, never this slow)
EXAMPLES = ("MBE (Q, blocks of 4)", "Careful (Q)")
# a mask cell's only text is its ghost; the legend's key says "mask" on the mask's wash
STATES = {"prompt", "mask", "draft", "edit", "mbe", "stable", "ghost"}

# window.contrastSeen: {name: [lowest ratio, where]} over every measure; window.contrastStage names the
# stage; a measure runs once per drawn frame in which the canvas changed, and at once when asked
WATCH_JS = """() => {
  const measure = CANVAS_CONTRAST;
  window.contrastSeen = {};
  window.contrastFrames = {};
  window.contrastMeasure = () => {
    const canvas = document.querySelector('#canvas');
    if (!canvas || canvas.classList.contains('empty')) return;
    const where = `${window.contrastStage} step ${canvas.dataset.step}/${canvas.dataset.steps}`;
    window.contrastFrames[window.contrastStage] = (window.contrastFrames[window.contrastStage] || 0) + 1;
    for (const [name, r] of Object.entries(measure(canvas)))
      if (!(name in window.contrastSeen) || r < window.contrastSeen[name][0]) window.contrastSeen[name] = [r, where];
  };
  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; window.contrastMeasure(); });
  }).observe(document.querySelector('#canvas-box'), {subtree: true, childList: true, attributes: true,
                                                      characterData: true});
}""".replace("CANVAS_CONTRAST", CANVAS_CONTRAST_JS.strip())

# the scrubber's input event: the browser draws the step itself (assets/scrub.js), no server round trip
SCRUB_JS = """(k) => {
  const range = document.querySelector('#step input[type=range]');
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  return Number(document.querySelector('#canvas').dataset.step);
}"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"))


def open_page(browser, app_url, theme: str):
    page = browser.new_context(viewport=VIEWPORTS["desktop"]).new_page()
    page.set_default_timeout(WAIT)
    page.goto(f"{app_url}?__theme={theme}", wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    assert page.evaluate("document.body.classList.contains('dark')") == (theme == "dark")
    return page


def shot(label: str) -> str:
    return label.split()[0].lower()


def stage(page, name: str) -> None:
    page.evaluate(f"window.contrastStage = {name!r}")


def run_example(page, label: str) -> int:
    """Click an example, measuring every frame while it runs; returns the finished run's steps."""
    before = page.inner_text("#stats")
    stage(page, f"{label}: live")
    page.locator("#examples button", has_text=label).first.click()
    page.wait_for_function("(b) => { const t = document.querySelector('#stats').innerText;"
                           " return t !== b && /^(done|stopped)/.test(t); }", arg=before, timeout=WAIT)
    page.wait_for_function("window.lladaReplays && window.lladaReplays.canvas", timeout=WAIT)
    stage(page, f"{label}: finished")
    page.evaluate("window.contrastMeasure()")
    return int(page.get_attribute("#canvas", "data-steps"))


def scrub_every_step(page, label: str, steps: int) -> None:
    stage(page, f"{label}: scrubbed")
    for k in range(steps + 1):
        assert page.evaluate(SCRUB_JS, k) == k
        page.evaluate("window.contrastMeasure()")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_token_state_reads_at_aa_through_a_run(browser, app_url, theme):
    page = open_page(browser, app_url, theme)
    page.locator("#teach input").uncheck()  # no slow replay: the scrub below draws every step
    page.locator("#ghost input").check()
    page.evaluate(WATCH_JS)
    for label in EXAMPLES:
        steps = run_example(page, label)
        page.locator("#canvas").screenshot(path=str(ARTIFACTS / f"contrast-{shot(label)}-{theme}.png"))
        scrub_every_step(page, label, steps)
    page.evaluate(SCRUB_JS, 1)  # the careful run's first step: drafts, and ghosts in the masks left
    page.locator("#canvas").screenshot(path=str(ARTIFACTS / f"contrast-ghost-{theme}.png"))
    seen, frames = page.evaluate("window.contrastSeen"), page.evaluate("window.contrastFrames")
    page.context.close()
    print(theme, frames, {name: f"{r:.2f} ({where})" for name, (r, where) in sorted(seen.items())})
    assert all(frames.get(f"{label}: live") for label in EXAMPLES), frames  # frames drawn while running
    drawn = {name.split()[0] for name in seen if not name.endswith(" key")}  # in tokens, not the legend
    assert STATES - {"mask"} <= drawn and {f"{state} key" for state in STATES - {"ghost"}} <= set(seen), sorted(seen)
    assert any("×N" in name for name in seen), sorted(seen)  # an EOS run's count was drawn and measured
    low = {name: f"{r:.2f}:1 at {where}" for name, (r, where) in seen.items() if r < AA}
    assert low == {}, f"{theme} theme, text under {AA}:1: {low}"
