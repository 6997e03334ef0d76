"""How long a scrub takes to show: `python -m ui.bench.scrub_timing [--tab TAB] [--scrubs 40] [--json]`.

Serves the playground (`app.py`, in a child process, on the embedded model unless `--model DIR` says otherwise),
opens it in headless Chromium (Playwright, from requirements-dev.txt) and puts a finished replay on screen,
as `--tab` says: `playground` (the default) makes one run (S, on a prompt in no format the model knows, so it
writes all 128 positions: about 150 forwards); `compare` runs S vs Q on that prompt (`#compare-step` moves
both canvases); `learn` plays the longest recorded lesson to its end (`#learn-step` moves its canvases and
its narration). It then moves that step scrubber to `--scrubs` steps picked at random, as a drag does (a
press, the range input's new value and its `input` event, a release). Each time is measured in the page,
from the press to the first frame painted with every canvas (and the narration) at that step (`data-step`;
a shorter run of two shows its last step); after each scrub it waits until the page is quiet, then checks
that they still show that step (a late server answer must not draw another one over it). Prints the
median, the 90th percentile and the slowest, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import time
from contextlib import closing
from typing import NamedTuple

from .. import ASSETS
from .soak import serve

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PROMPT, MODE, GEN_LENGTH = "say hello please", "S", 128  # no format the model knows: it writes all 128
WAIT_MS = 120_000

# a hand on the scrubber `#slider` (press, move to step k, release, as a drag sends them): from the press to the
# first paint that shows every element of `want` ([CSS selector, step], read from its data-step) at its step
# (in ms, measured by the page); the release is sent once that paint is done
SCRUB_TO_JS = """
async ([slider, k, want]) => {
  const range = document.querySelector('#' + slider + ' input[type=range]');
  const t0 = performance.now();
  range.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true}));
  range.value = String(k);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  const shown = await new Promise((done) => {
    const check = () => {
      const at = ([selector, step]) => Number(document.querySelector(selector)?.dataset.step) === step;
      if (want.every(at)) requestAnimationFrame(() => done(performance.now() - t0));
      else requestAnimationFrame(check);
    };
    check();
  });
  range.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
  return shown;
}
"""
SCRUB_JS = f"async (k) => ({SCRUB_TO_JS})(['step', k, [['#canvas', k]]])"  # the Playground's scrubber


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scrubber(NamedTuple):
    """A step scrubber and what it moves: (CSS selector, that element's last step) for each canvas or narration."""

    slider: str
    shows: tuple[tuple[str, int], ...]

    @property
    def steps(self) -> int:
        return max(n for _, n in self.shows)

    def want(self, k: int) -> list[list]:
        """Each element's step when the scrubber is at `k` (a shorter run shows its last step)."""
        return [[selector, min(k, n)] for selector, n in self.shows]


def run_once(page, prompt: str = PROMPT, mode: str = MODE, gen_length: int = GEN_LENGTH) -> int:
    """One run to the end, no slow replay after it; returns its steps."""
    page.locator("#teach input").uncheck()
    page.fill("#prompt textarea", prompt)
    page.locator("#mode label", has_text=mode).first.click()
    set_gen_length(page, gen_length)
    page.click("#generate")
    page.wait_for_function("/^(done|stopped)/.test(document.querySelector('#stats').innerText)", timeout=WAIT_MS)
    return int(page.get_attribute("#canvas", "data-steps"))


def set_gen_length(page, gen_length: int) -> None:
    box = page.locator("#gen-length input[type=number]")
    box.fill(str(gen_length))
    box.press("Enter")


def steps_of(page, selector: str) -> int:
    return int(page.get_attribute(selector, "data-steps"))


def playground(page) -> Scrubber:
    return Scrubber("step", (("#canvas", run_once(page)),))


def compare(page, prompt: str = PROMPT, gen_length: int = GEN_LENGTH) -> Scrubber:
    """S vs Q on the prompt, to the end."""
    page.fill("#prompt textarea", prompt)
    set_gen_length(page, gen_length)
    page.click("#run-compare")
    page.wait_for_function("document.querySelector('#diff .diff-key')", timeout=WAIT_MS)
    return Scrubber("compare-step", tuple((f"#{i}", steps_of(page, f"#{i}")) for i in ("canvas-s", "canvas-q")))


def learn(page) -> Scrubber:
    """The recorded lesson of the most forwards (assets/learn_trace.json), played to its end."""
    lessons = json.loads((ASSETS / "learn_trace.json").read_text(encoding="utf-8"))["lessons"]
    title = max(lessons, key=lambda lesson: max(len(run["records"]) for run in lesson["runs"]))["title"]
    page.get_by_role("tab", name="Learn").click()
    page.locator("#learn-run label", has_text=title).click()
    narration = "#learn-narration .narration"
    page.wait_for_function(f"document.querySelector({narration!r})?.dataset.step === "
                           "document.querySelector('#learn-step input[type=range]').max", timeout=WAIT_MS)
    canvases = [(f"#{i}", steps_of(page, f"#{i}")) for i in ("canvas-learn", "canvas-learn-b")]
    return Scrubber("learn-step", (*canvases, (narration, max(n for _, n in canvases))))


TABS = {"playground": playground, "compare": compare, "learn": learn}


def quiet(page, ms: int = 400) -> None:
    """Wait until no request of the page's queue is pending (then `ms` more)."""
    page.wait_for_function("!document.querySelector('.progress-text, .eta-bar')", timeout=WAIT_MS)
    page.wait_for_timeout(ms)


def measure(page, scrubber: Scrubber, scrubs: int, seed: int = 0) -> dict:
    """Scrub `scrubs` times to random steps of the replay on screen; the times (ms) and any step shown wrong."""
    steps = scrubber.steps
    rng, times, wrong = random.Random(seed), [], []
    shown = steps
    for _ in range(scrubs):
        k = rng.choice([s for s in range(steps + 1) if s != shown])
        times.append(page.evaluate(SCRUB_TO_JS, [scrubber.slider, k, scrubber.want(k)]))
        quiet(page)
        now = [[selector, int(page.get_attribute(selector, "data-step"))] for selector, _ in scrubber.shows]
        if now != scrubber.want(k):
            wrong.append({"asked": k, "shown": now})
        shown = k
    return {"steps": steps, "scrubs": scrubs, "median_ms": statistics.median(times),
            "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))], "max_ms": max(times),
            "times_ms": [round(t, 1) for t in times], "wrong": wrong}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a checkpoint directory (default: the embedded model)")
    parser.add_argument("--tab", choices=list(TABS), default="playground", help="whose scrubber (default: %(default)s)")
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
            scrubber = TABS[args.tab](page)
            run_s = time.perf_counter() - t
            quiet(page)
            result = measure(page, scrubber, args.scrubs) | {"tab": args.tab, "shows": scrubber.shows,
                                                              "run_s": round(run_s, 1)}
            browser.close()
    finally:
        if server is not None:
            server.kill()
            server.wait()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.tab}: {result['scrubs']} scrubs over a replay of {result['steps']} steps: median "
              f"{result['median_ms']:.1f} ms, 90th percentile {result['p90_ms']:.1f} ms, slowest "
              f"{result['max_ms']:.1f} ms; {len(result['wrong'])} left a canvas at another step")


if __name__ == "__main__":
    main()
