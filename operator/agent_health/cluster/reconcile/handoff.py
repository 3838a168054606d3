"""From an ended cell to its grade, and from a freed slot to the next cell.

A cell that ended is graded from its ledger (:func:`.grading.grade_cell`; a ledger that
cannot be read yet is read again, up to :data:`LEDGER_READS` times, then the cell is
``errored``); a cell the infrastructure failed (:mod:`.observed`) is graded by
:func:`.grading.grade_failed_pod`. The grade is folded into the run's tally
(:meth:`Handoff.record`). When the run's retry policy allows, an infrastructure failure is
retried: the cell is deleted and, once the deletion is seen, recreated with the next
``agenthealth.dev/attempt``. A test that ran is never retried. Otherwise its slot is free
and :meth:`Handoff.fill` creates the next queued cell, keeping ``parallelism`` of them going.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.cells import manifests, observed
from agent_health.cluster.grading import grading
from agent_health.cluster.reconcile import creation, lifecycle, plan
from agent_health.ledger import keys

LEDGER_READS = 5


@dataclasses.dataclass
class Handoff:
    """Grades ended cells, retries or frees their slots; see the module docstring."""

    board: lifecycle.Board
    creator: creation.Creator

    # -- slots -----------------------------------------------------------------------------

    def fill(self, run: plan.Run) -> None:
        """Start queued cells until ``parallelism`` of them are active."""
        while run.queue and len(run.active) < run.model.spec.parallelism:
            cell = run.cells[run.queue.popleft()]
            cell.state = "active"
            run.active.add(cell.name)
            self.board.spawn(self.launch(run, cell))
        depth = sum(len(r.queue) for r in self.board.runs.values())
        self.board.metrics.set_queue_depth("cells", depth)

    async def launch(self, run: plan.Run, cell: plan.Cell) -> None:
        """Create the cell; one that cannot be created is an infrastructure failure."""
        failure = await self.creator.create(run, cell)
        if failure is not None:
            await self.infra(run, cell, {}, failure)

    # -- grading ---------------------------------------------------------------------------

    async def grade(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        """Grade an ended cell: from its ledger, or as an infrastructure failure."""
        failure = observed.infra_failure(body)
        if failure is not None:
            return await self.infra(run, cell, body, failure)
        assert run.backend is not None
        grade: grading.CellGrade | None = None
        for attempt in range(LEDGER_READS):
            try:
                ledger_cell = manifests.ledger_cell(cell.name, cell.attempt)
                grade = await grading.grade_cell(
                    run.backend,
                    cell.name,
                    keys.cell_key(run.key, ledger_cell),  # that attempt's key alone verifies it
                    plan.expected(cell),
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
            cell.name, plan.expected(cell), reason, cause=cause, attempt=cell.attempt,
            policy=run.model.spec.retry,
        )  # fmt: skip
        if delete and not grade.retryable:
            resource = lifecycle.resource_of(run)
            await self.board.api.delete(resource, run.ref.namespace, cell.name)
        await self.record(run, cell, grade)

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
        if grade.retryable:
            cell.state, cell.attempt = "replacing", cell.attempt + 1
            board.spawn(self._retry(run, cell, grade.retry_after_seconds or 0.0))
        else:
            cell.state = "done"
            run.active.discard(cell.name)
            self.fill(run)
        await board.changed(run)

    async def _retry(self, run: plan.Run, cell: plan.Cell, delay: float) -> None:
        await asyncio.sleep(delay)
        resource = lifecycle.resource_of(run)
        if not await self.board.api.delete(resource, run.ref.namespace, cell.name):
            await self.launch(run, cell)  # already gone: no DELETED event will come
