"""From an ended cell to its grade, and from a freed slot to the next cell.

A cell that ended is graded from its ledger (:func:`.grading.grade_cell`; a ledger that
cannot be read yet is read again, up to :data:`LEDGER_READS` times, then the cell is
``errored``); a cell the infrastructure failed (:mod:`.observed`) is graded by
:func:`.grading.grade_failed_pod`. The grade is folded into the run's tally
(:meth:`Handoff.record`). When the run's retry policy allows, an infrastructure failure is
retried: the cell is deleted and, once the deletion is seen, recreated with the next
``agenthealth.dev/attempt``. A test that ran is never retried. Otherwise its slot is free
and :meth:`Handoff.fill` creates the next queued cell, keeping ``parallelism`` of them going.

Every cell ends: one still going :data:`DEADLINE_GRACE` seconds past its
``activeDeadlineSeconds`` is errored (cause ``deadline``) and deleted, and one whose
background work failed (an operator error) is errored with that error, so its run goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Coroutine, Mapping
from typing import Any

from agent_health import ledger
from agent_health.cluster import errors, kube
from agent_health.cluster.cells import cellpod, manifests, observed
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import collector, creation, lifecycle, plan, status
from agent_health.cluster.reconcile import pools as pools_mod
from agent_health.engine import budget
from agent_health.ledger import keys

LEDGER_READS = 5
DEADLINE_GRACE = 60.0


@dataclasses.dataclass
class Handoff:
    """Grades ended cells, retries or frees their slots; see the module docstring."""

    board: lifecycle.Board
    creator: creation.Creator
    pools: pools_mod.Pools
    deadline_grace: float = DEADLINE_GRACE
    """Seconds past a cell's ``activeDeadlineSeconds`` before the operator ends it itself."""

    # -- slots -----------------------------------------------------------------------------

    def fill(self, run: plan.Run) -> None:
        """Start queued cells until ``parallelism`` of them are active; once ``spec.budget``
        is reached, none: every queued cell is graded ``skipped`` (reason ``budget``). A
        suspended run (``spec.suspend``) starts none."""
        if run.model.spec.suspend:
            return
        if run.queue and run.tally.over_budget():
            while run.queue:
                cell = run.cells[run.queue.popleft()]
                cell.state = "done"
                grade = plan.skipped(cell, budget.SKIP_REASON)
                run.tally.record(grade)
                self.board.metrics.observe_grade(
                    run.ref.namespace, run.runspec, run.ref.name, grade
                )
                if run.budget is not None:
                    run.budget.skipped += 1
        while run.queue and len(run.active) < run.model.spec.parallelism:
            cell = run.cells[run.queue.popleft()]
            cell.state = "active"
            run.active.add(cell.name)
            self.spawn(run, cell, self.launch(run, cell))
        depth = sum(len(r.queue) for r in self.board.runs.values())
        self.board.metrics.set_queue_depth("cells", depth)

    async def launch(self, run: plan.Run, cell: plan.Cell) -> None:
        """Create the cell; one that cannot be created is an infrastructure failure."""
        cell.held = False  # a new attempt: its own pod says whether Kueue holds it
        failure = await self.creator.create(run, cell)
        if failure is not None:
            await self.infra(run, cell, {}, failure)
        elif self.board.live(run) and cell.state == "active" and not plan.queued(run):
            self.keep_deadline(run, cell, None)  # a queued cell's starts once Kueue admits it

    def spawn(self, run: plan.Run, cell: plan.Cell, work: Coroutine[Any, Any, None]) -> None:
        """Run work of one cell in the background; if it fails, the cell ends errored."""

        async def recover(err: Exception) -> None:
            if self.board.live(run) and cell.state in ("active", "ended"):
                why = f"the operator failed on this cell: {type(err).__name__}: {err}"
                await self.infra(run, cell, cell.last or {}, ("other", why))

        self.board.spawn(work, recover=recover)

    async def assign(self, run: plan.Run, cell: plan.Cell, claim: dict[str, Any]) -> None:
        """Hand a warm-pool cell's bound sandbox its cell; a failure ends the attempt."""
        failure = await self.pools.assign(run, cell, claim)
        if failure is not None:
            await self.infra(run, cell, claim, failure, delete=True)

    # -- deadlines -------------------------------------------------------------------------

    def keep_deadline(
        self, run: plan.Run, cell: plan.Cell, created: datetime.datetime | None
    ) -> None:
        """End the cell (errored, cause ``deadline``) if it is still going past its deadline.

        The kubelet enforces a pod's ``activeDeadlineSeconds`` only once the pod started;
        this covers the rest (a pod never scheduled, a lost node, a Sandbox).
        """
        assert run.spec is not None
        assert run.settings is not None
        if cell.timed == cell.attempt:
            return  # one timer per attempt, whoever saw it start first
        cell.timed = cell.attempt
        seconds = cellpod.deadline_seconds(run.model, run.spec, run.settings)
        since = created or status.utcnow()
        left = (since - status.utcnow()).total_seconds() + seconds + self.deadline_grace
        attempt = cell.attempt

        def overdue() -> None:
            if self.board.live(run) and cell.attempt == attempt and cell.state == "active":
                why = f"the cell did not end within its deadline ({seconds} s)"
                work = self.infra(run, cell, cell.last or {}, ("deadline", why), delete=True)
                self.spawn(run, cell, work)

        cell.deadline = self.board.spawn(self.board.later(max(left, 0.0), overdue))

    # -- grading ---------------------------------------------------------------------------

    async def grade(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        """Grade an ended cell: from its ledger, or as an infrastructure failure."""
        failure = observed.infra_failure(body)
        if failure is not None:
            return await self.infra(run, cell, body, failure)
        assert run.backend is not None
        if run.collector is not None:
            return await self.record(run, cell, await self._collected(run, cell))
        grade: grading.CellGrade | None = None
        for attempt in range(LEDGER_READS):
            try:
                ledger_cell = manifests.ledger_cell(cell.name, cell.attempt)
                grade = await grading.grade_cell(
                    run.backend,
                    cell.name,
                    keys.cell_key(run.key, ledger_cell),  # that attempt's key alone verifies it
                    plan.expected(cell, plan.peer_tools(run.spec), plan.mcp_peers(run.spec)),
                    ledger_cell=ledger_cell,
                )
                break
            except errors.LedgerUnavailable as err:
                if attempt + 1 == LEDGER_READS:
                    grade = plan.unreadable(cell, str(err), run.model.spec.retry)
                else:
                    await asyncio.sleep(min(2**attempt, 30))
            except Exception as err:  # a bug or a broken backend must not leave the cell hanging
                grade = plan.unreadable(cell, f"{type(err).__name__}: {err}", run.model.spec.retry)
                break
        assert grade is not None
        await self.record(run, cell, grade)

    async def _collected(self, run: plan.Run, cell: plan.Cell) -> grading.CellGrade:
        """Grade a cell of a ConfigMap ledger: its records from its gateway's log, stored in
        the run's ConfigMap (with other cells'), then graded as stored."""
        assert run.collector is not None
        ledger_cell = manifests.ledger_cell(cell.name, cell.attempt)
        policy = run.model.spec.retry
        lines: list[str] | None = None
        for attempt in range(LEDGER_READS):
            try:
                pod = cell.pod or cell.name
                lines = await collector.read(self.board.api, run.ref.namespace, pod, ledger_cell)
                break
            except ledger.LedgerLogError as err:  # missing or cut: never graded
                return plan.lost(cell, str(err), policy)
            except kube.ApiError as err:
                if not err.temporary or attempt + 1 == LEDGER_READS:
                    why = f"cannot read the gateway's log: {err}"
                    return plan.lost(cell, why, policy)
                await asyncio.sleep(min(2**attempt, 30))
        assert lines is not None
        try:
            await run.collector.store(ledger_cell, lines)
        except ledger.LedgerError as err:
            return plan.lost(cell, f"cannot store its records in the ledger: {err}", policy)
        key = keys.cell_key(run.key, ledger_cell)  # that attempt's key alone verifies it
        expected = plan.expected(cell, plan.peer_tools(run.spec), plan.mcp_peers(run.spec))
        return await asyncio.to_thread(grading.grade_lines, cell.name, lines, key, expected)

    async def infra(
        self,
        run: plan.Run,
        cell: plan.Cell,
        body: Mapping[str, Any],
        failure: observed.Failure,
        *,
        delete: bool = False,
    ) -> None:
        """Grade a cell the infrastructure failed (and delete it if asked and not retried)."""
        cause, reason = failure
        cell.state = "ended"
        run.tally.ended(cell.name)
        grade = grading.grade_failed_pod(
            cell.name,
            plan.expected(cell),
            reason,
            cause=cause,
            attempt=cell.retries,
            policy=run.model.spec.retry,
        )
        if delete and not grade.retryable:
            resource = lifecycle.resource_of(run)
            try:
                await self.board.api.delete(resource, run.ref.namespace, cell.name)
            except kube.ApiError:  # graded all the same; the run's deletion collects it
                self.board.metrics.reconcile_error("cell-delete")
        await self.record(run, cell, grade)

    def preempted(self, run: plan.Run, cell: plan.Cell, body: Mapping[str, Any], why: str) -> None:
        """Kueue preempted the cell's pod (:func:`.kueue.preempted`): plan the cell again as
        its next attempt, at once, so that no later event of that pod grades it. The slot
        stays the cell's; the next attempt is created once the pod is gone (its DELETED
        event, :mod:`.reactions`), never beside it. A preemption is no infrastructure
        failure: it costs none of ``spec.retry.infraRetries`` and is never ``errored``."""
        cell.state, cell.attempt = "replacing", cell.attempt + 1
        cell.preempted += 1
        run.tally.requeued(cell.name)
        if cell.token is not None:
            self.board.tokens.pop(cell.token, None)
            cell.token = None
        self.board.metrics.cell_preempted(run.ref.namespace, run.runspec)
        self.board.spawn(
            self.board.event(self.board.recorder.cell_preempted(run.involved, cell.name, why))
        )
        self.board.spawn(self.board.changed(run))
        if not (body.get("metadata") or {}).get("deletionTimestamp"):
            # Kueue deletes it next; deleting it too changes nothing, and nothing waits on
            # Kueue for the cell to go on.
            self.spawn(run, cell, self._delete(run, cell.name))

    def relaunch(self, run: plan.Run, cell: plan.Cell) -> None:
        """The old object of a replacing cell is gone: its next attempt starts — unless the
        run is suspended, when it waits at the head of the queue (its slot freed)."""
        if run.model.spec.suspend:
            cell.state = "queued"
            run.active.discard(cell.name)
            run.queue.appendleft(cell.name)
            return
        self.spawn(run, cell, self.launch(run, cell))

    def requeued_gone(self, run: plan.Run, cell: plan.Cell) -> None:
        """The old object of a requeued (errored) cell is gone: it queues for a slot."""
        cell.state = "queued"
        run.queue.append(cell.name)
        self.fill(run)

    def suspend(self, run: plan.Run) -> int:
        """``spec.suspend``: every running cell is stopped and planned again as its next
        attempt, as a preemption (no ``infraRetries`` spent, never ``errored``); how many."""
        # An ended cell is being graded (its test ran): only the ones running are stopped.
        stopped = [run.cells[n] for n in sorted(run.active) if run.cells[n].state == "active"]
        for cell in stopped:
            cell.state, cell.attempt = "replacing", cell.attempt + 1
            cell.preempted += 1
            run.tally.requeued(cell.name)
            if cell.token is not None:
                self.board.tokens.pop(cell.token, None)
                cell.token = None
            if cell.deadline is not None:
                cell.deadline.cancel()
                cell.deadline = None
            self.spawn(run, cell, self._delete(run, cell.name))
        return len(stopped)

    async def requeue(self, run: plan.Run) -> int:
        """``spec.requeueErrored``: every cell graded ``errored`` runs again as its next
        attempt (its grade dropped); its old object is deleted first. How many."""
        again = [
            cell
            for cell in run.cells.values()
            if cell.state == "done"
            and (grade := run.tally.grade_of(cell.name)) is not None
            and grade.status == "errored"
        ]
        resource = lifecycle.resource_of(run)
        for cell in again:
            run.tally.unrecord(cell.name)
            cell.state, cell.attempt = "requeued", cell.attempt + 1
            try:
                gone = not await self.board.api.delete(resource, run.ref.namespace, cell.name)
            except kube.ApiError as err:
                why = f"cannot delete the errored attempt to run it again: {err}"
                cell.state = "active"
                run.active.add(cell.name)
                await self.infra(run, cell, {}, ("other", why))
                continue
            if gone:  # no DELETED event will come
                self.requeued_gone(run, cell)
        return len(again)

    async def _delete(self, run: plan.Run, name: str) -> None:
        try:
            await self.board.api.delete(lifecycle.resource_of(run), run.ref.namespace, name)
        except kube.ApiError:
            self.board.metrics.reconcile_error("cell-delete")

    async def record(self, run: plan.Run, cell: plan.Cell, grade: grading.CellGrade) -> None:
        """Fold the grade in; retry the cell or free its slot."""
        board = self.board
        if not board.live(run):
            return  # deleted meanwhile
        run.tally.record(grade)
        board.metrics.observe_grade(run.ref.namespace, run.runspec, run.ref.name, grade)
        emit = board.recorder.cell_errored(run.involved, grade)
        if emit is not None:
            board.spawn(board.event(emit))
        if cell.token is not None:
            board.tokens.pop(cell.token, None)
            cell.token = None
        if cell.deadline is not None:  # the attempt ended: its timer is not kept to the end
            cell.deadline.cancel()
            cell.deadline = None
        if grade.retryable:
            cell.state, cell.attempt = "replacing", cell.attempt + 1
            self.spawn(run, cell, self._retry(run, cell, grade.retry_after_seconds or 0.0))
        else:
            cell.state = "done"
            # Its last pod as watched (about 40 KB as Python objects) is read no more.
            cell.last = None
            run.active.discard(cell.name)
            self.fill(run)
        await board.changed(run)

    async def _retry(self, run: plan.Run, cell: plan.Cell, delay: float) -> None:
        await asyncio.sleep(delay)
        resource = lifecycle.resource_of(run)
        try:
            deleted = await self.board.api.delete(resource, run.ref.namespace, cell.name)
        except kube.ApiError as err:
            cell.state = "active"  # the old attempt stays: end the cell instead of waiting
            why = f"cannot delete the failed attempt to retry it: {err}"
            return await self.infra(run, cell, cell.last or {}, ("other", why))
        if not deleted:
            self.relaunch(run, cell)  # already gone: no DELETED event will come
