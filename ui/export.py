"""Exports of a run: the trace as JSON, and a self-contained HTML replay (one file, no network).

The replay embeds the canvas of every step, rendered by `ui.canvas` (the same renderer as the app),
with the stylesheet and a small player script (assets/replay.js) inlined.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from . import canvas
from .tables import stats_line
from llada.trace import Trace

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _script_json(value) -> str:
    """JSON safe to place inside a <script> element."""
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")


def replay_html(trace: Trace, title: str | None = None) -> str:
    """One HTML file that replays `trace` step by step in any browser, offline."""
    frames = [canvas.render(trace, k, legend=False) for k in range(trace.steps + 1)]  # one legend, above
    css = (ASSETS / "style.css").read_text()
    js = (ASSETS / "replay.js").read_text()
    title = title or f"{trace.model} · {trace.mode} · LLaDA2.1 decoding replay"
    text = trace.text or ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{css}</style></head>
<body class="replay">
<h1>{escape(title)}</h1>
<p class="prompt-line">Prompt: <code>{escape(trace.prompt)}</code></p>
<p id="stats">{escape(stats_line(trace))}</p>
<div class="player">
  <button id="play" type="button">▶ play</button>
  <input id="step" type="range" min="0" max="{trace.steps}" value="{trace.steps}">
  <span id="step-label"></span>
</div>
{canvas.legend_html()}
<div id="canvas-frame">{frames[-1]}</div>
<h2>Output</h2><pre class="output">{escape(text)}</pre>
<script type="application/json" id="frames">{_script_json(frames)}</script>
<script>{js}</script>
</body></html>
"""


def write_exports(trace: Trace, folder: Path) -> list[Path]:
    """trace.json and replay.html of `trace` in `folder`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"llada-{(trace.mode or 'run').replace(' ', '-')}"
    json_path, html_path = folder / f"{stem}-trace.json", folder / f"{stem}-replay.html"
    json_path.write_text(json.dumps(trace.to_dict(), ensure_ascii=False), encoding="utf-8")
    html_path.write_text(replay_html(trace), encoding="utf-8")
    return [json_path, html_path]
