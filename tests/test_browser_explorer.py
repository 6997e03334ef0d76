"""The Score | TPF explorer in real Chromium: run a tiny sweep, watch its progress, load a point into the playground.

The app here is a gr.Blocks with the explorer's tab beside a stand-in playground tab (real components with
the playground's elem_ids: #mode, #tau-mask, #edit-on, #tau-edit, #mbe, #block-length, #model), wired by
`ui.explorer.view.wire` exactly as ui/demo.py wires it. Needs the Debian `chromium` package at
/usr/bin/chromium and Python Playwright; without them the module skips with the reason, except under CI
(CI=true), where a missing browser is a failure. Screenshots go to tests/artifacts/ (not versioned).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from chromium import ARTIFACTS, VIEWPORTS  # skips or fails without Chromium

from ui_helpers import serve  # noqa: E402


GRID = {"tau_masks": ["0.5", "0.9"], "tau_edits": ["off", "0.5"], "tasks": ["add"], "n": 1, "block_length": 8}
POINTS = 11  # 2 τ_mask × 2 τ_edit with MBE off, × 1 with MBE on (editing on), then S, Q (MBE off, on) and M2T
FAST_PRESETS = {mode: {"block_length": 8, "max_post_steps": 2} for mode in ("S", "Q", "M2T")}


def explorer_app(model_dir: Path, cache_dir: Path):
    """Tabs: a stand-in playground (the real elem_ids) and the explorer, wired as ui/demo.py wires it."""
    import gradio as gr

    from ui.explorer import view as explorer
    from ui.models import Models
    from ui.settings import MODES

    models = Models([str(model_dir)])
    with gr.Blocks(title="explorer test") as demo:
        with gr.Tabs() as tabs:
            with gr.Tab("Playground", id="playground"):
                pg = explorer.PointTargets(
                    model=gr.Dropdown(models.choices(), value=models.default, label="Model", elem_id="model"),
                    mode=gr.Radio(list(MODES), value="S", label="Mode", elem_id="mode"),
                    tau_mask=gr.Slider(0, 1, value=0.5, step=0.01, label="τ_mask", elem_id="tau-mask"),
                    edit=gr.Checkbox(value=True, label="editing (T2T) on", elem_id="edit-on"),
                    tau_edit=gr.Slider(0, 1, value=0.0, step=0.01, label="τ_edit", elem_id="tau-edit"),
                    mbe=gr.Checkbox(value=False, label="MBE", elem_id="mbe"),
                    block_length=gr.Slider(4, 128, value=32, step=4, label="block length", elem_id="block-length"))
            with gr.Tab("Score | TPF", id="explorer") as tab:
                parts = explorer.build_view(models, defaults=GRID)
        explorer.wire(models, parts, pg, tabs, tab=tab, cache_dir=cache_dir)
    return demo


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("explorer_cache")


@pytest.fixture(scope="module")
def app_url(tiny_model_dir, tmp_path_factory, cache_dir):
    """The app on a copy of the tiny model with presets of its own (short blocks: quick preset points)."""
    from llada.presets import write_presets

    model = Path(shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("explorer") / "tiny-with-presets"))
    write_presets(FAST_PRESETS, model)
    demo = explorer_app(model, cache_dir)
    yield serve(demo)
    demo.close()


def open_explorer(browser, url: str, viewport: str = "desktop", dark: bool = False):
    page = browser.new_page(viewport=VIEWPORTS[viewport])
    page.set_default_timeout(90_000)  # clicks and reads wait this long for their element on a loaded machine
    page.goto(url + ("?__theme=dark" if dark else ""), wait_until="load")
    page.get_by_role("tab", name="Score | TPF").click()
    page.wait_for_selector("#explorer-run", timeout=60_000)
    return page


def tick(page, elem_id: str, keep: set[str]) -> None:
    """Leave exactly the choices `keep` of a checkbox group checked."""
    for box in page.locator(f"#{elem_id} label").all():
        checked = box.locator("input").is_checked()
        if (box.inner_text().strip() in keep) != checked:
            box.click()


def open_more(page) -> None:
    """Open the accordion that holds the model, tasks, items and block length."""
    if not page.locator("#explorer-n").is_visible():
        page.get_by_text("Model, tasks, items and block length").click()
        page.wait_for_selector("#explorer-n", state="visible", timeout=60_000)


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def table_rows(page) -> int:
    """Rows of the points table (Gradio's Dataframe: a grid whose aria-rowcount counts the header too)."""
    return int(page.get_attribute("#explorer-table [role=grid]", "aria-rowcount")) - 1


def progress(page) -> str:
    return page.inner_text("#explorer-progress")


def wait_progress(page, pattern: str, timeout: float = 240_000) -> None:
    page.wait_for_function(f"/{pattern}/.test(document.querySelector('#explorer-progress').innerText)",
                           timeout=timeout)


def run_small_sweep(page, timeout: float = 240_000) -> None:
    """One point per preset and the τ_mask 0.5 / τ_edit 0.5 cell, MBE off, 2 addition items: a sweep in seconds."""
    tick(page, "explorer-tau-mask", {"0.5"})
    tick(page, "explorer-tau-edit", {"0.5"})
    tick(page, "explorer-mbe", {"off"})
    open_more(page)
    tick(page, "explorer-tasks", {"add"})
    set_number(page, "explorer-n", 2)
    page.click("#explorer-run")
    wait_progress(page, "^Done", timeout)


def measured(page) -> None:
    """The grid's points on screen: from the cache when opening the tab found them, else swept now."""
    wait_progress(page, "come from the cache|No point|cached;", 60_000)
    if "come from the cache" not in progress(page):
        page.click("#explorer-run")
        wait_progress(page, "^Done")


def chart_points(page) -> list[list]:
    """[x, y, settings] of every marker of the chart (the front lines excluded), once Plotly has drawn them."""
    page.wait_for_function("(document.querySelector('#explorer-chart .js-plotly-plot') || {}).data?.length > 0",
                           timeout=60_000)
    return page.evaluate("""() => document.querySelector('#explorer-chart .js-plotly-plot').data
        .filter(t => t.mode !== 'lines').flatMap(t => t.x.map((x, k) => [x, t.y[k], t.customdata[k]]))""")


def test_a_sweep_streams_progress_then_a_chart_a_table_and_a_csv(browser, app_url, cache_dir):
    for path in cache_dir.glob("*.json"):
        path.unlink()  # whatever ran before, this sweep decodes (and the tests after it read its points)
    page = open_explorer(browser, app_url)
    wait_progress(page, "No point of this grid")
    page.click("#explorer-run")
    wait_progress(page, "^Sweeping .*: \\d+ of 11 points · \\d+ of 11 decodes", 60_000)
    wait_progress(page, "^Done: 11 of 11 points")
    assert len(chart_points(page)) == POINTS
    names = page.evaluate("document.querySelector('#explorer-chart .js-plotly-plot').data.map(t => t.name)")
    assert {"MBE off", "MBE on", "MBE off: Pareto front", "MBE on: Pareto front", "presets (S, Q, M2T)"} <= set(names)
    assert table_rows(page) == POINTS
    assert page.locator('#explorer-csv a[download$=".csv"]').count() == 1
    page.screenshot(path=str(ARTIFACTS / "explorer-sweep-done.png"), full_page=True)
    page.close()


def test_a_second_visit_shows_the_cached_points_at_once(browser, app_url, cache_dir):
    if not any(cache_dir.glob("*.json")):  # run alone: a first visit measures the grid (after the sweep test: done)
        measured(first := open_explorer(browser, app_url))
        first.close()
    page = open_explorer(browser, app_url)
    wait_progress(page, "All 11 points of this grid come from the cache", 90_000)
    assert table_rows(page) == POINTS and len(chart_points(page)) == POINTS
    page.close()


def test_a_table_row_loads_its_settings_into_the_playground(browser, app_url):
    page = open_explorer(browser, app_url)
    measured(page)
    row = page.locator("#explorer-table .virtual-row").filter(has_text="MBE on").filter(has_text="0.9").first
    cells = row.locator("[role=gridcell]").all_inner_texts()
    tau_mask, tau_edit, block = cells[2].strip(), cells[3].strip(), cells[4].strip()
    row.locator("[role=gridcell]").nth(2).click()
    page.wait_for_selector("#tau-mask", state="visible", timeout=60_000)  # the playground tab is shown
    page.wait_for_function(f"document.querySelector('#tau-mask input[type=number]').value == '{tau_mask}'",
                           timeout=60_000)
    assert page.locator("#tau-edit input[type=number]").input_value() == tau_edit
    assert page.locator("#block-length input[type=number]").input_value() == block
    assert page.locator("#mbe input").is_checked() and page.locator("#edit-on input").is_checked()
    assert page.locator("#mode input[value='Custom']").is_checked()
    page.close()


def test_a_chart_click_loads_its_point(browser, app_url):
    page = open_explorer(browser, app_url)
    measured(page)
    chart_points(page)
    # the chart stands still (same box over half a second) before a pixel of it is read and clicked
    page.wait_for_function("""() => {
        const r = document.querySelector('#explorer-chart .js-plotly-plot').getBoundingClientRect();
        const box = [r.left, r.top, r.width, r.height].join(), same = window.chartBox === box;
        window.chartBox = box;
        return same;
    }""", polling=500, timeout=90_000)
    # the pixel of a point no other point covers, by Plotly's own axis transforms
    where = page.evaluate("""() => {
        const gd = document.querySelector('#explorer-chart .js-plotly-plot');
        const all = gd.data.filter(t => t.mode !== 'lines')
            .flatMap(t => t.x.map((x, k) => [x, t.y[k], t.customdata[k]]));
        const [x, y, settings] = all.find(([x, y]) => all.filter(o => o[0] === x && o[1] === y).length === 1);
        const box = gd.getBoundingClientRect(), size = gd._fullLayout._size;
        return {x: box.left + size.l + gd._fullLayout.xaxis.d2p(x), y: box.top + size.t + gd._fullLayout.yaxis.d2p(y),
                settings};
    }""")
    tau_mask, tau_edit, mbe, block = where["settings"]
    page.mouse.move(where["x"], where["y"])
    page.mouse.click(where["x"], where["y"])
    page.wait_for_selector("#tau-mask", state="visible", timeout=60_000)
    page.wait_for_function("document.querySelector('#mode input[value=\"Custom\"]').checked", timeout=60_000)
    assert float(page.locator("#tau-mask input[type=number]").input_value()) == tau_mask
    assert page.locator("#edit-on input").is_checked() == (tau_edit != "off")
    assert page.locator("#mbe input").is_checked() == mbe
    assert int(page.locator("#block-length input[type=number]").input_value()) == block
    page.close()


def test_stop_ends_a_sweep_and_keeps_its_points(browser, app_url):
    page = open_explorer(browser, app_url)
    open_more(page)
    for n in (25, 24, 23):  # items no other test uses; a sweep that ends before the stop lands is tried anew
        found = stop_a_sweep(page, n)
        if found < POINTS:
            break
    assert 0 < found < POINTS and table_rows(page) == found and len(chart_points(page)) == found
    page.close()


def stop_a_sweep(page, n: int) -> int:
    """Sweep the default grid on `n` fresh items, stop it after its first point: the points it shows then."""
    set_number(page, "explorer-n", n)
    wait_progress(page, "No point of this grid", 90_000)
    page.click("#explorer-run")
    wait_progress(page, "^Sweeping .*: [1-9]\\d* of 11 points", 240_000)
    page.click("#explorer-stop")
    wait_progress(page, "^Stopped", 90_000)
    said = progress(page)
    counted = re.search(r"(\d+) of 11 points|All (11) points", said)
    assert counted, said
    return int(counted.group(1) or counted.group(2))


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_screenshots(browser, app_url, dark):
    """The explorer in each theme, on a desktop and then on a phone: every point drawn, the page in the theme
    asked for, and on the phone no sideways scroll."""
    page = open_explorer(browser, app_url, "desktop", dark)
    measured(page)
    assert len(chart_points(page)) == POINTS and table_rows(page) == POINTS
    assert page.evaluate("document.body.classList.contains('dark')") == dark
    theme = "dark" if dark else "light"
    page.screenshot(path=str(ARTIFACTS / f"explorer-desktop-{theme}.png"), full_page=True)
    page.set_viewport_size(VIEWPORTS["phone"])
    page.wait_for_function("document.querySelector('#explorer-chart .main-svg').getBoundingClientRect().width"
                           " <= window.innerWidth", timeout=60_000)  # Plotly resizes the chart to the new width
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(ARTIFACTS / f"explorer-phone-{theme}.png"), full_page=True)
    page.close()
