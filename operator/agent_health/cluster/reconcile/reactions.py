"""What a watch event of a cell means for its run.

Every Pod or Sandbox event of a cell owned by an EvaluationRun this operator drives comes to
:meth:`Reactions.cell_event`. Events that arrive while the run is still being started are
buffered and applied once its plan exists. Then, for the cell's current attempt:

* it ended → graded (:meth:`.handoff.Handoff.grade`);
* Kueue holds it (its admission gate is on, :mod:`.kueue`) → counted as queued; its
  deadline starts only once Kueue admits it. A sandboxed cell's pod is the Sandbox's, not
  the run's: with ``--sandbox-queueing admit`` its events come to :meth:`Reactions.sandbox_pod`,
  which reads the gate (and a preemption) off it for the cell it serves;
* Kueue preempted it (condition ``TerminationTarget``) → planned again as its next attempt,
  created once the pod is gone (:meth:`.handoff.Handoff.preempted`);
* a warm-pool cell's claim is bound → its sandbox is handed the cell, once per attempt
  (:meth:`.pools.Pools.assign`); the sandbox controller refused it → the attempt ends;
* it runs → counted as running;
* it can no longer pass (:func:`.observed.doomed`: a crash loop, a dead target, a restarted
  gateway) → errored at once with that cause, and the cell is deleted (or retried);
* it is stuck (:func:`.observed.stuck`: unschedulable, an image that cannot be pulled) for
  longer than ``stuck_grace`` → an infrastructure failure, and the cell is deleted;
* it was deleted while active → an infrastructure failure (``evicted``); deleted while being
  replaced → the next attempt is created.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent_health.cluster.cells import kueue, observed, sandbox
from agent_health.cluster.reconcile import batcher, handoff, lifecycle, plan, pools


@dataclasses.dataclass
class Reactions:
    """Turns cell watch events into grades, retries and counts; see the module docstring."""

    board: lifecycle.Board
    handoff: handoff.Handoff
    stuck_grace: float = 120.0
    clock: Callable[[], float] = time.monotonic

    def cell_event(self, event_type: str, body: Mapping[str, Any]) -> None:
        """A watch event of a cell (Pod or Sandbox) owned by an EvaluationRun."""
        owner = next(
            (
                o
                for o in body["metadata"].get("ownerReferences") or []
                if o.get("kind") == "EvaluationRun"
            ),
            None,
        )
        if owner is None:
            self.sandbox_pod(event_type, body)
            return
        ref = batcher.RunRef(str(body["metadata"].get("namespace")), owner["name"])
        run = self.board.runs.get(ref)
        if run is None or owner.get("uid") != run.uid:
            return
        if not run.started:
            run.buffered[body["metadata"]["name"]] = (event_type, dict(body))
            return
        self.apply(run, event_type, dict(body))

    def apply(self, run: plan.Run, event_type: str, body: dict[str, Any]) -> None:
        """Apply one event of one of the run's cells."""
        spawn = self.board.spawn
        cell = run.cells.get(body["metadata"]["name"])
        if cell is None or plan.attempt(body) < cell.attempt:
            if cell is not None and event_type == "DELETED":
                if cell.state == "replacing":
                    self.handoff.relaunch(run, cell)
                elif cell.state == "requeued":
                    self.handoff.requeued_gone(run, cell)
            return
        if event_type == "DELETED":
            if cell.state == "active" and (why := kueue.preempted(body)) is not None:
                self.handoff.preempted(run, cell, body, why)
            if cell.state == "replacing":
                self.handoff.relaunch(run, cell)
            elif cell.state == "active":
                deleted: observed.Failure = ("evicted", "the cell was deleted")
                self.handoff.spawn(run, cell, self.handoff.infra(run, cell, body, deleted))
            return
        if cell.state != "active":
            return
        cell.last = body
        if (why := kueue.preempted(body)) is not None:
            # Before its end is read: a pod Kueue stopped ends Failed, its test cut short.
            self.handoff.preempted(run, cell, body, why)
            return
        if observed.is_claim(body) and self._claimed(run, cell, body):
            return
        if kueue.gated(body):  # Kueue holds it: queued, no deadline, never stuck
            if run.tally.queued(cell.name):
                spawn(self.board.changed(run))
            return
        # Admitted now (or never queued): its deadline starts. While Kueue holds a Sandbox's
        # pod, the Sandbox's own events do not start it: the pod's admission does.
        sandbox_held = cell.held and observed.is_sandbox(body)
        if cell.timed != cell.attempt and not sandbox_held:
            self.handoff.keep_deadline(run, cell, plan.started_at(body))
            run.tally.queued(cell.name, held=False)
        state = observed.state(body)
        if state in ("succeeded", "failed"):
            cell.state = "ended"
            run.tally.ended(cell.name)
            self.handoff.spawn(run, cell, self.handoff.grade(run, cell, body))
        elif (doomed := observed.doomed(body)) is not None:
            cell.state = "ended"  # a crash loop or a dead target: end it now, not at its deadline
            self.handoff.spawn(run, cell, self.handoff.infra(run, cell, body, doomed, delete=True))
        elif state == "running":
            cell.stuck_since = None
            run.tally.started(cell.name)
            spawn(self.board.changed(run))
        elif (failure := observed.stuck(body)) is not None:
            now = self.clock()
            cell.stuck_since = cell.stuck_since if cell.stuck_since is not None else now
            left = cell.stuck_since + self.stuck_grace - now
            if left <= 0:
                cell.state = "ended"
                self.handoff.spawn(
                    run, cell, self.handoff.infra(run, cell, body, failure, delete=True)
                )
            else:
                spawn(self.board.later(left, lambda: self._recheck(run, cell, body)))

    def sandbox_pod(self, event_type: str, body: Mapping[str, Any]) -> None:
        """An event of a Sandbox's pod (no EvaluationRun owns it; the Sandbox does). When the
        cell the Sandbox serves waits in a queue (``--sandbox-queueing admit``), the pod is
        what Kueue holds: gated → the cell is queued and its deadline is stopped; admitted →
        its deadline starts from the pod's start; preempted → the cell is planned again, as
        a preempted pod's is. Every other state is read off the Sandbox (:meth:`apply`)."""
        meta = body["metadata"]
        owner = next(
            (o for o in meta.get("ownerReferences") or [] if o.get("kind") == sandbox.KIND),
            None,
        )
        if owner is None:
            return
        found = self._serving(str(meta.get("namespace")), str(owner["name"]), body)
        if found is None:
            return
        run, cell = found
        if (why := kueue.preempted(body)) is not None:
            cell.held = False
            self.handoff.preempted(run, cell, body, why)
            return
        if event_type == "DELETED":
            return
        if kueue.gated(body):
            cell.held = True
            if cell.deadline is not None:  # started by a Sandbox event before the pod's
                cell.deadline.cancel()
                cell.deadline, cell.timed = None, None
            if run.tally.queued(cell.name):
                self.board.spawn(self.board.changed(run))
            return
        cell.held = False
        if cell.timed != cell.attempt:
            self.handoff.keep_deadline(run, cell, plan.started_at(body))
            if run.tally.queued(cell.name, held=False):
                self.board.spawn(self.board.changed(run))

    def _serving(
        self, namespace: str, name: str, pod: Mapping[str, Any]
    ) -> tuple[plan.Run, plan.Cell] | None:
        """The queued run's active cell whose current Sandbox is ``name``: a warm cell's
        bound sandbox, or a cold one's (named as its cell) of the cell's current attempt."""
        for run in self.board.runs.values():
            if run.ref.namespace != namespace or not run.started or not plan.queued(run):
                continue
            for cell_name in run.active:
                cell = run.cells[cell_name]
                if cell.state != "active":
                    continue
                if cell.pod == name:
                    return run, cell
                if cell.pod is None and cell.name == name and plan.attempt(pod) >= cell.attempt:
                    return run, cell
        return None

    def _claimed(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> bool:
        """A warm-pool cell's claim: refused (the attempt ends), or newly bound (its sandbox
        is handed the cell, once per attempt); whether the event was used up."""
        if (refused := pools.rejected(body)) is not None:
            cell.state = "ended"
            self.handoff.spawn(run, cell, self.handoff.infra(run, cell, body, refused, delete=True))
            return True
        cell.pod = pools.bound_sandbox(body) or cell.pod  # its gateway's log, once it ends
        ended = observed.state(body) in ("succeeded", "failed")  # adopted after a restart
        if cell.assigned != cell.attempt and cell.pod is not None and not ended:
            cell.assigned = cell.attempt  # later events of the attempt do not hand it again
            self.handoff.spawn(run, cell, self.handoff.assign(run, cell, body))
        return False

    def _recheck(self, run: plan.Run, cell: plan.Cell, body: dict[str, Any]) -> None:
        if cell.last is body:  # nothing newer came: it is still stuck
            self.apply(run, "MODIFIED", body)
