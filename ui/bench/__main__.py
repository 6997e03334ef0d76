"""`python -m ui.bench NAME [options]`: run one of the playground's measurements."""

from __future__ import annotations

import importlib
import sys

BENCHES = {"soak": "server RSS over time under simulated visitors, flat or not",
           "memory-soak": "the soak's RSS as JSON; Python memory retained per visit (tracemalloc)",
           "scrub-timing": "from a press on a step scrubber to the painted step, in headless Chromium",
           "overhead": "bare decode vs the app's stream, first-frame latency",
           "slow-model": "a large model in the playground: progress lines during forwards, pace, budget"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print("usage: python -m ui.bench {" + ",".join(BENCHES) + "} [options]\n", file=sys.stderr)
        for name, what in BENCHES.items():
            print(f"  {name:12s} {what}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"ui.bench.{argv[0].replace('-', '_')}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
