"""A first visit in Chromium, on the shipped model, on a desktop and a phone, in light and dark themes.

What a visitor who only clicks sees: the prompt and Generate above the fold, examples that run when
clicked, the canvas in view, the run replayed slowly afterwards, a canvas that reads in either theme,
the confidence heatmap, S vs Q with a verdict, and the keyboard shortcut. Screenshots go to
tests/artifacts/ (not versioned); the README and docs/playground.md link the ones in docs/screenshots/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chromium import ARTIFACTS, VIEWPORTS  # skips or fails without Chromium
from ui_helpers import shipped_app

MODEL = Path(__file__).resolve().parents[1] / "assets" / "model"
THEMES = {"light": "?__theme=light", "dark": "?__theme=dark"}


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The app as a visitor meets it: the shipped model, the shipped budget, the app's theme and CSS."""
    yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"))


def open_page(browser, app_url, viewport: str, theme: str):
    page = browser.new_page(viewport=VIEWPORTS[viewport])
    page.set_default_timeout(90_000)  # clicks and reads wait this long for their element on a loaded machine
    page.goto(app_url + THEMES[theme], wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=60_000)
    return page


@pytest.fixture(scope="module")
def pages(browser, app_url):
    """`pages(viewport, theme)`: one page per viewport and theme, kept for the tests after the first visit (a page
    load costs Chromium ~2 CPU seconds)."""
    opened = {}

    def get(viewport: str, theme: str):
        if (viewport, theme) not in opened:
            opened[viewport, theme] = open_page(browser, app_url, viewport, theme)
        return opened[viewport, theme]

    yield get
    for page in opened.values():
        page.close()


def wait_done(page, timeout: int = 90_000) -> None:
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=timeout)


def luminance(page, selector: str, prop: str) -> float:
    rgb = page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}")
    r, g, b = (int(x) for x in re.findall(r"\d+", rgb)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("theme", list(THEMES))
def test_an_example_runs_and_replays_slowly(pages, viewport, theme):
    page = pages(viewport, theme)  # the first test on these pages: a first visit
    # above the fold, both read in one frame once the first layout has settled there
    page.wait_for_function("""height => ['#prompt textarea', '#generate']
        .every(h => (e => e !== null && e.getBoundingClientRect().top < height)(document.querySelector(h)))""",
                           arg=VIEWPORTS[viewport]["height"], timeout=60_000)
    page.locator("#examples button", has_text="Code (S)").first.click()
    wait_done(page)
    assert page.input_value("#prompt textarea") == "def cube(batpami):\n"
    output = page.input_value("#output textarea")
    assert output == "    return batpami * batpami * batpami\n"  # the shipped model's answer, S mode
    # the slow replay starts from step 0 and walks forward on its own
    # (the canvas element is replaced as frames arrive: each wait reads it afresh and allows a moment without it)
    page.wait_for_function("(c => c && Number(c.dataset.step) >= 1)(document.querySelector('#canvas'))",
                           timeout=60_000)
    page.wait_for_function("(c => c && c.getBoundingClientRect().top < window.scrollY + window.innerHeight)"
                           "(document.querySelector('#canvas'))", timeout=60_000)  # the canvas is in view
    ink, paper = luminance(page, "#canvas", "color"), luminance(page, "#canvas", "backgroundColor")
    assert (ink > paper + 0.4) if theme == "dark" else (paper > ink + 0.4)  # text reads on its card
    page.wait_for_selector("#chart-confidence .js-plotly-plot", timeout=60_000)
    assert "1,024 forwards per run and 30 s per request" in page.inner_text("#budget-note")  # the shipped budget
    page.screenshot(path=str(ARTIFACTS / f"first-visit-{viewport}-{theme}.png"))


def test_compare_shows_each_presets_block_and_a_verdict(pages):
    page = pages("phone", "light")  # after its example ran
    page.fill("#prompt textarea", "176+771=")
    page.click("#run-compare")
    page.wait_for_function("document.querySelector('#compare-verdict').innerText.includes('forwards')",
                           timeout=90_000)
    verdict = page.inner_text("#compare-verdict")
    assert re.match(r"S: .*forwards.* \(TPF [\d.]+ vs [\d.]+\), (both right|S \w+, Q \w+|both wrong)", verdict)
    table = page.inner_text("#compare-table")
    presets = json.loads((MODEL / "presets.json").read_text())
    for mode in ("S", "Q"):  # each run with its own preset's block (the card's)
        assert str(presets[mode]["block_length"]) in table
    assert "right" in table
    # stacked on a phone: both boxes are read in one frame, so a canvas still settling cannot tear the reading
    page.wait_for_function("""() => {
        const [a, b] = ['#canvas-s', '#canvas-q'].map(i => document.querySelector(i));  // frames replace them
        if (a === null || b === null) return false;
        const [s, q] = [a.getBoundingClientRect(), b.getBoundingClientRect()];
        return s.height > 0 && q.top >= s.bottom - 1;
    }""", timeout=90_000)
    page.locator("#compare").screenshot(path=str(ARTIFACTS / "compare-phone.png"))


def test_keyboard_unicode_and_typed_ranges(browser, app_url):
    page = open_page(browser, app_url, "desktop", "dark")
    page.fill("#prompt textarea", "Héllo ✓ 176+771=")
    page.press("#prompt textarea", "Control+Enter")
    wait_done(page)
    prompt_text = "".join(page.locator("#canvas .tok[data-state=prompt]").all_inner_texts()).replace("·", " ")
    assert prompt_text == "Héllo ✓ 176+771="  # split byte-level characters are joined, nothing shows as �
    box = page.locator("#gen-length input[type=number]")
    box.fill("5000")
    box.press("Enter")
    page.wait_for_selector("#range-note:not([hidden])", timeout=60_000)
    assert "5000 is outside the allowed range" in page.inner_text("#range-note")
    page.close()


def test_a_score_tpf_point_loads_into_the_playground(pages):
    from test_browser_explorer import run_small_sweep

    page = pages("desktop", "light")  # after its example ran
    page.get_by_role("tab", name="Score | TPF").click()
    page.wait_for_selector("#explorer-run", timeout=60_000)
    run_small_sweep(page, 180_000)
    page.screenshot(path=str(ARTIFACTS / "explorer-shipped-model.png"), full_page=True)
    row = page.locator("#explorer-table .virtual-row").filter(has_text="Q").first  # the model's Q preset
    row.locator("[role=gridcell]").nth(2).click()
    page.wait_for_selector("#tau-mask", state="visible", timeout=60_000)  # back on the playground
    q = json.loads((MODEL / "presets.json").read_text())["Q"]
    page.wait_for_function(f"Number(document.querySelector('#tau-mask input[type=number]').value) == {q['threshold']}",
                           timeout=60_000)
    assert page.locator("#block-length input[type=number]").input_value() == str(q["block_length"])  # Q's own block
    assert page.locator("#mode input[value='Custom']").is_checked()
