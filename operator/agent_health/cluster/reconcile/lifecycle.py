"""The life of a started run: its status and Events, its end, and the work in flight for it.

:class:`Board` is what the other parts of the scheduler share: every run this operator
drives, the controller token of each live cell (the judge service's allow-list), and the
background tasks. It writes a run's status through :class:`.batcher.StatusBatcher` (at
most one patch per run per interval, 1 s to 10 s as its parallelism grows; a phase change
and the last one at once), posts an Event on each phase change, and when the run ends
forgets it, hands its grades to the history (:mod:`.historian`), closes its ledger backend
and, after ``ttlSecondsAfterFinished``, deletes its cells (their own token Secrets go with
them; its shared ones stay with it).
Every run ends: when its ``activeDeadlineSeconds`` (counted from its creation) pass, the
cells still running are deleted and the run fails with reason ``DeadlineExceeded``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from agent_health.cluster import kube, metrics
from agent_health.cluster.cells import manifests
from agent_health.cluster.reconcile import batcher, events, plan
from agent_health.cluster.reconcile import collector as collector_mod
from agent_health.cluster.reconcile import status as status_mod
from agent_health.ledger import store

Recovery = Callable[[Exception], Coroutine[Any, Any, None]]
"""What to do when a background task failed (e.g. grade its cell as errored)."""


@dataclasses.dataclass
class Board:
    """Every run this operator drives, and what happens to them as a whole."""

    api: kube.Client
    status: batcher.StatusBatcher
    metrics: metrics.OperatorMetrics
    recorder: events.EventRecorder
    runs: dict[batcher.RunRef, plan.Run] = dataclasses.field(default_factory=dict)
    tokens: dict[str, batcher.RunRef] = dataclasses.field(default_factory=dict)
    """The controller token of each live cell → its run."""
    release: Callable[[plan.Run], Coroutine[Any, Any, None]] | None = None
    """What to do with an ended run's warm pools (:meth:`.pools.Pools.release`)."""
    remember: Callable[[plan.Run], None] | None = None
    """What to do with an ended run's grades (:meth:`.historian.Historian.remember`)."""
    concluding: Callable[[plan.Run], None] | None = None
    """What to note on a run's status as it ends, in the status write that ends it
    (:meth:`.historian.Historian.concluding`: its recording is owed)."""
    _tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    _deadlines: dict[str, asyncio.Task[None]] = dataclasses.field(default_factory=dict)

    def live(self, run: plan.Run) -> bool:
        """Whether ``run`` is still driven (not deleted, not ended, not replaced)."""
        return self.runs.get(run.ref) is run

    # -- status and events -----------------------------------------------------------------

    async def changed(self, run: plan.Run) -> None:
        """The run's tally changed: post an Event on a new phase and write the status — at
        once on a new phase, else within the run's status interval."""
        phase = run.tally.phase
        moved = phase is not None and run.phase != phase
        if phase is not None and moved:
            emit = self.recorder.phase_changed(run.involved, run.phase, phase)
            run.phase = phase
            self.spawn(self.event(emit))
        if run.tally.phase in status_mod.TERMINAL:
            if self.concluding is not None:
                self.concluding(run)
            await self.status.flush(run.ref, lambda: self._snapshot(run))
            self.finished(run)
        elif moved:
            await self.status.flush(run.ref, lambda: self._snapshot(run))
        else:
            await self.status.update(run.ref, lambda: self._snapshot(run))

    def _snapshot(self, run: plan.Run) -> dict[str, Any]:
        def describe(name: str) -> tuple[str, int, str | None]:
            cell = run.cells[name]
            return cell.test.id, cell.repeat, cell.agent

        current = run.tally.status(describe)
        self.metrics.observe_run(run.ref.namespace, run.runspec, run.ref.name, current)
        return current.wire()

    async def fail(self, run: plan.Run, reason: str, message: str) -> None:
        """The run cannot be executed: ``Failed`` with ``reason`` (CamelCased) and ``message``."""
        run.tally.fail(plan.reason(reason), message)
        await self.changed(run)

    async def event(self, emit: events.Emit) -> None:
        """Post (or bump) one Event; a refusal only counts as a reconcile error."""
        try:
            if emit.action == "bump" and emit.patch is not None:
                try:
                    await self.api.patch(kube.EVENTS, emit.namespace, emit.name, emit.patch)
                    return
                except kube.ApiError as err:
                    if err.status != 404:
                        raise
            await self.api.create(kube.EVENTS, emit.namespace, emit.body)
        except kube.ApiError:
            self.metrics.reconcile_error("event")

    # -- the end ---------------------------------------------------------------------------

    def finished(self, run: plan.Run) -> None:
        """The run is over: nothing more to schedule; its cells wait for the TTL, if any."""
        if self.live(run):
            del self.runs[run.ref]
        self._drop_deadline(run.uid)
        self.drop_tokens(run)
        if run.pools and self.release is not None:
            self.spawn(self.release(run))
        if run.backend is not None:
            self.spawn(_close(run.collector, run.backend))
            run.backend, run.collector = None, None
        ttl = run.model.spec.ttl_seconds_after_finished
        if ttl is not None:
            done = run.tally.completion_time or status_mod.utcnow()
            left = (done - status_mod.utcnow()).total_seconds() + ttl
            self.spawn(self.later(max(left, 0.0), lambda: self.spawn(self._expire(run))))
        if self.remember is not None:
            self.remember(run)

    def keep_deadline(self, run: plan.Run, created: datetime.datetime | None) -> None:
        """End the run when its ``activeDeadlineSeconds`` have passed since ``created``
        (one timer per run, whichever attempt of its start handler set it)."""
        if run.uid in self._deadlines:
            return
        left = deadline_left(run, created)
        task = asyncio.ensure_future(self._at_deadline(run.ref, run.uid, left))
        self._deadlines[run.uid] = task
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, None))

    def pause_deadline(self, run: plan.Run) -> None:
        """``spec.suspend``: the run's ``activeDeadlineSeconds`` stop counting."""
        self._drop_deadline(run.uid)

    def restart_deadline(self, run: plan.Run) -> None:
        """Resumed: its ``activeDeadlineSeconds`` count again from now (as a Job's do)."""
        self._drop_deadline(run.uid)
        self.keep_deadline(run, status_mod.utcnow())

    async def _at_deadline(self, ref: batcher.RunRef, uid: str, left: float) -> None:
        await asyncio.sleep(max(left, 0.0))
        self._deadlines.pop(uid, None)
        run = self.runs.get(ref)
        if run is not None and run.uid == uid:
            await self._overdue(run)

    async def _overdue(self, run: plan.Run) -> None:
        seconds = run.model.spec.active_deadline_seconds
        stopped = sorted(run.active)
        counts = run.tally.counts()
        graded = counts.passed + counts.failed + counts.errored + counts.skipped
        if run.started:
            message = (
                f"activeDeadlineSeconds ({seconds} s) passed: {graded} of {counts.total} cells "
                f"graded, {len(stopped)} running stopped, {counts.pending} never started"
            )
        else:
            message = f"activeDeadlineSeconds ({seconds} s) passed before the run could start"
        await self.fail(run, "DeadlineExceeded", message)
        resource = resource_of(run)
        for name in stopped:
            try:
                await self.api.delete(resource, run.ref.namespace, name)
            except kube.ApiError:
                self.metrics.reconcile_error("deadline")

    def forget(self, body: Mapping[str, Any]) -> None:
        """The run was deleted: stop scheduling it (its cells are garbage-collected)."""
        ref = batcher.RunRef.of(body)
        run = self.runs.pop(ref, None)
        if run is not None:
            self.drop_tokens(run)
        self._drop_deadline(str((body.get("metadata") or {}).get("uid")))
        runspec_name = str(((body.get("spec") or {}).get("runSpecRef") or {}).get("name") or "")
        self.metrics.forget_run(ref.namespace, runspec_name, ref.name)
        self.status.forget(ref)

    async def _expire(self, run: plan.Run) -> None:
        """``ttlSecondsAfterFinished``: delete the cells (their own token Secrets go with
        them). The run's shared token Secrets stay with the run, as its ledger key does: that
        key derives every cell's, and the dead cells' tokens open nothing."""
        labels = manifests.run_labels(run.model, "cell")
        resource = resource_of(run)
        for body in await self.api.list(resource, run.ref.namespace, labels):
            if plan.owned_by(body, run.uid):
                await self.api.delete(resource, run.ref.namespace, body["metadata"]["name"])

    def _drop_deadline(self, uid: str) -> None:
        task = self._deadlines.pop(uid, None)
        if task is not None:
            task.cancel()

    def drop_tokens(self, run: plan.Run) -> None:
        for cell in run.cells.values():
            if cell.token is not None:
                self.tokens.pop(cell.token, None)
                cell.token = None

    # -- work in flight --------------------------------------------------------------------

    async def later(self, delay: float, then: Callable[[], object]) -> None:
        await asyncio.sleep(delay)
        then()

    def spawn(
        self, work: Coroutine[Any, Any, None], *, recover: Recovery | None = None
    ) -> asyncio.Task[None]:
        """Run ``work`` in the background; a failure counts as a reconcile error and, with
        ``recover``, is handed to it (so that a cell whose work failed still ends)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, recover))
        return task

    def _done(self, task: asyncio.Task[None], recover: Recovery | None) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        failure = task.exception()
        if failure is not None:
            self.metrics.reconcile_error("runs")
            if recover is not None and isinstance(failure, Exception):
                self.spawn(recover(failure))

    async def close(self) -> None:
        """Cancel every pending task (the operator stops)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for run in self.runs.values():
            if run.backend is not None:
                await _close(run.collector, run.backend)


async def _close(collector: collector_mod.Collector | None, backend: store.Backend) -> None:
    """Store what the run's collector still holds, then close its ledger."""
    try:
        if collector is not None:
            await collector.close()
    finally:
        await backend.close()


def resource_of(run: plan.Run) -> kube.Resource:
    """The kind of object the run's cells are: Pods, Agent Sandboxes, or claims on a warm
    pool of them."""
    if run.spec is not None and run.spec.spec.isolation.warm_pool is not None:
        return kube.SANDBOX_CLAIMS
    sandboxed = run.spec is not None and run.spec.spec.isolation.mode == "agentSandbox"
    return kube.SANDBOXES if sandboxed else kube.PODS


def deadline_left(run: plan.Run, created: datetime.datetime | None) -> float:
    """Seconds until the run's ``activeDeadlineSeconds`` pass (counted from ``created``)."""
    start = created or status_mod.utcnow()
    seconds = run.model.spec.active_deadline_seconds
    return (start - status_mod.utcnow()).total_seconds() + seconds
