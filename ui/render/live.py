"""What a live view sends while a run goes on: a whole canvas now and then, small patches in between.

A frame of a growing run must cost what changed, not what exists: `LiveCanvas` sends a keyframe (the
whole canvas, `ui.canvas.render`) when asked, at the first frame, or when the patch since the last
keyframe grew large; otherwise a patch (`ui.canvas.patch`) holding every cell changed since that
keyframe. Patches are cumulative on purpose: the browser (assets/canvas.js) applies one only on top of
the keyframe it was computed from, so a patch lost or merged on the way is repaired by the next one.

The patch component is a `gr.HTML` that draws nothing: its value is {"patches": [...]}, and its script
applies each patch to the canvas whose id the patch names.

Scrubbing a finished run needs no server: with its last frame the browser gets the run's replay
(`replay_value`: the canvas at step 0 and one patch per step, as an exported replay holds them), and the
step scrubber's own input events draw any step from it at once (`scrubber_script`, assets/scrub.js). The
Playground's run, the S vs Q pair and a Learn lesson (its narration too, `scrub_value`) share this.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass

from llada.trace import Trace

from .. import ASSETS
from . import canvas

MAX_PATCH_CELLS = 512  # beyond this a keyframe is as cheap as the patch


@dataclass(frozen=True)
class CanvasUpdate:
    html: str | None  # a keyframe: the whole canvas (None: no keyframe this time)
    patch: dict | None  # cells changed since the last keyframe (None: nothing to patch)


class LiveCanvas:
    """The canvas of one growing trace, as the browser gets it."""

    def __init__(self, elem_id: str = "canvas", ghost: bool = False):
        self.elem_id, self.ghost, self.base = elem_id, ghost, None

    def update(self, trace: Trace, keyframe: bool = False) -> CanvasUpdate:
        step = trace.steps
        if self.base is not None and not keyframe and step > self.base:
            patch = canvas.patch(trace, self.base, step, self.ghost) | {"target": self.elem_id}
            if len(patch["cells"]) <= MAX_PATCH_CELLS:
                return CanvasUpdate(None, patch)
        if self.base == step and not keyframe:
            return CanvasUpdate(None, None)
        self.base = step
        return CanvasUpdate(canvas.render(trace, step, self.ghost, elem_id=self.elem_id), None)


def patch_value(*patches: dict | None) -> dict | None:
    """The patch component's value for a frame (None when no canvas has a patch)."""
    found = [p for p in patches if p is not None]
    return {"patches": found} if found else None


def scrub_value(*replays: dict | None, narration: dict | None = None) -> dict | None:
    """What a scrubber draws from: {"replays": the replay of each canvas it moves (`replay_value`; None: that
    canvas stays as it is), "narration": {"target": a CSS selector, "now": its current lines at each step} or
    absent}; None when no canvas has a replay (a live run: the server draws)."""
    if not any(replays):
        return None
    return {"replays": list(replays)} | ({"narration": narration} if narration else {})


def replay_value(trace: Trace | None, ghost: bool = False, elem_id: str = "canvas") -> dict | None:
    """A finished run's replay for the browser: {"id", "target", "steps", "first": canvas at step 0,
    "patches": [the patch of step k, for k = 1..steps]}; None while the run goes on (the server draws then)."""
    if trace is None or trace.status == "running":
        return None
    return {"id": uuid.uuid4().hex[:12], "target": elem_id, "steps": trace.steps,
            "first": canvas.render(trace, 0, ghost, elem_id=elem_id),
            "patches": [canvas.patch(trace, k - 1, k, ghost) for k in range(1, trace.steps + 1)]}


_FRAMES = itertools.count()


def drawn(html: str) -> str:
    """A canvas (or a narration) the server draws over one the browser may have drawn since (from a replay, as
    the scrubber moved): its first element marked as a new frame, since a component redraws only a value that
    differs from its last one."""
    return html.replace("<div ", f'<div data-frame="{next(_FRAMES)}" ', 1)


def canvas_script() -> str:
    """assets/canvas.js (apply a patch to a canvas, keep its active block in view) and assets/tokens.js (a
    token's details on a tap or from the keyboard)."""
    return "\n".join((ASSETS / name).read_text(encoding="utf-8") for name in ("canvas.js", "tokens.js"))


PATCHER_JS = """
watch('value', () => {
  const value = props.value;
  if (!value || !value.patches) return;
  for (const patch of value.patches) {
    window.lladaCanvas.apply(document.getElementById(patch.target), patch, true);
  }
});
"""

FOLLOW_JS = """
watch('value', () => window.lladaCanvas.follow(element.querySelector('.canvas')));
"""


def scrubber_script(slider: str, name: str, pause: str | None = None) -> str:
    """The script of a scrubber's replay holder (a `gr.HTML` that draws nothing, loaded after `canvas_script`):
    assets/scrub.js, then the scrubber `#slider` bound to the value the holder receives (`scrub_value`, kept
    as `window.lladaReplays[name]`); a press on the scrubber clicks `#pause` when given (a replay in progress
    stops once the step is drawn)."""
    bind = f"window.lladaScrub.bind({json.dumps(slider)}, {json.dumps(name)}, {json.dumps(pause)});"
    keep = (f"window.lladaScrub.keep({json.dumps(name)}, props.value);\n"
            f"watch('value', () => window.lladaScrub.keep({json.dumps(name)}, props.value));")
    return "\n".join(("", (ASSETS / "scrub.js").read_text(encoding="utf-8"), bind, keep))
