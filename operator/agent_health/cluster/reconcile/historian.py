"""Every finished EvaluationRun recorded in the history (docs/operator.md, "The history").

When a run ends with graded cells, :meth:`Historian.remember` takes its grades as they are —
the very results its status counts — and records them into the history the operator was
given (``--history``, ``AGENT_HEALTH_HISTORY``): one run of the history per agent (an agent
matrix: one per agent, linked), each (test, repeat) a result row as a local run's, the
agent's pinned image as its identity, ``NAMESPACE/RUNSPEC`` as its suite. The run's id in
the history is ``NAMESPACE.NAME.UID`` (the EvaluationRun's names and its Kubernetes uid), so a
run recorded again — an operator that restarted mid-run and graded it again — is left as it
is. A run whose errored cells were requeued (``spec.requeueErrored``) ends again as its next
**attempt**: the same run, its errored grades replaced, so the history's run is replaced
too — its results and counts become the new attempt's, as the run's status did (a second
run of the same cells would count each cell the requeue left alone twice in trends and
flakiness). A run that ended with no graded cell (it could not start) records nothing.

Recording runs in a thread of its own, one run at a time: SQL over a file or a slow network
never holds the event loop, and a history that hangs holds up no grading. Once recorded,
the history keeps the run whatever happens to the EvaluationRun (its TTL, its deletion).

**The history is never why a run fails.** The run's phase, counts and grades are written
before it is recorded and never change for it. A history that cannot be written —
unreachable, locked, refused — is a ``Warning`` Event ``HistoryUnavailable``, a log line and
the condition ``Recorded=False`` (reason ``HistoryUnavailable``, the error and the next
try), and it is tried again after each of :data:`RETRY_DELAYS` (about an hour and a half in
all); then the run is given up on (``Recorded=False``, reason ``NotRecorded``, a Warning
Event). A recorded run gets ``Recorded=True`` and a ``Normal`` Event saying where.

The retries are the operator's own, not ``kopf.TemporaryError``: recording is not a handler
of a watched change but the end of a run whose grades the operator holds in memory; kopf's
retries would have nothing to record from. An operator that stops while a run waits for its
recording takes those grades with it; the next operator finds the run finished and still
owed (``Recorded=Unknown``, reason ``Recording``, written with the status that ended it; or
``Recorded=False``, reason ``HistoryUnavailable``), grades it again from its plan, its cells
and its ledger (:mod:`.recollection`) and records it — without touching its status but for
that condition.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agent_health import history
from agent_health.cluster import errors, kube
from agent_health.cluster.cells import manifests
from agent_health.cluster.reconcile import events, lifecycle, plan, status
from agent_health.cluster.reconcile import recollection as recollection_mod
from agent_health.engine import budget, reports

if TYPE_CHECKING:
    from agent_health.sdk import results

log = logging.getLogger("agent_health.operator")

CONDITION = "Recorded"
"""The EvaluationRun condition that says whether the run is in the history."""
UNAVAILABLE = "HistoryUnavailable"
"""Its reason while a try of the recording is still to come."""
RECORDING = "Recording"
"""Its reason (status ``Unknown``) from the run's end to the first try's outcome."""
RETRY_DELAYS: tuple[float, ...] = (15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 1800.0)
"""Seconds before each new try of a recording that failed; after the last, it is given up."""


@dataclasses.dataclass(frozen=True)
class Ended:
    """What a finished run records, taken from the operator's grades as the run ended."""

    run: str
    """``NAMESPACE/NAME`` of the EvaluationRun, for log lines."""
    uid: str
    """The run's id in the history: ``NAMESPACE.NAME.UID``."""
    suite: str
    """``NAMESPACE/RUNSPEC``: which suite, for trends and baselines."""
    results: tuple[results.TestResult, ...]
    repeats: int
    duration_ms: float
    interrupted: bool
    """The run failed before every cell was graded (its deadline, ...): what was graded."""
    stopped: str | None
    not_run: int
    budget: budget.Report | None
    provenance: reports.Provenance
    ledger_verified: bool | None = None
    """Whether every cell graded from the ledger verified its HMAC chain (``False``: one did
    not; ``None``: no cell was graded from a ledger)."""
    attempt: int = 0
    """``spec.requeueErrored`` as done when the run ended: its grades after that many
    requeues, which replace an earlier attempt's in the history."""
    regraded: bool = False
    """The grades were made again by an operator that started after the run ended
    (:mod:`.recollection`)."""


def history_uid(run: plan.Run) -> str:
    """The run's id in the history: its namespace, its name and its Kubernetes uid."""
    return f"{run.ref.namespace}.{run.ref.name}.{run.uid}"


def ended(run: plan.Run) -> Ended:
    """What ``run`` records, from its tally as it ended."""
    tally = run.tally
    graded = tuple(g.result for g in tally.grades)
    counts = tally.counts()
    start, end = tally.start_time, tally.completion_time or status.utcnow()
    failed = tally.phase == "Failed"
    stopped = None
    if failed:
        why = next((c for c in tally.conditions if c.type == "Failed"), None)
        stopped = f"{why.reason}: {why.message}" if why is not None else "Failed"
    spent = None
    if run.budget is not None:
        spent = run.budget.meter(graded, start).report(now=0.0)
    return Ended(
        run=f"{run.ref.namespace}/{run.ref.name}",
        uid=history_uid(run),
        suite=f"{run.ref.namespace}/{run.runspec}",
        results=graded,
        repeats=run.model.spec.repeats,
        duration_ms=(end - start).total_seconds() * 1000 if start is not None else 0.0,
        interrupted=failed,
        stopped=stopped,
        not_run=counts.pending + counts.queued + counts.running,
        budget=spent,
        provenance=_provenance(run, start, end),
        ledger_verified=verified(g.verified for g in tally.grades),
        attempt=tally.requeued_errored,
        regraded=run.regraded,
    )


def verified(cells: Iterable[bool | None]) -> bool | None:
    """A run's ledger verified when every cell graded from it did (the operator verified each
    cell's chain as it graded it); ``None`` when none was graded from a ledger."""
    said = [v for v in cells if v is not None]
    return all(said) if said else None


def _provenance(
    run: plan.Run, start: datetime.datetime | None, end: datetime.datetime
) -> reports.Provenance:
    """Which agent ran, judged by which model, over which tests: the RunSpec as the run used
    it (its images pinned by the digests its cells ran)."""
    spec, settings = run.spec, run.settings
    agents: list[reports.AgentInfo] = []
    judge = None
    if spec is not None:
        digests = spec.status.image_digests if spec.status else {}
        for name in plan.agents(run.model, spec):
            target = spec.for_agent(name).spec.target
            try:
                image: str | None = manifests.pinned(target.image, digests)
            except errors.ClusterError:  # not resolved: the run failed before its cells ran
                image = None
            agents.append(
                reports.AgentInfo(name=name or run.runspec, connector=target.connector, image=image)
            )
        model = manifests.judge_model(run.model, spec, settings) if settings else None
        own = spec.spec.judge
        judge = reports.JudgeInfo(
            provider=own.provider if own is not None and model is not None else None,
            model=model,
            skipped=model is None,
        )
    selection = run.model.spec.selection
    return reports.Provenance(
        run_id=history_uid(run),
        agent=agents[0] if agents else None,
        agents=agents if len(agents) > 1 else [],
        judge=judge,
        agent_health_version=reports.agent_health_version(),
        suite=reports.SuiteInfo(name=f"{run.ref.namespace}/{run.runspec}"),
        ledger=reports.redact_url(settings.ledger_url) if settings is not None else None,
        started_at=start,
        ended_at=end,
        selection=reports.Selection(
            grep=[selection.grep] if selection.grep else [], labels=list(selection.labels)
        ),
    )


def owed(run: plan.Run) -> bool:
    """Whether ``run`` (finished before this operator started) still waits for its
    recording: its ``Recorded`` condition says it was being recorded (``Recording``) or that
    a try was to come (``HistoryUnavailable``), not that it was recorded or given up on."""
    found = next((c for c in run.tally.conditions if c.type == CONDITION), None)
    if found is None:
        return False
    return (found.status, found.reason) in (("False", UNAVAILABLE), ("Unknown", RECORDING))


@dataclasses.dataclass
class Historian:
    """Records each finished run into the history at :attr:`where`; see the module docstring.
    ``where`` ``None``: no history, nothing is recorded."""

    board: lifecycle.Board
    where: history.Location | None
    retry_delays: tuple[float, ...] = RETRY_DELAYS
    recollection: recollection_mod.Recollection | None = None
    """Grades a run again whose recording an operator before this one left owed."""
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _opened: history.History | None = None

    def __post_init__(self) -> None:
        if self.where is not None:
            # One thread: recordings queue behind each other, never behind grading's threads.
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="history")

    def concluding(self, run: plan.Run) -> None:
        """The run is ending (its last status write follows): say that its recording is
        owed (``Recorded=Unknown``, reason ``Recording``), so that an operator that stops
        before the first try is said leaves the run owed to the next one, not forgotten."""
        attempt = run.tally.requeued_errored
        if self.where is None or run.remembered == attempt or not run.tally.grades:
            return
        message = f"being recorded in the history {self.where.shown}"
        run.tally.note(CONDITION, "Unknown", RECORDING, message)

    def remember(self, run: plan.Run) -> None:
        """The run ended: record its graded cells (once, in the background). A run that
        ended before this operator started and is still owed its recording is graded again
        first (:meth:`recollect`)."""
        attempt = run.tally.requeued_errored
        if self.where is None or run.remembered == attempt:
            return
        if not run.tally.grades:
            if owed(run) and self.recollection is not None and not run.regraded:
                run.remembered = attempt
                self.board.spawn(self.recollect(run))
            return
        run.remembered = attempt
        try:
            what = ended(run)
        except Exception as err:  # a bug of ours: said, and the run's end goes on
            log.exception(
                "EvaluationRun %s/%s not recorded in the history: %s",
                run.ref.namespace,
                run.ref.name,
                _named(err),
            )
            self.board.metrics.reconcile_error("history")
            return
        self.board.spawn(self.keep(run, what))

    async def recollect(self, run: plan.Run) -> None:
        """Grade ``run`` again (:mod:`.recollection`: it finished before this operator
        started, its grades lost with the operator before), then record it. An API server or
        a ledger store that fails is tried again after :attr:`retry_delays`; a run that
        cannot be graded again (its RunSpec, tests or ledger key gone) is given up on."""
        assert self.where is not None
        assert self.recollection is not None
        name = f"{run.ref.namespace}/{run.ref.name}"
        run.regraded = True
        tries = len(self.retry_delays) + 1
        for attempt in range(1, tries + 1):
            try:
                regraded = await self.recollection.regrade(run)
                break
            except (kube.ApiError, errors.LedgerUnavailable) as err:
                if attempt == tries or (isinstance(err, kube.ApiError) and not err.temporary):
                    why = str(err)
                else:
                    delay = self.retry_delays[attempt - 1]
                    log.warning(
                        "EvaluationRun %s cannot be graded again for the history yet "
                        "(%s); next try in %g s",
                        name,
                        err,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
            except errors.ClusterError as err:
                why = str(err)
            except Exception as err:  # a bug of ours: said, and the run is left as it was
                log.exception("EvaluationRun %s not graded again for the history", name)
                self.board.metrics.reconcile_error("history")
                why = _named(err)
            message = (
                f"not recorded in the history {self.where.shown}: its grades were lost with the "
                f"operator that stopped while it waited, and it cannot be graded again: {why}"
            )
            log.error("EvaluationRun %s %s", name, message)
            await self._say(run, "False", "NotRecorded", message, warning=True)
            return
        what = ended(run)
        if regraded.gap is not None:
            what = dataclasses.replace(what, interrupted=True, stopped=regraded.gap)
        await self.keep(run, what)

    async def keep(self, run: plan.Run, what: Ended) -> None:
        """Record ``what``, trying again after each of :attr:`retry_delays`; say how it went."""
        assert self.where is not None
        shown = self.where.shown
        tries = len(self.retry_delays) + 1
        for attempt in range(1, tries + 1):
            try:
                found = await self._in_thread(what)
            except Exception as err:  # a bug of ours must not leave the run unsaid either
                why = str(err) if isinstance(err, history.HistoryError) else _named(err)
                if attempt == tries:
                    message = (
                        f"not recorded in the history {shown}: gave up after {tries} attempts; "
                        f"the last: {why}"
                    )
                    log.error("EvaluationRun %s %s", what.run, message)
                    await self._say(run, "False", "NotRecorded", message, warning=True)
                    return
                delay = self.retry_delays[attempt - 1]
                message = (
                    f"not recorded in the history yet (attempt {attempt} of {tries}): {why}; "
                    f"next try in {delay:g} s"
                )
                log.warning("EvaluationRun %s %s", what.run, message)
                await self._say(run, "False", UNAVAILABLE, message, warning=True)
                await asyncio.sleep(delay)
                continue
            uids = ("run " if len(found) == 1 else "runs ") + ", ".join(
                sorted(r.uid for r in found)
            )
            if any(r.new for r in found):
                results = sum(r.results for r in found if r.new)
                message = f"recorded in the history {shown} as {uids}: {results} results"
                if what.regraded:
                    message += (
                        " (graded again from its ledger after an operator restart"
                        + (f"; {what.stopped}" if what.interrupted and what.stopped else "")
                        + ")"
                    )
                replaced = next((r for r in found if r.replaced is not None), None)
                if replaced is not None:
                    message += (
                        f" (attempt {replaced.attempt}, its requeued cells graded again: "
                        f"they replace attempt {replaced.replaced}'s)"
                    )
            else:  # recorded before (graded again after a restart): left as it was
                message = f"in the history {shown} already as {uids}"
            log.info("EvaluationRun %s %s", what.run, message)
            await self._say(run, "True", CONDITION, message, warning=False)
            return

    async def _in_thread(self, what: Ended) -> list[history.Recorded]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._record, what)

    def _record(self, what: Ended) -> list[history.Recorded]:
        """Open the history if it is not open yet, and record the run (blocking)."""
        assert self.where is not None
        if self._opened is None:
            self._opened = history.open_history(self.where)
        built = reports.RunReport.build(
            list(what.results),
            duration_ms=what.duration_ms,
            repeats=what.repeats,
            interrupted=what.interrupted,
            not_run=what.not_run,
            stopped=what.stopped,
            provenance=what.provenance,
            budget=what.budget,
        )
        context = history.RunContext(
            source="operator",
            uid=what.uid,
            suite=what.suite,
            ledger_verified=what.ledger_verified,
            attempt=what.attempt,
        )
        return self._opened.record(built, context)

    async def _say(
        self,
        run: plan.Run,
        state: status.ConditionStatus,
        reason: str,
        message: str,
        *,
        warning: bool,
    ) -> None:
        """The condition ``Recorded`` on the run, and an Event (the run may be gone by now:
        the history keeps it all the same)."""
        board = self.board
        run.tally.note(CONDITION, state, reason, message)
        kind: events.EventType = "Warning" if warning else "Normal"
        emit = board.recorder.event(run.involved, kind, reason, message, action="Record")
        await board.event(emit)
        wire = run.tally.wire
        stored = run.model.status
        if run.regraded and stored is not None:
            # Graded again for the history alone: the status stays the one the run ended
            # with, only this condition changes.
            def wire() -> dict[str, Any]:
                return stored.model_copy(update={"conditions": run.tally.conditions}).wire()

        try:
            await board.status.flush(run.ref, wire)
        except kube.ApiError as err:
            if err.status == 404:  # deleted meanwhile: nothing to say it on
                board.status.forget(run.ref)
            else:
                board.metrics.reconcile_error("history")

    async def close(self) -> None:
        """Close the history (the operator stops); a recording in flight is abandoned."""
        if self._pool is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._close)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _close(self) -> None:
        if self._opened is not None:
            self._opened.close()
            self._opened = None


def _named(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
