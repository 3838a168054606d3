"""Cells and discovery pods queued by Kueue (kubernetes-sigs/kueue, its plain-pod integration).

A pod labelled ``kueue.x-k8s.io/queue-name`` in a namespace Kueue manages is one Kueue
Workload: Kueue's webhook adds the scheduling gate ``kueue.x-k8s.io/admission``, the label
``kueue.x-k8s.io/managed=true`` and a finalizer of that name when the pod is created; the
pod waits, gated, until its ClusterQueue has quota, then Kueue removes the gate and the
scheduler places it. To preempt an admitted pod (a team reclaiming its quota from a borrower,
a higher priority), Kueue sets the pod condition ``TerminationTarget`` and deletes the pod.

The operator only labels: it never adds the gate itself, so a namespace Kueue does not
manage runs its cells at once instead of leaving them gated for ever. It reads the rest:
:func:`gated` (the cell is *queued*: no deadline runs yet) and :func:`preempted` (the cell
is planned again, as a retry that costs none of the run's infrastructure retries).

Sandboxed cells (``isolation.mode: agentSandbox``) are pods the Agent Sandbox controller
makes. With ``--sandbox-queueing admit`` the queue's label goes on the Sandbox's pod template
(and on a warm pool's, whose idle sandboxes then hold quota too), Kueue's pod integration
holds those pods as it holds a cell's, and the operator reads the gate and a preemption off
them (:mod:`..reconcile.reactions`). With ``refuse`` (the default) a run of them that a queue
applies to is refused (:func:`refuse`): no sandbox runs outside the quota a queue keeps.

One Workload per cell, not a pod group per wave: a group is admitted only once all of its
``kueue.x-k8s.io/pod-group-total-count`` pods exist and keeps its quota until every one has
ended, so the wave would wait for its slowest cell and a preemption would stop all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
GATE = "kueue.x-k8s.io/admission"
TERMINATION_TARGET = "TerminationTarget"
SandboxQueueing = Literal["refuse", "admit"]
"""``--sandbox-queueing``: refuse a sandboxed run a queue applies to, or admit it through it."""


def queue_of(
    spec: runspec.RunSpec,
    run: evaluationrun.EvaluationRun | None,
    default: str | None,
    sandboxes: SandboxQueueing = "refuse",
) -> str | None:
    """The LocalQueue a pod waits in: the run's ``spec.queue``, else its RunSpec's, else the
    operator's ``--default-queue`` (``run`` is ``None`` for a RunSpec's discovery pod, and
    for a warm pool's pods).

    A sandboxed cell (``isolation.mode: agentSandbox``) is queued only when the operator's
    admin lets Kueue admit sandboxes (``sandboxes``: ``--sandbox-queueing admit``): then the
    Sandbox's pod carries the queue's label, and Kueue's pod integration holds it as it holds
    a cell's pod. Otherwise it is never queued, and :func:`refuse` refuses a run of them that a
    queue applies to. A warm pool's sandboxes serve every run of the RunSpec: they wait in
    the RunSpec's queue (else the default), never in one a run names (:func:`refuse`)."""
    sandboxed = spec.spec.isolation.mode == "agentSandbox"
    if run is not None and sandboxed and sandboxes != "admit":
        return None
    if run is not None and spec.spec.isolation.warm_pool is not None:
        return spec.spec.queue or default
    if run is not None and run.spec.queue is not None:
        return run.spec.queue
    return spec.spec.queue or default


def refuse(
    spec: runspec.RunSpec,
    run: evaluationrun.EvaluationRun,
    default: str | None,
    sandboxes: SandboxQueueing = "refuse",
) -> None:
    """A :class:`.errors.SpecError` for a run of sandboxed cells that would step out of the
    quota a queue keeps: a queue applies to it (its own, its RunSpec's or the operator's
    default) and the operator does not admit sandboxes through Kueue; or, admitting them, a
    warm-pool run names a queue its pool's sandboxes do not wait in."""
    if spec.spec.isolation.mode != "agentSandbox":
        return
    named = run.spec.queue or spec.spec.queue
    where = "the EvaluationRun's" if run.spec.queue else f"RunSpec {spec.metadata.get('name')}'s"
    if sandboxes != "admit":
        switch = (
            "this operator does not let Kueue admit sandboxed cells (--sandbox-queueing "
            "refuse; its admin may set it to admit, the chart's sandbox.queueing)"
        )
        if named is not None:
            raise errors.SpecError(
                f"{where} spec.queue {named!r} cannot queue cells with isolation.mode "
                f"agentSandbox: {switch}; remove spec.queue, or run the cells as pods "
                "(isolation.mode pod)"
            )
        if default is not None:
            raise errors.SpecError(
                f"this operator queues every run in LocalQueue {default!r} (--default-queue) "
                f"and cells with isolation.mode agentSandbox would run outside it: {switch}; "
                "run the cells as pods (isolation.mode pod)"
            )
        return
    pool = spec.spec.queue or default
    if spec.spec.isolation.warm_pool is not None and run.spec.queue not in (None, pool):
        waits = f"LocalQueue {pool!r}" if pool else "no queue"
        raise errors.SpecError(
            f"the EvaluationRun's spec.queue {run.spec.queue!r} cannot queue a warm pool's "
            f"cells: the pool's sandboxes serve every run of RunSpec "
            f"{spec.metadata.get('name')} and wait in {waits} (its spec.queue, else the "
            "operator's --default-queue); set spec.queue on the RunSpec instead"
        )


def labels(queue: str | None) -> dict[str, str]:
    """The labels that put a pod in ``queue`` (none without a queue)."""
    return {QUEUE_LABEL: queue} if queue is not None else {}


def gated(body: Mapping[str, Any]) -> bool:
    """Whether Kueue holds the pod (or the pod of a Sandbox) back: its gate is still on."""
    spec = body.get("spec") or {}
    if body.get("kind") == "Sandbox":
        spec = (spec.get("podTemplate") or {}).get("spec") or {}
    return any(g.get("name") == GATE for g in spec.get("schedulingGates") or [])


def preempted(body: Mapping[str, Any]) -> str | None:
    """Why Kueue stopped the pod (its ``TerminationTarget`` condition), or ``None``."""
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == TERMINATION_TARGET and condition.get("status") == "True":
            reason = condition.get("reason") or "Preempted"
            message = condition.get("message") or ""
            return f"{reason}: {message}" if message else str(reason)
    return None
