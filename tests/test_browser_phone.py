"""The playground on a phone (390×844) and in both themes, in real Chromium, on the shipped model.

* before the first run every empty panel says what will appear in it (canvas, stats, charts, edit log,
  S vs Q, exports, output);
* the tables' key columns are read without a sideways swipe: the edit log's kind and p, the S vs Q answer
  and TPF, the explorer's accuracy and TPF; no chart title sits under the Plotly toolbar;
* a tap on a token shows its details in a panel (a phone has no hover), and the arrow keys do the same;
* a picked Learn lesson scrolls into view;
* every token's text, the struck-through text an edit replaced included, keeps 4.5:1 contrast against the
  wash it is drawn on, computed from the computed styles, in the light and the dark theme;
* the explorer's chart sits on the page's own background with the theme's ink.

Most tests share one page per viewport and theme, in file order (`pages`); each opens the tab it reads.
Screenshots go to tests/artifacts/phone-*.png (not versioned).
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from chromium import ARTIFACTS, VIEWPORTS  # skips or fails without Chromium
from contrast import TEXT_CONTRAST_JS as CONTRAST_JS
from ui_helpers import shipped_app

THEMES = {"light": "?__theme=light", "dark": "?__theme=dark"}
WAIT = 90_000  # ms: a state is awaited this long at most (a loaded CI machine is slow, never this slow)
EXAMPLE = "Edit (S): a garbled name in the draft, edited in the next forward"

@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """The app as a visitor meets it: the shipped model, its lessons, the shipped budget, the app's CSS."""
    from ui.learn import lessons

    yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"), recordings=lessons.load_recordings())


def open_page(browser, app_url, viewport: str = "phone", theme: str = "light"):
    context = browser.new_context(viewport=VIEWPORTS[viewport], has_touch=viewport == "phone")
    page = context.new_page()
    page.set_default_timeout(WAIT)  # clicks and reads too: a loaded machine answers slowly
    page.goto(app_url + THEMES[theme], wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    return page


def close(page) -> None:
    page.context.close()


@pytest.fixture(scope="module")
def pages(browser, app_url):
    """`pages(viewport, theme)`: one page per viewport and theme, shared by the tests in file order (a page load
    costs Chromium ~2 CPU seconds). Each test opens the tab it reads; the first on a page finds it unvisited."""
    opened = {}

    def get(viewport: str = "phone", theme: str = "light"):
        if (viewport, theme) not in opened:
            opened[viewport, theme] = open_page(browser, app_url, viewport, theme)
        return opened[viewport, theme]

    yield get
    for page in opened.values():
        close(page)


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def run_example(page, label: str = EXAMPLE) -> None:
    page.locator("#examples button", has_text=label.split(":")[0]).first.click()
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=WAIT)


def after(page, selector: str) -> str:
    """The text a panel's ::after hint shows, once it shows one ('' when none within WAIT).

    Waits for the hint rather than reading the first frame: on a loaded machine a panel and its
    stylesheet may not be drawn yet when the prompt box already is."""
    read = f"""() => {{
        const e = document.querySelector({selector!r});
        const c = e ? getComputedStyle(e, '::after').content : 'none';
        return c === 'none' || c === 'normal' ? '' : c;
    }}"""
    try:
        page.wait_for_function(f"({read})() !== ''", timeout=WAIT)
    except PlaywrightTimeout:
        return ""
    return page.evaluate(read)


def unreadable_columns(page, elem_id: str, names: list[str]) -> list[str]:
    """The columns of `names` whose header or first cell is not wholly inside the table's visible width."""
    return page.evaluate(f"""() => {{
        const wrap = document.querySelector('#{elem_id} .table-wrap').getBoundingClientRect();
        const right = Math.min(wrap.right, window.innerWidth), left = Math.max(wrap.left, 0);
        const heads = [...document.querySelectorAll('#{elem_id} th')];
        return {names!r}.filter(name => {{
            const k = heads.findIndex(h => h.innerText.trim() === name);
            if (k < 0) return true;
            const first = '#{elem_id} [role=gridcell][data-row="0"][data-col="' + k + '"]';
            const cells = [heads[k], document.querySelector(first)];
            return cells.some(c => {{
                if (!c || !c.getClientRects().length) return true;
                const r = c.getBoundingClientRect();
                return r.left < left - 1 || r.right > right + 1 || !c.innerText.trim();
            }});
        }});
    }}""")


# ---- before the first run ---------------------------------------------------------------------------------

@pytest.mark.parametrize("theme", list(THEMES))
def test_every_empty_panel_says_what_will_appear(pages, theme):
    page = pages("phone", theme)  # the first test on these pages: nothing has run
    assert "press Generate" in page.inner_text("#canvas .hint")
    assert page.inner_text("#stats").startswith("No run yet: press Generate")
    assert "Compare S vs Q" in page.inner_text("#canvas-s .hint") and "Q run" in page.inner_text("#canvas-q .hint")
    assert page.get_attribute("#output textarea", "placeholder").startswith("The decoded text appears here")
    for chart in ("chart-tps", "chart-tpf", "chart-steps", "chart-confidence", "chart-tps-compare",
                  "chart-tpf-compare", "chart-steps-compare", "export-files"):
        assert len(after(page, f"#{chart} > .empty")) > 30, chart
        assert page.locator(f"#{chart}").bounding_box()["height"] < 160, chart  # a line of text, no blank box
    assert "each T2T and MBE edit" in after(page, "#edit-log .no-rows")
    assert "Compare S vs Q" in after(page, "#compare-table .no-rows")
    blank = page.evaluate("""() => [...document.querySelectorAll('#tabs .block[id]')].filter(b => {
        if (!b.getClientRects().length || b.getBoundingClientRect().height < 24) return false;
        const hinted = [...b.querySelectorAll('*')].some(e => !['none', 'normal'].includes(
            getComputedStyle(e, '::after').content));
        return !b.innerText.trim() && !hinted && !b.querySelector('[placeholder]:not([placeholder=""])');
    }).map(b => b.id)""")
    assert blank == []  # no visible panel of the page is blank space
    page.screenshot(path=str(ARTIFACTS / f"phone-empty-{theme}.png"), full_page=True)


# ---- a phone after a run -----------------------------------------------------------------------------------

def test_tables_and_charts_read_on_a_phone(pages):
    page = pages()
    tab(page, "Playground")
    run_example(page)
    page.wait_for_selector("#edit-log [role=gridcell]", timeout=WAIT)
    assert unreadable_columns(page, "edit-log", ["step", "kind", "p", "old"]) == []
    page.locator("#edit-log").screenshot(path=str(ARTIFACTS / "phone-edit-log.png"))
    page.wait_for_selector("#chart-confidence .js-plotly-plot", timeout=WAIT)
    covered = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].filter(plot => {
        const bar = plot.querySelector('.modebar-container'), title = plot.querySelector('.gtitle');
        if (!bar || !title || !bar.getClientRects().length) return false;
        const a = bar.getBoundingClientRect(), b = title.getBoundingClientRect();
        return a.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    }).map(plot => plot.closest('[id]').id)""")
    assert covered == []  # the Plotly toolbar covers no chart title
    titles = page.evaluate("""() => [...document.querySelectorAll('#tabs .js-plotly-plot .gtitle')].map(t => {
        const r = t.getBoundingClientRect(), box = t.closest('.js-plotly-plot').getBoundingClientRect();
        return r.right <= box.right + 1 && r.left >= box.left - 1;
    })""")
    assert titles and all(titles)  # every title fits its chart's width
    page.locator("#chart-confidence").screenshot(path=str(ARTIFACTS / "phone-heatmap.png"))

    page.click("#run-compare")
    page.wait_for_function("document.querySelector('#compare-verdict').innerText.includes('forwards')",
                           timeout=WAIT)
    page.wait_for_selector("#compare-table [role=gridcell]", timeout=WAIT)
    assert unreadable_columns(page, "compare-table", ["run", "answer", "TPF", "forwards", "edits"]) == []
    page.locator("#compare-table").screenshot(path=str(ARTIFACTS / "phone-compare-table.png"))


def test_explorer_accuracy_and_tpf_read_on_a_phone(pages):
    from test_browser_explorer import run_small_sweep

    page = pages()
    tab(page, "Score | TPF")
    page.wait_for_selector("#explorer-run", timeout=WAIT)
    run_small_sweep(page, 240_000)
    page.wait_for_selector("#explorer-table [role=gridcell]", timeout=WAIT)
    assert unreadable_columns(page, "explorer-table", ["series", "τ_mask", "τ_edit", "accuracy %", "TPF"]) == []
    page.locator("#explorer-table").screenshot(path=str(ARTIFACTS / "phone-explorer-table.png"))
    page.locator("#explorer-chart").screenshot(path=str(ARTIFACTS / "phone-explorer-chart.png"))


def test_a_tap_or_the_arrow_keys_show_a_tokens_details(browser, app_url):
    page = open_page(browser, app_url)  # its own: the example's replay from its start
    run_example(page)
    page.click("#pause")
    deadline = time.monotonic() + WAIT / 1000  # a press that comes before the run's replay is in the page
    while True:                                # does nothing: press again until the edit is drawn
        page.click("#next-edit")  # the step of the run's edit: its token is drawn old → new
        try:
            page.wait_for_selector('#canvas .tok[data-state="edit"]', timeout=5_000)
            break
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise
    edit = page.locator('#canvas .tok[data-state="edit"]').first
    edit.scroll_into_view_if_needed()
    edit.tap()
    panel = page.locator("#canvas .tok-pop")
    panel.wait_for(state="visible", timeout=WAIT)
    shown = panel.inner_text()
    assert f"#{edit.get_attribute('data-pos')}" in shown and "replaced" in shown and "τ_edit" in shown
    box = panel.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= VIEWPORTS["phone"]["width"]  # on screen, no swipe
    assert page.evaluate("""() => {  // drawn on top: the panel's middle is the panel, not what lies under it
        const r = document.querySelector('#canvas .tok-pop').getBoundingClientRect();
        return document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2).closest('.tok-pop') !== null;
    }""")
    page.screenshot(path=str(ARTIFACTS / "phone-token-details.png"))
    page.locator("#stats").tap()  # a tap elsewhere closes it
    panel.wait_for(state="hidden", timeout=WAIT)

    page.focus("#canvas .seq")  # the sequence takes the focus; the arrow keys walk its drawn tokens
    page.keyboard.press("Home")
    panel.wait_for(state="visible", timeout=WAIT)
    assert panel.inner_text().startswith('#0 "')
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.querySelector('#canvas .tok-pop').innerText.startsWith('#1 ')", timeout=WAIT)
    assert page.locator("#canvas .tok.picked").get_attribute("data-pos") == "1"
    page.keyboard.press("Escape")
    panel.wait_for(state="hidden", timeout=WAIT)
    close(page)


def test_a_picked_lesson_plays_in_view(pages):
    page = pages()
    tab(page, "Learn")
    page.wait_for_selector("#canvas-learn .tok", timeout=WAIT)
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#learn-run label").nth(2).click()
    page.wait_for_function("""() => {
        const top = document.querySelector('#canvas-learn-box').getBoundingClientRect().top;
        return top >= -1 && top < window.innerHeight / 2;
    }""", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "phone-learn-picked.png"))


# ---- both themes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("theme", list(THEMES))
def test_token_text_keeps_its_contrast_on_every_wash(pages, theme):
    from test_browser_learn import first_step, hold, pick
    from ui.learn import lessons as recorded

    lessons = {r.idea: r for r in recorded.load_recordings().values()}
    page = pages("desktop", theme)
    tab(page, "Learn")
    page.wait_for_selector("#canvas-learn .tok", timeout=WAIT)
    seen: dict[str, float] = {}
    for idea, state in (("edit", "edit"), ("mbe", "mbe")):
        pick(page, lessons[idea])
        hold(page, first_step(lessons[idea].runs[-1], state) - 1)  # the next edit is one of this kind
        page.click("#learn-next-edit")
        page.wait_for_selector(f'.canvas[id^=canvas-learn] .tok[data-state="{state}"] .old', timeout=WAIT)
        texts = page.locator(".canvas[id^=canvas-learn] .tok:not(.cut) :is(.txt, .old, .new)")
        for k in range(texts.count()):
            el = texts.nth(k)
            if not el.inner_text().strip():
                continue
            name = el.evaluate("e => e.closest('.tok').dataset.state + ' ' + e.className")
            seen[name] = min(seen.get(name, 99.0), el.evaluate(CONTRAST_JS))
    page.locator("#learn").screenshot(path=str(ARTIFACTS / f"contrast-{theme}.png"))
    assert {"edit old", "edit new", "mbe old", "mbe new", "prompt txt", "stable txt"} <= set(seen)
    low = {name: round(c, 2) for name, c in seen.items() if c < 4.5}
    assert low == {}, f"text under 4.5:1 in the {theme} theme: {low} (all: {seen})"


@pytest.mark.parametrize("theme", list(THEMES))
def test_explorer_chart_follows_the_theme(pages, theme):
    page = pages("desktop", theme)
    tab(page, "Score | TPF")
    page.wait_for_selector("#explorer-chart .js-plotly-plot .gtitle", timeout=WAIT)
    ink = page.eval_on_selector("#explorer-chart .gtitle", f"el => ({CONTRAST_JS})(el, getComputedStyle(el).fill)")
    black = page.eval_on_selector("#explorer-chart .main-svg", f"el => ({CONTRAST_JS})(el, 'rgb(0, 0, 0)')")
    paper = page.eval_on_selector("#explorer-chart .main-svg", "e => getComputedStyle(e).backgroundColor")
    page.locator("#explorer-chart").screenshot(path=str(ARTIFACTS / f"explorer-chart-{theme}.png"))
    assert paper in ("rgba(0, 0, 0, 0)", "transparent")  # the chart draws no white sheet of its own
    assert ink >= 4.5  # its title reads on the page behind it
    assert (black < 4.5) == (theme == "dark")  # black text would not read on the chart: its backdrop is dark
