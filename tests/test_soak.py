"""A short soak (`python -m ui.bench.soak`, see its docstring): the app in a child process on the shipped model, two
simulated visitors coming and going (each visit a new session that runs, scrubs, exports, compares and calls
/generate, then closes its tab), and the server's RSS sampled every few visits. After warm-up it must stay
flat: the app keeps a bounded number of sessions (8 here, through LLADA_SESSIONS) and drops a closed tab's.
Counted in visits, not seconds, so a slow machine only makes it take longer.
"""

from __future__ import annotations

from ui.bench import soak
from ui_helpers import free_port


def test_memory_is_flat_after_warm_up():
    # 36 visits, sampled every 4: the 8 kept sessions are full after 8, and 7 samples stay after warm-up
    samples = soak.soak(minutes=0, visitors=2, every=4, model=None, port=free_port(), visits=36, sessions=8)
    v = soak.verdict(samples, warmup=0.3, tolerance=0.08)  # generous: RSS moves a few MiB with the allocator
    print(f"\nsoak: {samples[-1].visits} visits, {samples[-1].requests} requests, RSS after warm-up "
          f"{v.early_mib:.1f} -> {v.late_mib:.1f} MiB ({100 * v.growth:+.1f}%)")
    assert samples[-1].errors == 0
    assert v.flat, [round(s.rss_mib, 1) for s in samples]
