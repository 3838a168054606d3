"""Folding graded cells into an EvaluationRun's status: the tally, its phase and conditions.

Lifecycle (``status.phase``)::

    Pending ─► Resolving ─► Running ─► Grading ─► Succeeded
       │                       ▲
       └───────────────────────┘  (the RunSpec was already resolved)
       └──────────┴────────────┴──────────┴─────► Failed

* ``Pending`` — accepted, nothing done yet. ``Resolving`` — waiting for the RunSpec's images
  to be pinned to digests and its tests discovered; a run of a RunSpec that is already
  resolved (its second run, and every later one) skips it. ``Running`` — cells are
  scheduled. ``Grading`` — every cell has ended; the last ledgers are being graded. The
  tally moves Running → Grading → Succeeded by itself as cells end and are graded.
* ``Succeeded`` — every planned cell has a grade, **whatever the grades are**: a run whose
  tests fail has still succeeded in measuring the agent (see the ``TestsPassed`` condition).
* ``Failed`` — the run could not be executed: an image did not resolve, discovery failed,
  the RunSpec vanished. It says nothing about the agent.

Conditions (metav1.Condition, each with ``observedGeneration``; ``lastTransitionTime``
changes only when a condition's status does): ``Resolved``, ``Complete`` (True once
Succeeded), ``Failed`` (True once Failed), ``TestsPassed`` (True when every graded cell
passed, False as soon as one failed or errored — ``kubectl wait --for=condition=...``),
and ``Reconciled`` (only after the operator failed to start the run: False with the error and
the attempt, True once a later attempt succeeded).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Literal

from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, meta, runbudget
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import sidebyside, spending
from agent_health.engine import outcome, reports, statistics

Phase = evaluationrun.Phase
TERMINAL: frozenset[Phase] = frozenset({"Succeeded", "Failed"})
_NEXT: dict[Phase | None, frozenset[Phase]] = {
    None: frozenset({"Pending", "Resolving", "Failed"}),
    "Pending": frozenset({"Resolving", "Running", "Failed"}),
    "Resolving": frozenset({"Running", "Failed"}),
    "Running": frozenset({"Grading", "Succeeded", "Failed"}),
    "Grading": frozenset({"Succeeded", "Failed"}),
    "Succeeded": frozenset(),
    "Failed": frozenset(),
}
ConditionStatus = Literal["True", "False", "Unknown"]
_CellState = Literal["pending", "queued", "running", "ended"]
MAX_ERROR = 1024
# The score's bootstrap interval while cells are graded (resampling costs ~0.1 s per 1,000 tests)
BOOTSTRAP_EVERY = datetime.timedelta(seconds=30)


def utcnow() -> datetime.datetime:
    """Now, in UTC, to the second (Kubernetes times have no fractions)."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def set_condition(
    conditions: Iterable[meta.Condition],
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime.datetime,
) -> list[meta.Condition]:
    """``conditions`` with ``type`` set; its transition time moves only if ``status`` did."""
    kept = list(conditions)
    old = next((c for c in kept if c.type == type), None)
    since = old.last_transition_time if old is not None and old.status == status else now
    new = meta.Condition(
        type=type,
        status=status,
        observed_generation=generation,
        last_transition_time=since,
        reason=reason,
        message=message[: 32 * 1024],
    )
    if old is None:
        return [*kept, new]
    return [new if c.type == type else c for c in kept]


class RunTally:
    """The running tally of one EvaluationRun, rebuilt from grades whenever it is read.

    Idempotent: recording a cell again replaces its grade. A retryable (infrastructure)
    grade puts the cell back to pending instead of counting it.
    """

    def __init__(
        self,
        *,
        repeats: int = 1,
        generation: int | None = None,
        previous: evaluationrun.Status | None = None,
        clock: Callable[[], datetime.datetime] = utcnow,
        budget: runbudget.Budget | None = None,
    ) -> None:
        self.repeats = repeats
        self.budget = spending.RunBudget(budget) if budget is not None else None
        self.generation = generation
        self._clock = clock
        self._cells: dict[str, _CellState] = {}
        self._since: dict[str, datetime.datetime] = {}
        """When each running cell started running (only those running)."""
        self._grades: dict[str, grading.CellGrade] = {}
        self._launches: dict[str, Literal["warm", "cold"]] = {}
        # The engine's report over the grades (O(cells)); rebuilt only after a grade changes.
        self._aggregates: (
            tuple[reports.Summary, list[evaluationrun.TestSummary], statistics.Matrix | None] | None
        ) = None
        self._score_interval: evaluationrun.Interval | None = None
        self._agent_score_intervals: dict[str, evaluationrun.Interval | None] = {}
        self._bootstrapped_at: datetime.datetime | None = None
        self.phase: Phase | None = previous.phase if previous else None
        self.conditions: list[meta.Condition] = list(previous.conditions) if previous else []
        self.start_time = previous.start_time if previous else None
        self.completion_time = previous.completion_time if previous else None
        self.requeued_errored = (previous.requeued_errored or 0) if previous else 0
        """The ``spec.requeueErrored`` done so far."""

    # -- cells -----------------------------------------------------------------------------

    def plan(self, cells: Iterable[str]) -> None:
        """Add cells (by name) that will run; cells already known keep their state."""
        for cell in cells:
            if cell not in self._grades:
                self._cells.setdefault(cell, "pending")

    def started(self, cell: str) -> None:
        """The cell's pod is running."""
        if cell not in self._grades:
            if self._cells.get(cell) != "running":
                self._since[cell] = self._clock()
            self._cells[cell] = "running"

    def queued(self, cell: str, held: bool = True) -> bool:
        """The cell's pod waits for Kueue's admission (``held``), or no longer does (back to
        pending until it runs); whether that changed the tally."""
        state = self._cells.get(cell)
        if cell in self._grades or state in (None, "running", "ended"):
            return False
        wanted: _CellState = "queued" if held else "pending"
        self._cells[cell] = wanted
        self._since.pop(cell, None)
        return state != wanted

    def launched(self, cell: str, launch: Literal["warm", "cold"]) -> None:
        """A warm-pool run's cell got a sandbox: a pooled one (``warm``), or a cold start."""
        self._launches[cell] = launch

    def requeued(self, cell: str) -> None:
        """The cell's pod was preempted: the cell is pending again (a new pod follows)."""
        if cell not in self._grades:
            self._cells[cell] = "pending"
            self._since.pop(cell, None)

    def ended(self, cell: str) -> None:
        """The cell's pod has ended; its grade follows. Running → Grading when it is the last."""
        if cell not in self._grades:
            self._cells[cell] = "ended"
        self._since.pop(cell, None)
        if self.phase == "Running" and all(s == "ended" for s in self._cells.values()):
            self.advance("Grading", reason="CellsEnded", message="every cell has ended")

    def grade_of(self, cell: str) -> grading.CellGrade | None:
        return self._grades.get(cell)

    def unrecord(self, cell: str) -> None:
        """The cell runs again (``spec.requeueErrored``): its grade is dropped, it is pending,
        and a run grading or done is running again."""
        if self._grades.pop(cell, None) is not None:
            self._aggregates = None
        self._cells[cell] = "pending"
        if self.phase in ("Grading", "Succeeded"):
            self._reopen()

    def _reopen(self) -> None:
        """Back to Running from Grading or Succeeded: the one way back, for requeued cells
        (:meth:`advance` never goes back)."""
        now = self._clock()
        self.phase, self.completion_time, self._aggregates = "Running", None, None
        self._set("Complete", "False", "Requeued", "errored cells run again", now=now)

    def rebudget(self, spec: runbudget.Budget | None) -> None:
        """``spec.budget`` changed while the run runs: the new limits (spend so far kept)."""
        if spec is None:
            self.budget = None
            return
        fresh = spending.RunBudget(spec)
        if self.budget is not None:
            fresh.judge_in, fresh.judge_out = self.budget.judge_in, self.budget.judge_out
            fresh.skipped = self.budget.skipped
        self.budget = fresh

    def record(self, grade: grading.CellGrade) -> None:
        """Fold one cell's grade in (replacing an earlier grade of the same cell)."""
        self._since.pop(grade.cell, None)
        if grade.retryable:
            if self._grades.pop(grade.cell, None) is not None:
                self._aggregates = None
            self._cells[grade.cell] = "pending"
            return
        self._cells.pop(grade.cell, None)
        self._grades[grade.cell] = grade
        self._aggregates = None
        if self.phase in ("Running", "Grading") and not self._cells:
            self.advance("Succeeded", reason="AllCellsGraded", message=self._summary_line())

    @property
    def grades(self) -> list[grading.CellGrade]:
        return list(self._grades.values())

    def counts(self) -> evaluationrun.Counts:
        states = list(self._cells.values())
        by_status: dict[str, int] = defaultdict(int)
        by_cause: dict[str, int] = defaultdict(int)
        for grade in self._grades.values():
            by_status[grade.status] += 1
            if grade.status == "errored":
                by_cause[grade.cause or "test"] += 1
        waiting = states.count("pending") + states.count("queued")
        return evaluationrun.Counts(
            total=len(states) + len(self._grades),
            pending=states.count("pending"),
            queued=states.count("queued"),
            running=len(states) - waiting,
            passed=by_status["passed"],
            failed=by_status["failed"],
            errored=by_status["errored"],
            skipped=by_status["skipped"],
            errored_by_cause=evaluationrun.ErroredByCause(**by_cause),
            unverified_claims=sum(g.unverified_claims for g in self._grades.values()),
            conversations=sum(1 for g in self._grades.values() if g.result.turns),
            goal_met=sum(
                1
                for g in self._grades.values()
                if g.result.ended is not None and g.result.ended.reason == "goal-met"
            ),
            warm_starts=self._launched("warm"),
            cold_starts=self._launched("cold"),
        )

    def _launched(self, launch: str) -> int | None:
        if not self._launches:
            return None  # not a warm-pool run (or none of its cells has a sandbox yet)
        return sum(1 for found in self._launches.values() if found == launch)

    # -- budget ----------------------------------------------------------------------------

    def over_budget(self) -> bool:
        """Whether ``spec.budget`` is reached (:mod:`.spending`); keeps ``BudgetExhausted``."""
        if self.budget is None:
            return False
        over = self.budget.check((g.result for g in self._grades.values()), self.start_time)
        status, reason, message = self.budget.condition()
        if self._condition(spending.CONDITION) != status:
            self._set(spending.CONDITION, status, reason, message, now=self._clock())
        return over

    # -- phase -----------------------------------------------------------------------------

    def advance(self, phase: Phase, *, reason: str, message: str = "") -> bool:
        """Move to ``phase``; ``False`` if already there. Raises :class:`errors.PhaseError`."""
        if phase == self.phase:
            return False
        if phase not in _NEXT[self.phase]:
            raise errors.PhaseError(
                f"an EvaluationRun cannot go from {self.phase or 'new'} to {phase} ({reason})"
            )
        now = self._clock()
        self.phase = phase
        if phase in TERMINAL:
            self._aggregates = None  # the final status gets fresh intervals
        if phase == "Running" and self.start_time is None:
            self.start_time = now
        if phase in TERMINAL:
            self.completion_time = now
        resolved = _RESOLVED.get(phase)
        if phase == "Failed" and self._condition("Resolved") != "True":
            resolved = ("False", reason, message)
        if resolved is not None:
            self._set("Resolved", *resolved, now=now)
        done: ConditionStatus = "True" if phase == "Succeeded" else "False"
        self._set("Complete", done, reason if phase in TERMINAL else phase, message, now=now)
        if phase == "Failed":
            self._set("Failed", "True", reason, message, now=now)
        return True

    def fail(self, reason: str, message: str) -> bool:
        """The run cannot be executed (unresolvable image, discovery failure, ...)."""
        return self.advance("Failed", reason=reason, message=message)

    def note(self, type: str, status: ConditionStatus, reason: str, message: str) -> None:
        """Set a condition that no phase implies (e.g. ``Reconciled`` after an error)."""
        self._set(type, status, reason, message, now=self._clock())

    def condition(self, type: str) -> str | None:
        """The status of condition ``type`` (``None`` when it is not set)."""
        return self._condition(type)

    def _condition(self, type: str) -> str | None:
        return next((c.status for c in self.conditions if c.type == type), None)

    def _set(
        self,
        type: str,
        status: ConditionStatus,
        reason: str,
        message: str,
        *,
        now: datetime.datetime,
    ) -> None:
        self.conditions = set_condition(
            self.conditions, type, status, reason, message, generation=self.generation, now=now
        )

    # -- the status ------------------------------------------------------------------------

    def running(
        self, describe: Callable[[str], tuple[str, int, str | None]]
    ) -> list[evaluationrun.RunningCell]:
        """The cells running now, longest running first, at most
        :data:`~.evaluationrun.MAX_RUNNING_CELLS` (``describe``: a cell's test, repeat and
        agent)."""
        running = sorted(
            (since, name)
            for name, since in self._since.items()
            if self._cells.get(name) == "running"
        )
        found = []
        for since, name in running[: evaluationrun.MAX_RUNNING_CELLS]:
            test, repeat, agent = describe(name)
            found.append(
                evaluationrun.RunningCell(test=test[:512], repeat=repeat, agent=agent, since=since)
            )
        return found

    def status(
        self, describe: Callable[[str], tuple[str, int, str | None]] | None = None
    ) -> evaluationrun.Status:
        """The whole status as it should be stored now (``describe``, a cell's test, repeat
        and agent: with the cells running now)."""
        counts = self.counts()
        if self._aggregates is None:
            graded = [g.result for g in self._grades.values()]
            now, last = self._clock(), self._bootstrapped_at
            due = self.phase in TERMINAL or last is None or now - last >= BOOTSTRAP_EVERY
            built = reports.RunReport.build(
                graded, duration_ms=0, repeats=self.repeats, bootstrap=due
            )
            if due:
                self._score_interval = _interval(built.summary.score_interval)
                self._agent_score_intervals = sidebyside.score_intervals(built.matrix)
                self._bootstrapped_at = now
            self._aggregates = (built.summary, self.test_summaries(), built.matrix)
        summary, tests, side_by_side = self._aggregates
        self._tests_passed(counts)
        spent = None
        if self.budget is not None:
            spent = self.budget.status((g.result for g in self._grades.values()), self.start_time)
        return evaluationrun.Status(
            observed_generation=self.generation,
            phase=self.phase,
            counts=counts,
            pass_rate=summary.pass_rate,
            pass_rate_interval=_interval(summary.pass_rate_interval),
            score=summary.score,
            score_interval=self._score_interval if summary.score is not None else None,
            pass_at_k=summary.pass_at_k,
            pass_at_k_interval=_interval(summary.pass_at_k_interval),
            pass_hat_k=summary.pass_hat_k,
            pass_hat_k_interval=_interval(summary.pass_hat_k_interval),
            tests=tests,
            running_cells=self.running(describe) if describe is not None else [],
            budget=spent,
            agents=sidebyside.agents(side_by_side, self._agent_score_intervals),
            pairs=sidebyside.pairs(side_by_side),
            conditions=self.conditions,
            start_time=self.start_time,
            completion_time=self.completion_time,
            requeued_errored=self.requeued_errored or None,
        )

    def wire(self) -> dict[str, Any]:
        """:meth:`status` as Kubernetes stores it (camelCase, unset fields left out)."""
        return self.status().wire()

    def test_summaries(
        self, limit: int = evaluationrun.MAX_TEST_SUMMARIES
    ) -> list[evaluationrun.TestSummary]:
        """One entry per graded test, the most telling first: failing, then errored, then by
        pass share and score; at most ``limit`` (the CRD's maxItems)."""
        by_test: dict[str, list[grading.CellGrade]] = defaultdict(list)
        for grade in self._grades.values():
            by_test[grade.test_id].append(grade)
        entries = [_summary(test_id, grades) for test_id, grades in by_test.items()]
        entries.sort(key=_badness)
        return entries[:limit]

    def _tests_passed(self, counts: evaluationrun.Counts) -> None:
        now = self._clock()
        bad = counts.failed + counts.errored
        if bad:
            message = (
                f"{counts.failed} failed and {counts.errored} errored{_causes(counts)} of "
                f"{counts.total} cells"
            )
            self._set("TestsPassed", "False", "CellsFailed", message, now=now)
        elif self.phase == "Succeeded":
            message = f"{counts.passed} of {counts.total} cells passed"
            if counts.skipped:  # a skipped cell is not a pass: say what the rest were
                message += f", {counts.skipped} skipped{self._judge_only()}"
            self._set("TestsPassed", "True", "AllPassed", message, now=now)
        elif counts.total:
            self._set("TestsPassed", "Unknown", "InProgress", self._summary_line(), now=now)

    def _summary_line(self) -> str:
        c = self.counts()
        return (
            f"{c.passed} passed, {c.failed} failed, {c.errored} errored{_causes(c)}, "
            f"{c.skipped} skipped{self._judge_only()} of {c.total} cells"
        )

    def _judge_only(self) -> str:
        """`` (3 judge only)`` — skipped cells whose only gates were skipped judge calls."""
        n = sum(g.result.skip_reason == outcome.JUDGE_ONLY for g in self._grades.values())
        return f" ({n} judge only)" if n else ""


_RESOLVED: dict[Phase, tuple[ConditionStatus, str, str]] = {
    "Pending": ("Unknown", "Pending", "waiting to resolve images and tests"),
    "Resolving": ("Unknown", "Resolving", "resolving image digests and discovering tests"),
    "Running": ("True", "Resolved", "images pinned by digest and tests discovered"),
}


def _interval(found: statistics.Interval | None) -> evaluationrun.Interval | None:
    return None if found is None else evaluationrun.Interval(low=found.low, high=found.high)


def _causes(counts: evaluationrun.Counts) -> str:
    """`` (2 agent, 1 infra)`` — the causes of the errored cells, when there are any."""
    by = counts.errored_by_cause.model_dump()
    named = [f"{n} {cause}" for cause, n in by.items() if n]
    return f" ({', '.join(named)})" if named else ""


def _summary(test_id: str, grades: list[grading.CellGrade]) -> evaluationrun.TestSummary:
    grades = sorted(grades, key=lambda g: g.repeat)
    statuses = [g.status for g in grades]
    scores = [g.score for g in grades if g.score is not None]
    first = next((g for g in grades if g.status == "errored" and g.error), None)
    return evaluationrun.TestSummary(
        id=test_id[:512],
        passed=statuses.count("passed"),
        failed=statuses.count("failed"),
        errored=statuses.count("errored"),
        errored_by_agent=sum(g.status == "errored" and g.cause == "agent" for g in grades),
        score=round(sum(scores) / len(scores), 6) if scores else None,
        error=_truncate(first.error, MAX_ERROR) if first is not None and first.error else None,
        cause=first.cause if first is not None else None,
        agents=sidebyside.per_agent(grades),
    )


def _badness(entry: evaluationrun.TestSummary) -> tuple[int, float, float, str]:
    rank = 0 if entry.failed or entry.errored_by_agent else 1 if entry.errored else 2
    decided = entry.passed + entry.failed + entry.errored_by_agent
    share = entry.passed / decided if decided else 1.0
    return rank, share, entry.score if entry.score is not None else 1.0, entry.id


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
