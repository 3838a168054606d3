"""Statuses and scores from signals (docs/writing-tests.md, "Statuses" and "Score").

* ``skipped`` — the test did not run.
* ``errored`` — something other than the agent's behaviour went wrong (the body, a fixture,
  the connector, the judge, a timeout). It carries the real message and no score.
* ``failed`` — at least one gate signal failed.
* ``passed`` — every gate signal passed. Observe and neutral signals never gate.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_health.sdk.results import Signal, Status


def decide(signals: Sequence[Signal], errors: Sequence[str], skipped: bool) -> Status:
    if skipped:
        return "skipped"
    if errors:
        return "errored"
    if any(s.role == "gate" and s.passed is False for s in signals):
        return "failed"
    return "passed"


def score(signals: Sequence[Signal], status: Status) -> float | None:
    """Weighted mean of the scored signals; ``None`` when there are none, or it errored."""
    if status in ("errored", "skipped"):
        return None
    total = 0.0
    weights = 0.0
    for s in signals:
        if s.role == "neutral" or s.score is None or s.weight <= 0:
            continue
        total += s.score * s.weight
        weights += s.weight
    if weights == 0:
        return None  # nothing was scored: no number is more honest than an invented one
    return round(total / weights, 6)
