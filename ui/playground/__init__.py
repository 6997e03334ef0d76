"""The Playground tab: controls, a live run and its replay, S vs Q, and the API endpoints (ui/playground/wire.py)."""
