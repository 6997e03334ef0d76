"""What the events of every tab share: queue settings, frames, inputs by name, and how a problem is told.

Queues: runs that use the model share the `decode` concurrency group: `DECODE_CONCURRENCY` requests decode
at once; while they are all busy, a new one waits in Gradio's queue (the page shows its place and the
seconds waited) until one ends, which each does within its budget (`ui.runs.BUDGET`, 30 s of wall time).
Replays re-render stored traces without the model and run beside them.

Frames: a handler returns a NamedTuple with one field per output component (`frame` leaves every field
it is not given unchanged, `gr.skip()`); inputs arrive by name (`Inputs`: Gradio passes one dict keyed
by component, read back as {name: value}).

Problems: `problem(err)` is the one place that decides what a user reads when a request cannot run. A
refusal (bad input, a broken checkpoint, non-finite logits) is its own message; anything else is a
failure of the server, told in one line while the log keeps its traceback. A problem is shown as the
`#error` box (`html`), a Gradio error over the API (`error`), or a Markdown line (`markdown`). A request with
the wrong number of inputs (raw HTTP) is refused before any handler runs, its message naming the inputs
the event takes (`exact_inputs`).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import traceback
from html import escape
from typing import NamedTuple

import gradio as gr

from llada.weights.checkpoint import CheckpointError

DECODE_CONCURRENCY = 2
DECODE = {"concurrency_id": "decode", "concurrency_limit": DECODE_CONCURRENCY}
REPLAY = {"concurrency_limit": 8, "show_progress": "hidden"}
# UI events stay out of the API page, and their handlers read the values as sent (every one is checked there:
# a component's own conversion lets NaN through and answers a string in a slider with a traceback)
PRIVATE = {"api_visibility": "private", "preprocess": False}
# InputError is a ValueError; engine checks raise ValueError; NonFiniteLogits is a FloatingPointError
REFUSED = (ValueError, CheckpointError, FloatingPointError)
log = logging.getLogger("ui")


def frame(kind, **values):
    """A frame of `kind` (a NamedTuple of outputs) with `values`, every other output left as it is."""
    return kind(**({name: gr.skip() for name in kind._fields} | values))


class Inputs:
    """Components by name: `inputs` wires an event (a set: Gradio passes one dict keyed by component),
    `values(data)` reads that dict back as {name: value}."""

    def __init__(self, **components):
        self.components = components

    @property
    def inputs(self) -> set:
        return set(self.components.values())

    def values(self, data: dict) -> dict:
        return {name: data[component] for name, component in self.components.items()}


class Problem(NamedTuple):
    """Why a request could not run, as a user reads it."""

    refused: bool  # True: the input (or the model) was refused; False: the server failed
    text: str  # one line; a failure's traceback is in the server log

    @property
    def html(self) -> str:
        """The `#error` box (its text escaped: it quotes what the user sent)."""
        return f'<div class="error-box" role="alert"><b>{self.label}:</b> {escape(self.text)}</div>'

    @property
    def markdown(self) -> str:
        return f"**{self.label}:** {self.text}"

    @property
    def label(self) -> str:
        return "Refused" if self.refused else "Error"

    def error(self) -> gr.Error:
        """The Gradio error of an API call (no traceback printed: a refusal is no failure, a failure is logged)."""
        return gr.Error(self.text, print_exception=False)


def problem(err: BaseException) -> Problem:
    """What a user reads about `err`; a failure (anything not refused) is logged with its traceback, once."""
    if isinstance(err, REFUSED):
        return Problem(True, str(err))
    log.error("run failed", exc_info=err)
    return Problem(False, f"the server could not finish this run ({type(err).__name__}: {err}). The run was "
                          "stopped and the error logged; try again, or with other settings.")


class Throttle:
    """True at most once per `interval` seconds (the first call is due unless `wait_first`)."""

    def __init__(self, interval: float, wait_first: bool = False):
        self.interval = interval
        self.last = time.perf_counter() if wait_first else -float("inf")

    def due(self) -> bool:
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.last = now
            return True
        return False


def refusing(fn):
    """`fn` (an event handler) whose refusals and failures reach the client as a Gradio error with the message
    of `problem` (a refusal unlogged, a failure logged once with its traceback)."""
    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as err:  # noqa: BLE001 - told as `problem` says
            raise problem(err).error() from None
    return checked


class _QuietRefusals:
    """Gradio's `traceback` as its queue and routes see it: a request Gradio itself refuses (a gr.Error, a value
    its component cannot read, the wrong number of inputs) is logged as one line; any other failure keeps
    its whole traceback."""

    def __getattr__(self, name):
        return getattr(traceback, name)

    @staticmethod
    def print_exc(*args, **kwargs):
        err = sys.exc_info()[1]
        if err is not None and refused_by_gradio(err):
            log.warning("refused request: %s", " ".join(str(err).split())[:300])
            return
        traceback.print_exc(*args, **kwargs)


GRADIO_REFUSALS = ("validate_inputs", "call_function")  # where Gradio refuses a request's shape


def refused_by_gradio(err: BaseException) -> bool:
    from gradio.exceptions import ComponentProcessingError, Error

    if isinstance(err, (Error, ComponentProcessingError)):
        return True
    frames = traceback.extract_tb(err.__traceback__)  # raised by Gradio itself: too few inputs, no such function
    return bool(frames) and frames[-1].name in GRADIO_REFUSALS and "gradio" in frames[-1].filename


def quiet_refusals() -> None:
    """Install `_QuietRefusals` where Gradio prints the errors of requests (its queue, routes and helpers)."""
    import gradio.queueing
    import gradio.routes
    import gradio.utils

    for module in (gradio.queueing, gradio.routes, gradio.utils):
        if getattr(module, "traceback", None) is traceback:
            module.traceback = _QuietRefusals()


def input_names(block_fn) -> list[str]:
    """The names of the inputs an event's caller sends, in order (a `gr.State` is the server's, never sent):
    its handler's parameters (the API page's names) when they match the inputs one for one, else labels."""
    from gradio.utils import get_function_params

    params = [info[0] for info in get_function_params(block_fn.fn)] if block_fn.fn else []
    if len(params) != len(block_fn.inputs):
        params = [str(getattr(c, "label", None) or getattr(c, "elem_id", None) or type(c).__name__.lower())
                  for c in block_fn.inputs]
    return [name for name, c in zip(params, block_fn.inputs) if not c.skip_api]


def exact_inputs(demo: gr.Blocks) -> None:
    """Refuse a request to any of `demo`'s events that sends fewer or more inputs than the event takes, with
    a Gradio error naming them (Gradio's own check lets extra inputs through, and its message, written for a
    page's JavaScript, never reaches an API caller: `success: false, error: null`)."""
    def validate_inputs(block_fn, inputs: list) -> None:
        if len(inputs) != len(block_fn.inputs):  # a plain call's states: their places filled in by now
            where = f"/{block_fn.api_name}" if block_fn.api_name else "this event"
            names = input_names(block_fn)
            raise gr.Error(f"{where} takes {len(names)} inputs, in this order: {', '.join(names) or 'none'}; got "
                           f"{len(inputs)}", print_exception=False)

    demo.validate_inputs = validate_inputs
