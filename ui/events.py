"""Queue settings shared by the playground's events (ui/layout.py and the views that wire their own).

Runs that use the model share the `decode` concurrency group: `DECODE_CONCURRENCY` of them decode at
once, so a short run never waits for a long one to finish (each is bounded by `ui.runs.BUDGET`).
Replays re-render stored traces without the model and run beside them.
"""

DECODE_CONCURRENCY = 2
DECODE = {"concurrency_id": "decode", "concurrency_limit": DECODE_CONCURRENCY}
REPLAY = {"concurrency_limit": 8, "show_progress": "hidden"}
PRIVATE = {"api_visibility": "private"}  # UI events stay out of the API page
