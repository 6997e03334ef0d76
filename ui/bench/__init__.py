"""The playground's measurements: `python -m ui.bench soak|memory-soak|scrub-timing|overhead` (or each module's own
`python -m ui.bench.NAME`). They drive the app as a visitor would, so they may import the tabs; nothing in
the app imports them (tests/test_floor_plan.py)."""
