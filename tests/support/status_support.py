"""A settable clock and a run's tally as the operator keeps it, for tests of its status."""

from __future__ import annotations

import datetime

from agent_health.cluster.reconcile import status

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


class Clock:
    """A settable clock: ``now()`` for datetimes, ``()`` for monotonic seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def now(self) -> datetime.datetime:
        return T0 + datetime.timedelta(seconds=int(self.t))


def running_tally(clock: Clock, cells: list[str], repeats: int = 1) -> status.RunTally:
    tally = status.RunTally(repeats=repeats, generation=1, clock=clock.now)
    tally.advance("Pending", reason="Accepted")
    tally.advance("Resolving", reason="Resolving")
    tally.plan(cells)
    tally.advance("Running", reason="Scheduled")
    return tally
