"""Compare with two models in Chromium: the choice shows the second model and renames the button; the embedded
LLaDA2.1-format model and assets/model22 run one prompt side by side, each canvas with its numbers under it,
the 2.2 side's inserts and deletes counted there and in the table."""

from __future__ import annotations

import re

import pytest

from chromium import ARTIFACTS  # skips or fails without Chromium
from ui_helpers import launch_app  # noqa: E402

from ui.models import DEFAULT_MODEL, MODEL22, Models

WAIT = 90_000  # a loaded CI machine


@pytest.fixture(scope="module")
def app_url():
    demo, url = launch_app(Models([str(DEFAULT_MODEL), str(MODEL22)]))
    yield url
    demo.close()


def test_two_models_side_by_side(browser, app_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(WAIT)
    page.goto(app_url, wait_until="load")
    page.wait_for_selector("#prompt textarea", timeout=WAIT)
    assert not page.locator("#compare-model").is_visible()  # S vs Q first: one model, no second selector
    page.locator("#compare-versus label", has_text=re.compile(r"^\s*two models\s*$")).click()
    page.wait_for_selector("#compare-model", state="visible", timeout=WAIT)
    page.wait_for_function("document.querySelector('#run-compare').innerText.includes('Compare two models')",
                           timeout=WAIT)
    page.fill("#prompt textarea", "def square(febatbat):\n")
    page.click("#run-compare")
    page.wait_for_function("document.querySelector('#compare-verdict').innerText.includes('Both ran mode S')",
                           timeout=WAIT)
    left, right = page.inner_text("#canvas-s-stats"), page.inner_text("#canvas-q-stats")
    assert left.startswith("llada2-lease-moe") and "inserts" not in left
    assert right.startswith("llada2.2-cpu-moe") and re.search(r"inserts [1-9]\d* · deletes [1-9]", right), right
    table = page.inner_text("#compare-table")
    assert "llada2-lease-moe" in table and "llada2.2-cpu-moe" in table
    assert page.locator("#canvas-q .tok").count() > 0 and page.locator("#canvas-s .tok").count() > 0
    page.wait_for_selector("#chart-steps-compare .js-plotly-plot", timeout=WAIT)
    steps = page.inner_text("#chart-steps-compare")
    assert "inserted and deleted" in steps and "llada2.2-cpu-moe inserts (SPLIT)" in steps, steps
    page.locator("#compare").screenshot(path=str(ARTIFACTS / "compare-two-models.png"))
    page.close()
