"""Poking the canvas in real Chromium, on the shipped model, on a phone: a tap on a generated token fills the
poke box, *poke and re-run* decodes the run again with that token masked after the last step (the block it
touches re-opened, so the run has more steps), the poked cell is marked in its own colour at every step
from the poke on, and the edit log lists the poke. A tap on a prompt token leaves the box as it was."""

from __future__ import annotations

import pytest

from chromium import ARTIFACTS  # skips or fails without Chromium
from test_browser_scrub import WAIT, open_page, run
from ui_helpers import shipped_app

# the position of the first generated token drawn on the canvas (frames replace #canvas: null-guarded)
FIRST_GENERATED_JS = """() => {
  const c = document.querySelector('#canvas');
  const toks = c ? Array.from(c.querySelectorAll('.seq .tok')) : [];
  const tok = toks.find(t => t.dataset.state !== 'prompt' && t.getClientRects().length > 0);
  return tok ? Number(tok.dataset.pos) : null;
}"""
# the re-run is in the page: its canvas has more steps than the run poked, and the poked cell is marked
RERUN_JS = """([pos, steps]) => {
  const c = document.querySelector('#canvas');
  return !!c && Number(c.dataset.steps) > steps && /^(done|stopped)/.test(document.querySelector('#stats').innerText)
    && !!c.querySelector(`.tok.poked[data-pos="${pos}"]`);
}"""


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    yield from shipped_app(tmp_path_factory.mktemp("explorer-cache"))


def test_a_tapped_token_is_poked_marked_and_the_run_decoded_again(browser, app_url):
    page = open_page(browser, app_url, "phone")
    steps = run(page, "176+771=", "S", 32)
    assert steps >= 1
    before = page.input_value("#poke-pos input")
    page.locator('#canvas .tok[data-state="prompt"]').last.tap()
    assert page.input_value("#poke-pos input") == before, before  # a prompt token is not offered for a poke
    pos = page.evaluate(FIRST_GENERATED_JS)
    assert pos is not None
    token = page.locator(f'#canvas .seq .tok[data-pos="{pos}"]')
    token.scroll_into_view_if_needed()
    token.tap()
    page.wait_for_function(f"document.querySelector('#poke-pos input')?.value === '{pos}'", timeout=WAIT)
    assert page.locator("#poke-how input[type=radio]:checked").get_attribute("value") == "mask it"
    page.locator("#poke-run").tap()
    page.wait_for_function(RERUN_JS, arg=[pos, steps], timeout=WAIT)
    assert page.inner_text("#error").strip() == ""
    rerun_steps = int(page.get_attribute("#canvas", "data-steps"))
    assert "poke" in page.inner_text("#edit-log")  # the edit log lists the poke
    page.evaluate("""(k) => {  // scrub to the poke's step (the browser draws it from the run's replay)
      const range = document.querySelector('#step input[type=range]');
      range.value = String(k);
      range.dispatchEvent(new Event('input', {bubbles: true}));
    }""", steps)
    page.wait_for_function(f"document.querySelector('#canvas')?.dataset.step === '{steps}'", timeout=WAIT)
    cell = page.locator(f'#canvas .seq .tok[data-pos="{pos}"]')
    assert cell.get_attribute("data-state") == "poke" and "poked after step" in cell.get_attribute("title")
    colour = cell.evaluate("t => getComputedStyle(t).outlineColor")
    assert colour.replace(" ", "") in ("rgb(13,148,136)",), colour  # --c-poke: its own colour
    assert rerun_steps > steps
    page.locator("#canvas").screenshot(path=str(ARTIFACTS / "phone-poke.png"))
    assert not [s for s in page.said if "rror" in s]
    page.context.close()
