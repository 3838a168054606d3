"""Statuses and scores from signals (docs/writing-tests.md, "Statuses" and "Score").

* ``skipped`` — the test did not run; or it ran and its only gates were judge calls that were
  skipped (judging off: ``--no-judge``, no judge configured): nothing was checked, so it did
  not pass either (:data:`JUDGE_ONLY`). It keeps its signals and has no score.
* ``failed`` — at least one gate signal failed, whatever happened after it. A failed check
  wins over a later error (the body raised, the agent or the judge failed, the deadline
  expired): the test is ``failed`` and keeps that error as its message. An error must never
  lift a test that had already failed out of the pass rate: breaking a test never raises
  the grade.
* ``errored`` — the run could not be graded, and no check had failed: the agent did not
  answer usably, the judge, the test's own code or the infrastructure failed. It carries the
  real message, a ``cause`` (:data:`~agent_health.sdk.results.Cause`) and no score.
* ``passed`` — every gate signal passed. Observe and neutral signals never gate. A test that
  recorded no gate and asked no gating judge (a pure data test, a body that checks nothing)
  passes, as it always has.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_health import statuses
from agent_health.sdk.results import CAUSES, Cause, Signal, Status

JUDGE_ONLY = "judge skipped: nothing else checked"
"""The skip reason of a test whose only gates were skipped judge calls (:func:`unchecked`)."""


def decide(signals: Sequence[Signal], errors: Sequence[str], skipped: bool) -> Status:
    """The status of a test from the signals it recorded and the errors it met.

    One rule for every place a status is decided: the local engine and a cell's controller
    (:mod:`.runner`), the operator's grade of a cell's ledger and ``agent-health grade``
    (``cluster.grading``), so none of them can disagree about a crash after a failed check.
    """
    if skipped:
        return "skipped"
    if any(s.role == "gate" and s.passed is False for s in signals):
        return "failed"  # before the errors: a crash after a failed check must not hide it
    if errors:
        return "errored"
    if unchecked(signals):
        return "skipped"
    return "passed"


def skip_reason(status: Status, signals: Sequence[Signal]) -> str | None:
    """:data:`JUDGE_ONLY` when ``status`` is ``skipped`` because nothing but skipped judge
    calls would have gated (a test the body skipped has its own reason)."""
    return JUDGE_ONLY if status == "skipped" and unchecked(signals) else None


def unchecked(signals: Sequence[Signal]) -> bool:
    """Whether the test asked for gates and every one was a judge call that was skipped.

    A skipped verdict's signal is neutral whatever it was asked as; the role it was asked
    with is kept in its evidence (``asked_role``; a signal recorded before it was kept is
    taken as asked by ``judge()``, a gate). A skipped ``judge.observe`` gated nothing.
    """
    asked = False
    for s in signals:
        if s.role == "gate":
            return False
        asked = asked or _skipped_gate_judge(s)
    return asked


def _skipped_gate_judge(signal: Signal) -> bool:
    evidence = signal.evidence or {}
    return (
        signal.kind == "judge"
        and evidence.get("skipped") is True
        and evidence.get("asked_role", "gate") == "gate"
    )


def score(signals: Sequence[Signal], status: Status) -> float | None:
    """Weighted mean of the scored signals; ``None`` when there are none, or it errored."""
    if status in statuses.UNSCORED:
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


def cause(causes: Sequence[Cause]) -> Cause | None:
    """The cause of a test that errored for these reasons (in the order they happened).

    The agent's, if any of them is: once the agent under test failed, what broke after it
    (a teardown that wanted its answer, a judge that had nothing to judge) does not move
    the blame, nor lift the error out of the pass rate. Otherwise the first one's.
    """
    if not causes:
        return None
    return "agent" if "agent" in causes else causes[0]


def cause_of(err: BaseException) -> Cause:
    """Whom an exception blames: by the ``error_cause`` of it and of the errors it came from
    (``raise ... from err``, or raised while handling one), as :func:`cause` ranks them;
    an exception that names none is the test's own code."""
    found: list[Cause] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        named = getattr(current, "error_cause", None)
        found.extend(c for c in CAUSES if c == named)
        current = current.__cause__ or current.__context__
    return cause(found) or "test"
