"""The server hands freed heap memory back to the system (ui/sessions.py `Trimmer`)."""

import os
import time

import pytest

from ui.sessions import Trimmer


def rss_mib() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


needs_glibc = pytest.mark.skipif(Trimmer()._trim is None, reason="the C library has no malloc_trim")


@needs_glibc
def test_freed_blocks_below_a_live_one_go_back_only_when_trimmed():
    trimmer = Trimmer(every=3600)
    chunks = [bytes(2048) for _ in range(100_000)]  # ~200 MiB of malloc'd blocks (above pymalloc's 512 B)
    pinned = bytes(2048)  # a live block above them keeps the heap from shrinking on free
    grown = rss_mib()
    del chunks
    held = rss_mib()
    assert held > grown - 50, (grown, held)  # free() alone gave (almost) nothing back
    assert trimmer.release_freed_memory()
    assert rss_mib() < held - 100, (held, rss_mib())
    assert trimmer.trims == 1 and len(pinned) == 2048


@needs_glibc
def test_the_thread_starts_once_and_trims_on_its_own():
    trimmer = Trimmer(every=0.05)
    assert trimmer.start() and trimmer.start()
    first = trimmer._thread
    deadline = time.monotonic() + 60
    while trimmer.trims < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for the next trim: polled until two have run, bounded by the deadline
    assert trimmer.trims >= 2 and trimmer._thread is first


def test_without_malloc_trim_nothing_runs():
    trimmer = Trimmer()
    trimmer._trim = None
    assert not trimmer.release_freed_memory() and not trimmer.start() and trimmer._thread is None
