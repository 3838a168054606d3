"""The per-run scheduler: plan cells, keep ``parallelism`` of them going, grade each once.

:class:`Runs` is what the kopf handlers, the judge service and the operator see; it wires
the parts, each in its own module:

==================  ============================================================================
:mod:`.intake`      starting a run: wait for the RunSpec, plan, ledger key, NetworkPolicy
:mod:`.adoption`    taking over the cells that exist after a restart
:mod:`.reactions`   what a cell's watch event means (ended, running, stuck, deleted)
:mod:`.handoff`     grading an ended cell, retrying it, starting the next one
:mod:`.creation`    creating one cell (and its own token Secret, for a retry)
:mod:`.keyring`     the run's shared token Secrets: tokens and ledger keys of its cells
:mod:`.historian`   each finished run recorded in the history (``--history``)
:mod:`.recollection` a finished run graded again for the recording it is owed after a restart
:mod:`.lifecycle`   the runs driven, their status, Events, end, and the work in flight
==================  ============================================================================

The arrows go down that table (an import-linter contract keeps them so); a part calls one
above it only through what it was handed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent_health import history
from agent_health.cluster import kube, metrics
from agent_health.cluster.api import evaluationrun, meta, runspec
from agent_health.cluster.cells import manifests
from agent_health.cluster.reconcile import (
    adoption,
    batcher,
    creation,
    events,
    handoff,
    historian,
    intake,
    keyring,
    lifecycle,
    listing,
    plan,
    policy,
    pools,
    reactions,
    recollection,
)
from agent_health.cluster.reconcile import status as status_mod

log = logging.getLogger("agent_health.operator")

SUSPENDED = "Suspended"
"""The condition of a run ``spec.suspend`` holds (as a suspended Job's)."""
TAKEOVER_WINDOW = 300.0
"""The longest a restarted operator treats an unknown judge token as possibly a cell of a run
it has not taken over yet (see :meth:`Runs.taking_over`)."""


@dataclasses.dataclass(frozen=True)
class Judged:
    """A live cell's run, as the judge service sees it."""

    ref: batcher.RunRef
    spec_name: str
    """Its RunSpec's name (in the run's namespace)."""
    judge: runspec.Judge | None
    """Its RunSpec's judge (``None``: it names none)."""
    skip_judge: bool


@dataclasses.dataclass
class Runs:
    """Every run this operator drives; see the module docstring."""

    api: kube.Client
    settings: manifests.Settings
    discoveries: listing.Discoveries
    status: batcher.StatusBatcher
    metrics: metrics.OperatorMetrics
    recorder: events.EventRecorder
    policy: policy.Policy = dataclasses.field(default_factory=policy.Policy)
    bulletin: plan.Bulletin = dataclasses.field(default_factory=plan.Bulletin)
    history: history.Location | None = None
    """Where each finished run is recorded (``--history``); ``None``: nowhere."""
    history_retry: tuple[float, ...] = historian.RETRY_DELAYS
    clock: Callable[[], float] = time.monotonic
    expected: set[batcher.RunRef] = dataclasses.field(default_factory=set)
    """Runs unfinished when the operator started and not taken over yet (see :meth:`expect`)."""
    _expected_until: float = 0.0
    _taken_over: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once every run of :attr:`expected` is taken over (or forgotten)."""
    board: lifecycle.Board = dataclasses.field(init=False)
    warm_pools: pools.Pools = dataclasses.field(init=False)
    intake: intake.Intake = dataclasses.field(init=False)
    reactions: reactions.Reactions = dataclasses.field(init=False)
    historian: historian.Historian = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.board = lifecycle.Board(self.api, self.status, self.metrics, self.recorder)
        again = recollection.Recollection(
            self.board, self.settings, self.discoveries, self.policy.ledger_options
        )
        self.historian = historian.Historian(self.board, self.history, self.history_retry, again)
        self.board.remember = self.historian.remember
        self.board.concluding = self.historian.concluding
        creator = creation.Creator(self.board, keyring.Keyring(self.board))
        chosen = self.policy
        self.warm_pools = pools.Pools(self.board, chosen.fence)
        self.board.release = self.warm_pools.release
        handing = handoff.Handoff(self.board, creator, self.warm_pools, chosen.deadline_grace)
        self.reactions = reactions.Reactions(self.board, handing, chosen.stuck_grace, self.clock)
        self.intake = intake.Intake(
            self.board,
            self.settings,
            self.discoveries,
            handing,
            self.reactions,
            adoption.Adoption(self.board, creator, self.reactions, handing),
            chosen,
            bulletin=self.bulletin,
        )

    @property
    def runs(self) -> dict[batcher.RunRef, plan.Run]:
        """The runs being driven, by reference."""
        return self.board.runs

    @property
    def tokens(self) -> dict[str, batcher.RunRef]:
        """The controller token of each live cell → its run."""
        return self.board.tokens

    def authorize(self, token: str | None) -> bool:
        """The judge service's check: the controller token of a live cell."""
        return token is not None and token in self.board.tokens

    def judge_of(self, token: str | None) -> Judged | None:
        """A live cell's run and what the judge service needs of it (``None``: not a live
        cell's token)."""
        ref = self.board.tokens.get(token) if token is not None else None
        run = self.board.runs.get(ref) if ref is not None else None
        if ref is None or run is None or run.spec is None:
            return None
        return Judged(ref, run.runspec, run.spec.spec.judge, run.model.spec.skip_judge)

    async def starting(self, namespace: str | None, *, warm_pools: bool = False) -> None:
        """What the operator finds as it starts: the runs it must take over before it knows
        their cells (:meth:`expect`), and with ``warm_pools`` the pools the operator before it
        may have stopped before scaling down (:meth:`.pools.Pools.sweep`, once those runs are
        taken over: a pool one of them uses stays up)."""
        try:
            self.expect(await self.api.list(kube.EVALUATIONRUNS, namespace, {}))
        except kube.ApiError as err:
            log.warning(
                "cannot list EvaluationRuns at start (%s); judge calls of cells of "
                "runs not yet taken over are refused",
                err,
            )
        if warm_pools:
            self.board.spawn(self._sweep(namespace))

    async def _sweep(self, namespace: str | None) -> None:
        """Once every run found at start is taken over (its pools known as used), or given up
        on: the pools left up."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._taken_over.wait(), TAKEOVER_WINDOW)
        try:
            await self.warm_pools.sweep(namespace)
        except kube.ApiError as err:
            log.warning(
                "cannot list SandboxWarmPools (%s); a pool left up by the operator "
                "before stays up until a run of its RunSpec ends",
                err,
            )

    def expect(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """The runs that exist as the operator starts. Until each is taken over (its cells'
        tokens read back), a judge call from one of its cells cannot be told from a stranger's:
        :meth:`taking_over` says so, for at most :data:`TAKEOVER_WINDOW` seconds."""
        for body in bodies:
            if (body.get("status") or {}).get("phase") not in status_mod.TERMINAL:
                self.expected.add(batcher.RunRef.of(body))
        self._expected_until = self.clock() + TAKEOVER_WINDOW
        self._took_over(None)

    def _took_over(self, done: batcher.RunRef | None) -> None:
        if done is not None:
            self.expected.discard(done)
        if not self.expected:
            self._taken_over.set()

    def taking_over(self) -> bool:
        """Whether some run found at start is not taken over yet (an unknown token may be
        one of its cells': the judge service asks it to retry instead of refusing it)."""
        if self.expected and self.clock() >= self._expected_until:
            self.expected.clear()
        return bool(self.expected)

    def judged(self, token: str | None, tokens_in: int, tokens_out: int) -> None:
        """The judge service answered a live cell's call: count it in its run's budget."""
        ref = self.board.tokens.get(token) if token is not None else None
        run = self.board.runs.get(ref) if ref is not None else None
        if run is not None and run.budget is not None:
            run.budget.judged(tokens_in, tokens_out)

    async def start(self, body: Mapping[str, Any]) -> None:
        """Adopt or begin a run (idempotent; kopf's create and resume handlers)."""
        await self.intake.start(body)
        self._took_over(batcher.RunRef.of(body))

    async def steer(self, body: Mapping[str, Any]) -> None:
        """The run's spec changed (kopf's update handler): what may change while it runs
        (``evaluationrun.STEERABLE``) is applied — suspend or resume, parallelism, budget,
        and errored cells requeued (a finished run whose cells are still there reopens)."""
        ref = batcher.RunRef.of(body)
        model = meta.parse(evaluationrun.EvaluationRun, dict(body), what=f"EvaluationRun {ref}")
        run = self.board.runs.get(ref)
        uid = str((body.get("metadata") or {}).get("uid"))
        if run is None or run.uid != uid:
            done = model.status.requeued_errored or 0 if model.status else 0
            phase = model.status.phase if model.status else None
            if phase == "Succeeded" and model.spec.requeue_errored > done:
                await self._reopen(body, model)
            return
        old = run.model.spec
        new = model.spec
        run.model = run.model.model_copy(update={"spec": new})
        run.tally.generation = plan.generation(body)
        if new.budget != old.budget:
            run.tally.rebudget(new.budget)
        if new.parallelism != old.parallelism:
            self.board.status.pace(run.ref, batcher.interval_for(new.parallelism))
        if new.suspend and not old.suspend:
            stopped = self.intake.handoff.suspend(run)
            self.board.pause_deadline(run)
            message = f"spec.suspend: {stopped} running cells stopped (planned again), none starts"
            run.tally.note(SUSPENDED, "True", "Suspended", message)
            self.board.spawn(self.board.event(self.recorder.steered(run.involved, message)))
        elif old.suspend and not new.suspend:
            self.board.restart_deadline(run)
            run.tally.note(SUSPENDED, "False", "Resumed", "spec.suspend is false: cells start")
            self.board.spawn(
                self.board.event(self.recorder.steered(run.involved, "resumed", "Resumed"))
            )
        if new.requeue_errored > run.tally.requeued_errored and run.started:
            again = await self.intake.handoff.requeue(run)
            run.tally.requeued_errored = new.requeue_errored
            message = f"spec.requeueErrored {new.requeue_errored}: {again} errored cells run again"
            self.board.spawn(
                self.board.event(self.recorder.steered(run.involved, message, "Requeued"))
            )
        if run.started:
            self.intake.handoff.fill(run)
        await self.board.changed(run)

    async def _reopen(self, body: Mapping[str, Any], model: evaluationrun.EvaluationRun) -> None:
        """A finished run asked to run its errored cells again: taken over as at a restart
        (its cells graded again from their ledgers), then its errored cells requeued. Its
        cells must still be there: after ``ttlSecondsAfterFinished`` they are not, and it
        says so (a new run is the way)."""
        ref = batcher.RunRef.of(body)
        labels = manifests.run_labels(model, "cell")
        found = await self.api.list(kube.PODS, ref.namespace, labels)
        found += await self._listed_quietly(kube.SANDBOXES, ref.namespace, labels)
        found += await self._listed_quietly(kube.SANDBOX_CLAIMS, ref.namespace, labels)
        if not found:
            message = (
                "spec.requeueErrored: its cells are gone (ttlSecondsAfterFinished), so nothing "
                "can run again; create a new EvaluationRun"
            )
            await self.api.patch(
                kube.EVALUATIONRUNS,
                ref.namespace,
                ref.name,
                {"status": {"conditions": _noted(model, "RequeueRefused", message)}},
                status=True,
            )
            return
        opened = dict(body)
        status = dict(opened.get("status") or {})
        status["phase"] = "Running"
        opened["status"] = status
        await self.intake.start(opened)
        run = self.board.runs.get(ref)
        if run is not None:
            await self.steer(body)

    async def _listed_quietly(
        self, resource: kube.Resource, namespace: str, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        try:
            return await self.api.list(resource, namespace, labels)
        except kube.ApiError:
            return []  # not installed here

    def cell_event(self, event_type: str, body: Mapping[str, Any]) -> None:
        """A watch event of a cell (Pod or Sandbox) owned by an EvaluationRun."""
        self.reactions.cell_event(event_type, body)

    def forget(self, body: Mapping[str, Any]) -> None:
        """The run was deleted: stop scheduling it (its cells are garbage-collected)."""
        self._took_over(batcher.RunRef.of(body))
        self.board.forget(body)

    async def close(self) -> None:
        """Cancel every pending task (the operator stops) and close the history."""
        try:
            await self.board.close()
        finally:
            await self.historian.close()


def _noted(model: evaluationrun.EvaluationRun, reason: str, message: str) -> list[dict[str, Any]]:
    """The run's conditions with one more (type ``Requeued``, status False)."""
    import datetime

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    had = model.status.conditions if model.status else []
    kept = [c.wire() for c in had if c.type != "Requeued"]
    return [
        *kept,
        {
            "type": "Requeued",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": int(model.metadata.get("generation") or 0),
        },
    ]
