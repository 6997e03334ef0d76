"""Exports of a run: the trace as JSON, and a self-contained HTML replay (one file, no network).

The replay holds the canvas before the first forward (rendered by `ui.canvas`, the app's own renderer)
and one patch per step (`ui.canvas.patch`: the cells that step changed), with the stylesheet and the
players (assets/canvas.js, assets/replay.js) and the token details (assets/tokens.js: a tap or a click on a
token, or the arrow keys, show what it is; a phone has no hover) inlined. Its size grows with the changes of
the run, not with steps x positions: a 1,000-forward run stays a few megabytes.

Exports are written into a folder of their own under the system's temporary directory; `ExportDir`
deletes the folders of earlier exports once they are a minute old (Gradio has copied them into its cache
at once, and serves that copy). Gradio's copies are deleted `KEEP_S` after they were made (ui/demo.py
`CACHE_SWEEP`), so clicking Export never piles files up: the disk holds at most the last few minutes'
exports, however busy the app. Gradio's own sweep (6.x) walks each component's set of cached files while
other threads add to it; the first export made during a sweep ended the sweeping for good ("Set changed
size during iteration"), and the copies piled up again. `sweep_safely` replaces it with one that walks a
snapshot and skips a file it cannot delete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from html import escape
from pathlib import Path

from llada.trace import Trace

from . import ASSETS
from .render import canvas
from .render.tables import stats_line

PREFIX = "llada-export-"
KEEP_S = float(os.environ.get("LLADA_EXPORT_KEEP_S", "300"))  # how long an export's download link works
ORIGINALS_KEEP_S = min(60.0, KEEP_S)  # the files Gradio copies from: needed only until it has (at once)


def _script_json(value) -> str:
    """JSON safe to place inside a <script> element."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/").replace(
        "<!--", "<\\!--")


def replay_data(trace: Trace) -> dict:
    """The replay's frames: the canvas at step 0 and the patch of every later step."""
    first = canvas.render(trace, 0, legend=False)
    patches = [canvas.patch(trace, k - 1, k) for k in range(1, trace.steps + 1)]
    return {"first": first, "patches": patches, "steps": trace.steps}


def replay_html(trace: Trace, title: str | None = None) -> str:
    """One HTML file that replays `trace` step by step in any browser, offline."""
    css = (ASSETS / "style.css").read_text(encoding="utf-8")
    js = "\n".join((ASSETS / name).read_text(encoding="utf-8") for name in ("canvas.js", "tokens.js", "replay.js"))
    title = title or f"{trace.model} · {trace.mode} · LLaDA2.1 decoding replay"
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
<div id="canvas-frame"></div>
<h2>Output</h2><pre class="output">{escape(trace.text or "")}</pre>
<script type="application/json" id="frames">{_script_json(replay_data(trace))}</script>
<script>{js}</script>
</body></html>
"""


def write_exports(trace: Trace, folder: Path) -> list[Path]:
    """trace.json and replay.html of `trace` in `folder`; returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    words = re.sub(r"[^A-Za-z0-9]+", "-", trace.prompt or "")[:24].strip("-") or "prompt"
    stem = f"llada-{(trace.mode or 'run').replace(' ', '-')}-{words}-{time.strftime('%Y%m%d-%H%M%S')}"
    json_path, html_path = folder / f"{stem}-trace.json", folder / f"{stem}-replay.html"
    json_path.write_text(json.dumps(trace.to_dict(), ensure_ascii=False), encoding="utf-8")
    html_path.write_text(replay_html(trace), encoding="utf-8")
    return [json_path, html_path]


class ExportDir:
    """Fresh folders for exports; folders older than `keep_s` are deleted whenever a new one is made."""

    def __init__(self, root: Path | None = None, keep_s: float = ORIGINALS_KEEP_S):
        self.root = Path(root or tempfile.gettempdir())
        self.keep_s = keep_s
        self._lock = threading.Lock()

    def new(self) -> Path:
        with self._lock:
            self.sweep()
            return Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.root))

    def sweep(self, now: float | None = None) -> int:
        """Delete old export folders; returns how many went."""
        now = time.time() if now is None else now
        gone = 0
        for folder in self.root.glob(PREFIX + "*"):
            if folder.is_dir() and now - folder.stat().st_mtime > self.keep_s:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        return gone


def sweep_cached(blocks, age: float | None) -> None:
    """Gradio's `delete_files_created_by_app`, safe beside exports: delete the files `blocks` copied for
    download more than `age` seconds ago (all when None), except the ones its components keep."""
    from datetime import datetime

    keep = set()
    for component in list(blocks.blocks.values()):
        keep.update(getattr(component, "keep_in_cache", ()))
    for files in list(blocks.temp_file_sets):
        gone = set()
        for file in list(files):  # a snapshot: an export may add a file while this runs
            try:
                made = datetime.fromtimestamp(Path(file).lstat().st_ctime)
                if file not in keep and (age is None or (datetime.now() - made).total_seconds() > age):
                    os.remove(file)
                    gone.add(file)
            except FileNotFoundError:
                gone.add(file)
            except OSError:
                continue  # not deleted now; the next sweep tries again
        files.difference_update(gone)


def sweep_safely() -> None:
    """Make Gradio's scheduled cache sweep `sweep_cached` (its schedule looks the function up at each sweep)."""
    import gradio.route_utils

    gradio.route_utils.delete_files_created_by_app = sweep_cached
