"""What one decoding run may cost: a number of forwards and a wall-clock time, with one edge rule.

The playground bounds every request with a `Budget`, and a Score | TPF sweep bounds every decode of
its grid with one; both read the run's records through `Budget.bound`, so they agree at the edge:

* a run may start a forward only while it is within its budget: fewer than `forwards` forwards done
  and no more than `seconds` since it started;
* a run that ends on its last allowed forward (the engine has nothing more to do) is *done*, not cut;
* a run that still has work when its budget is spent is *cut*: `Bounded.cut` says why, and its records
  stop at the budget (a run is never given a forward more than it may have).

Only the engine knows whether a run needs one more forward, so the budget is asked inside it: the
engine's stream (`llada.decode.Stream`, or any with a `limit` method) asks `Bounded.may_continue` before
each forward, and a refused run stops before that forward is computed. A run that needs no more is
never asked, so it ends done. A stream that cannot be asked is pulled once more at the edge instead: a
finished engine ends at once (no forward), an unfinished one hands over the record of a forward the run
may not have, which is dropped uncounted (that forward was computed for nothing).

A consumer may `revise` the budget between records (the playground does once a slow model's forward time
is known: `ui.pace`); the edge rule then holds with the new one, the run's clock and forwards kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

from .trace import StepRecord


@dataclass(frozen=True)
class Budget:
    """At most `forwards` forwards and `seconds` of wall time for one run (a request, or a sweep's decode)."""

    forwards: int = 1024
    seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.forwards, bool) or not isinstance(self.forwards, int) or self.forwards < 1:
            raise ValueError(f"a budget needs at least 1 forward, got {self.forwards!r}")
        if not self.seconds >= 0:
            raise ValueError(f"a budget's seconds must be 0 or more, got {self.seconds!r}")

    def describe(self) -> str:
        return f"at most {self.forwards:,} forwards per run and {self.seconds:g} s per request"

    def spent(self, forwards: int, elapsed: float) -> str:
        """Why a run that has done `forwards` forwards in `elapsed` seconds may start no other ("" if it may)."""
        if forwards >= self.forwards:
            return f"budget reached: {forwards:,} forwards (at most {self.forwards:,} per run)"
        if elapsed > self.seconds:
            return f"budget reached: {self.seconds:g} s of wall time per request"
        return ""

    def allows(self, forwards: int) -> bool:
        """May a run that has had `forwards` forwards start one more, by their number alone? (The engine's
        question for a row queued before its consumer bounds it: `BatchDecoder.add(..., may_continue=)`.)"""
        return forwards < self.forwards

    def bound(self, records: Iterator[StepRecord], clock: Callable[[], float] = time.monotonic) -> "Bounded":
        """`records` (one per forward) within this budget; the clock starts now."""
        return Bounded(records, self, clock)


class Bounded:
    """The records of one run within its budget; after the last one, `cut` says why it was cut ("" if not).

    Closing it (or a consumer that stops early) closes the engine's generator."""

    def __init__(self, records: Iterator[StepRecord], budget: Budget, clock: Callable[[], float]):
        self.records, self.budget, self.clock = records, budget, clock
        self.started = clock()
        self.forwards = 0
        self.cut = ""
        self.refused = ""  # why the engine was refused a forward ("" while it was not)
        limit = getattr(records, "limit", None)
        if limit is not None:
            limit(self.may_continue)
        self._gen = self._run()

    def may_continue(self, forwards: int) -> bool:
        """The engine's question before a forward, with the forwards the run has had: may it start one more?

        The first forward is never refused (a budget allows at least one, whatever its clock says)."""
        self.refused = self.budget.spent(forwards, self.clock() - self.started) if forwards else ""
        return not self.refused

    def revise(self, budget: Budget) -> None:
        """From now on, bound the run by `budget` (its clock and forwards so far are kept)."""
        self.budget = budget

    def __iter__(self) -> "Bounded":
        return self

    def __next__(self) -> StepRecord:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()
        close = getattr(self.records, "close", None)
        if close is not None:
            close()

    def _run(self) -> Iterator[StepRecord]:
        try:
            for record in self.records:
                if self.cut:  # the engine needed a forward past the budget: drop it, the run is cut
                    return
                self.forwards += 1
                yield record
                self.cut = self.budget.spent(self.forwards, self.clock() - self.started)
            refused_before = getattr(self.records, "refused", False) and not self.refused  # by `allows`, unbound
            self.cut = self.refused or (self.cut if refused_before else "")  # "": the engine ended on its own
        finally:
            close = getattr(self.records, "close", None)
            if close is not None:
                close()
