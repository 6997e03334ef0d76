"""How long a scrub takes to show: `python -m ui.playground.scrub_timing [--model DIR] [--scrubs 40] [--json]`.

Serves the playground (`app.py`, in a child process, on the embedded model unless `--model` says otherwise),
opens it in headless Chromium (Playwright, from requirements-dev.txt), makes one run (S, on a prompt in no
format the model knows, so it writes all 128 positions: about 150 forwards), and then moves the step
scrubber (`#step`) to `--scrubs` steps picked at random, as a drag does (a press, the range input's new
value and its `input` event, a release). Each time is measured in the page, from the press to the first
frame painted with the canvas (`#canvas`) at that step (`data-step`); after each scrub it waits until the
page is quiet, then checks that the canvas still shows that step (a late server answer must not draw
another one over it). Prints the median, the 90th percentile and the slowest, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import time
from contextlib import closing

from ..soak import serve

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PROMPT, MODE, GEN_LENGTH = "say hello please", "S", 128  # no format the model knows: it writes all 128
WAIT_MS = 120_000

# a hand on the scrubber (press, move, release, as a drag sends them): from the press to the first paint that
# shows `#canvas` at step k (in ms, measured by the page); the release is sent once that paint is done
SCRUB_JS = """
async (k) => {
  const range = document.querySelector('#step input[type=range]');
  const t0 = performance.now();
  range.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true}));
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  const shown = await new Promise((done) => {
    const check = () => {
      const c = document.querySelector('#canvas');
      if (c && Number(c.dataset.step) === k) requestAnimationFrame(() => done(performance.now() - t0));
      else requestAnimationFrame(check);
    };
    check();
  });
  range.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
  return shown;
}
"""


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(page, prompt: str = PROMPT, mode: str = MODE, gen_length: int = GEN_LENGTH) -> int:
    """One run to the end, no slow replay after it; returns its steps."""
    page.locator("#teach input").uncheck()
    page.fill("#prompt textarea", prompt)
    page.locator("#mode label", has_text=mode).first.click()
    box = page.locator("#gen-length input[type=number]")
    box.fill(str(gen_length))
    box.press("Enter")
    page.click("#generate")
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=WAIT_MS)
    return int(page.get_attribute("#canvas", "data-steps"))


def quiet(page, ms: int = 400) -> None:
    """Wait until no request of the page's queue is pending (then `ms` more)."""
    page.wait_for_function("!document.querySelector('.progress-text, .eta-bar')", timeout=WAIT_MS)
    page.wait_for_timeout(ms)


def measure(page, scrubs: int, seed: int = 0) -> dict:
    """Scrub `scrubs` times to random steps of the run on screen; the times (ms) and any step shown wrong."""
    steps = int(page.get_attribute("#canvas", "data-steps"))
    rng, times, wrong = random.Random(seed), [], []
    shown = steps
    for _ in range(scrubs):
        k = rng.choice([s for s in range(steps + 1) if s != shown])
        times.append(page.evaluate(SCRUB_JS, k))
        quiet(page)
        now = int(page.get_attribute("#canvas", "data-step"))
        if now != k:
            wrong.append({"asked": k, "shown": now})
        shown = k
    return {"steps": steps, "scrubs": scrubs, "median_ms": statistics.median(times),
            "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))], "max_ms": max(times),
            "times_ms": [round(t, 1) for t in times], "wrong": wrong}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a checkpoint directory (default: the embedded model)")
    parser.add_argument("--scrubs", type=int, default=40)
    parser.add_argument("--url", default=None, help="measure an app already served here instead")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = None if args.url else serve(port, args.model)
    url = args.url or f"http://127.0.0.1:{port}/"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url, wait_until="load")
            page.wait_for_selector("#prompt textarea", timeout=WAIT_MS)
            t = time.perf_counter()
            run_once(page)
            run_s = time.perf_counter() - t
            quiet(page)
            result = measure(page, args.scrubs) | {"run_s": round(run_s, 1)}
            browser.close()
    finally:
        if server is not None:
            server.kill()
            server.wait()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['scrubs']} scrubs over a run of {result['steps']} steps: median {result['median_ms']:.0f} ms, "
              f"90th percentile {result['p90_ms']:.0f} ms, slowest {result['max_ms']:.0f} ms; "
              f"{len(result['wrong'])} left the canvas at another step")


if __name__ == "__main__":
    main()
