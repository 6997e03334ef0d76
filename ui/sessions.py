"""What the server keeps per session, and when it lets it go.

Gradio keeps, per session, a copy of the page's values with the session's `gr.State`s (its `SessionState`,
about 0.25 MiB here) and its queue's bookkeeping (a message queue and a set of pending event ids, which
Gradio itself never removes once a session's events are done). Two kinds of session end here:

* a tab's: when the tab closes its heartbeat stops, `demo.unload` calls `drop_session`, and everything the
  session held goes at once (not an hour later, as Gradio would keep it);
* a one-shot API call's: a plain HTTP call (`POST /gradio_api/call/NAME`, no `session_hash`) gets a fresh
  session no tab will ever close, and no later call can reach. `ONE_SHOTS.add(request)` notes it; once
  `ONE_SHOT_KEEP` newer ones have come, it is dropped as soon as its call has answered.

Gradio also keeps timings of the last 10,000 events for its API page; `queue` keeps `EVENTS_KEPT`.

Memory a request frees is not always memory the process gives back: glibc's allocator keeps freed blocks
in the arenas of the threads that used them (Gradio's workers, the decode threads), and a heap whose top is
still in use cannot shrink, so a server's RSS crept up by about 1 MiB a minute under four busy visitors
even though nothing Python could see was kept. `queue` also starts `release_freed_memory` every
`TRIM_EVERY_S` seconds on one background thread (glibc's `malloc_trim(0)`, which hands free pages in
the middle of the heaps back to the system); elsewhere than glibc it does nothing.

Within a session, an output that one frame leaves alone (`gr.skip()`) or restyles (`gr.update(maximum=...)`)
gets a new component object in the session's copy of the page, and Gradio 6 gives that object a new id; a
later frame that sets the output's value then files the object under its new id too, so every run left a
few components (and the charts and canvases they last showed) behind: ~100 KiB a run, for as long as the
tab stayed open. `keep_replacements_in_place` makes the new object take the id of the output it stands
for, so a session holds one object per output however many runs it makes.
Anything else (a `gradio_client` session, with its own heartbeat, or a tab left open) is bounded by Gradio's
`state_session_capacity` (ui/demo.py `SESSIONS`): the least recently used goes first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections import OrderedDict

import gradio as gr

ONE_SHOT_KEEP = 8  # finished one-shot API sessions kept (the newest), so a slow reader still finds its result
EVENTS_KEPT = 500  # Gradio's per-event timings kept for its API page (its default: 10,000, ~0.7 KiB each)
ONE_SHOT_LIMIT = 256  # one-shot sessions kept at most, even unfinished (a client that never reads its result)
TRIM_EVERY_S = 10.0  # how often freed heap pages go back to the system (a trim takes about a millisecond)


def queue(demo: gr.Blocks, **options) -> gr.Blocks:
    """`demo.queue(**options)`, keeping Gradio's per-event timings to the last `EVENTS_KEPT` events."""
    demo.queue(**options)
    demo._queue.ANALYTICS_MAX_EVENTS = EVENTS_KEPT
    TRIMMER.start()
    return demo


def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class Trimmer:
    """Runs `release_freed_memory` every `every` seconds on one daemon thread, started once per process."""

    def __init__(self, every: float = TRIM_EVERY_S):
        self.every, self.trims = every, 0
        self._trim = _malloc_trim()
        self._lock, self._thread = threading.Lock(), None

    def release_freed_memory(self) -> bool:
        """Hand the heaps' free pages back to the system now; False where that cannot be done."""
        if self._trim is None:
            return False
        self._trim(0)
        self.trims += 1
        return True

    def start(self) -> bool:
        """Start the thread (once; later calls do nothing); False where there is nothing to trim with."""
        with self._lock:
            if self._trim is None or self._thread is not None:
                return self._thread is not None
            self._thread = threading.Thread(target=self._run, name="release-freed-memory", daemon=True)
            self._thread.start()
            return True

    def _run(self) -> None:
        while True:
            time.sleep(self.every)
            self.release_freed_memory()


TRIMMER = Trimmer()


def keep_replacements_in_place() -> None:
    """Make a component that replaces an output in a session keep that output's id (see the module docstring).

    Wraps Gradio's `SessionState.__setitem__` once per process; stored states (`gr.State`) are not touched."""
    from gradio.blocks import Block
    from gradio.state_holder import SessionState

    store = SessionState.__setitem__
    if getattr(store, "keeps_ids", False):
        return

    def setitem(self, key, value):
        if isinstance(value, Block) and not value.stateful and value._id != key and key in self.blocks_config.blocks:
            value._id = key  # the replacement stands for output `key`: filed under `key`, found under `key`
        store(self, key, value)

    setitem.keeps_ids = True
    SessionState.__setitem__ = setitem


def _app(request: gr.Request | None):
    """The Gradio server app behind a request (None outside a request)."""
    return getattr(getattr(request, "request", None), "app", None)


def busy(app, session_hash: str) -> bool:
    """Whether the session still has events queued or running (its result not yet sent)."""
    queue = getattr(app.get_blocks(), "_queue", None)
    return bool(queue and queue.pending_event_ids_session.get(session_hash))


def forget(app, session_hash: str) -> None:
    """Everything the server holds for a session: its values and states, its queue's bookkeeping."""
    holder = app.state_holder
    with holder.lock:
        holder.session_data.pop(session_hash, None)
        holder.time_last_used.pop(session_hash, None)
    queue = getattr(app.get_blocks(), "_queue", None)
    if queue is None or busy(app, session_hash):
        return
    queue.pending_event_ids_session.pop(session_hash, None)
    messages = queue.pending_messages_per_session.get(session_hash)
    if messages is not None and messages.empty():
        queue.pending_messages_per_session.pop(session_hash, None)


def drop_session(request: gr.Request) -> None:
    """A tab closed: forget its session (its last run, comparison and values) now, not an hour later."""
    app = _app(request)
    if app is not None and request.session_hash:
        forget(app, request.session_hash)


def one_shot(request: gr.Request | None) -> bool:
    """Whether the request is a plain HTTP API call (`/call/NAME`, or the older `/run/NAME`, `/api/NAME`)."""
    url = getattr(getattr(request, "request", None), "url", None)
    return url is not None and bool({"call", "run", "api"} & set(url.path.split("/")))


class OneShots:
    """The sessions of one-shot API calls, oldest first: past the newest `keep` each is dropped once its call is
    done, and past `limit` at once."""

    def __init__(self, keep: int = ONE_SHOT_KEEP, limit: int = ONE_SHOT_LIMIT):
        self.keep, self.limit = keep, limit
        self.sessions: OrderedDict[str, object] = OrderedDict()  # session_hash -> its app
        self.lock = threading.Lock()

    def add(self, request: gr.Request | None) -> None:
        """Note the session of `request` when it is a one-shot call; drop the finished ones past `keep`."""
        app = _app(request)
        if app is None or not request.session_hash or not one_shot(request):
            return
        with self.lock:
            self.sessions[request.session_hash] = app
            self.sessions.move_to_end(request.session_hash)
            old = list(self.sessions.items())[: max(0, len(self.sessions) - self.keep)]
            late = len(old) - (self.limit - self.keep)  # past the limit: dropped even if unfinished
            done = [(session, app) for i, (session, app) in enumerate(old) if i < late or not busy(app, session)]
            for session, _ in done:
                del self.sessions[session]
        for session, app in done:
            forget(app, session)

    def __len__(self) -> int:
        return len(self.sessions)


ONE_SHOTS = OneShots()


def forget_refused_one_shots(demo: gr.Blocks) -> None:
    """A one-shot call that `demo` refuses before its handler runs (a wrong input count, `ui.frame.exact_inputs`)
    is noted in ONE_SHOTS all the same, so its session goes as a served call's does, not when Gradio's capacity
    evicts it: a client sending malformed calls cannot pile sessions up."""
    served = demo.process_api

    async def process_api(*args, **kwargs):
        try:
            return await served(*args, **kwargs)
        except Exception:
            request = kwargs.get("request")
            ONE_SHOTS.add(request if isinstance(request, gr.Request) else None)
            raise

    demo.process_api = process_api
