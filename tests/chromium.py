"""Chromium for the browser tests: Debian's package driven by Python Playwright.

Importing this module from a test module skips that module (with the reason) when the browser or
Playwright is missing, except under CI (CI=true), where a missing browser is a failure. The session's
one browser is the `browser` fixture of conftest.py; screenshots go to tests/artifacts/ (not versioned).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}

try:
    from playwright import sync_api
except ImportError:
    sync_api = None
MISSING = (f"chromium not found at {CHROMIUM} (apt-get install -y chromium)" if not Path(CHROMIUM).exists()
           else "playwright is not installed" if sync_api is None else None)
if MISSING and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    pytest.fail(f"the browser test cannot run under CI: {MISSING}", pytrace=False)
if MISSING:
    pytest.skip(MISSING, allow_module_level=True)

# two frames and a task later: an event's js (assets/scrub.js `lladaOrder`) runs a task after its trigger
SETTLED_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 0))))"
QUIET_JS = "() => window.lladaOrder.busy() === 0"


def quiet(page, timeout: float = 120_000) -> None:
    """Wait until no stop, press or replay tick is on its way in the page (ui/player.py): after a pause, the
    pause answered and the ticks sent before it drawn. Checked again a frame and a task later, since a click
    just made counts its event from then."""
    page.wait_for_function(QUIET_JS, timeout=timeout)
    page.evaluate(SETTLED_JS)
    page.wait_for_function(QUIET_JS, timeout=timeout)
