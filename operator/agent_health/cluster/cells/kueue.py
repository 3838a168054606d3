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

One Workload per cell, not a pod group per wave: a group is admitted only once all of its
``kueue.x-k8s.io/pod-group-total-count`` pods exist and keeps its quota until every one has
ended, so the wave would wait for its slowest cell and a preemption would stop all of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
GATE = "kueue.x-k8s.io/admission"
TERMINATION_TARGET = "TerminationTarget"


def queue_of(
    spec: runspec.RunSpec, run: evaluationrun.EvaluationRun | None, default: str | None
) -> str | None:
    """The LocalQueue a pod waits in: the run's ``spec.queue``, else its RunSpec's, else the
    operator's ``--default-queue`` (``run`` is ``None`` for a RunSpec's discovery pod).

    A sandboxed cell (``isolation.mode: agentSandbox``) is never queued: Kueue would hold the
    Sandbox's pod, which the operator does not watch (:func:`refuse` rejects a queue such a
    run names; the operator's default does not apply to it)."""
    if run is not None and spec.spec.isolation.mode == "agentSandbox":
        return None
    if run is not None and run.spec.queue is not None:
        return run.spec.queue
    return spec.spec.queue or default


def refuse(spec: runspec.RunSpec, run: evaluationrun.EvaluationRun) -> None:
    """A :class:`.errors.SpecError` for a queue named on a run of sandboxed cells."""
    named = run.spec.queue or spec.spec.queue
    if named is not None and spec.spec.isolation.mode == "agentSandbox":
        where = (
            "the EvaluationRun's" if run.spec.queue else f"RunSpec {spec.metadata.get('name')}'s"
        )
        raise errors.SpecError(
            f"{where} spec.queue {named!r} cannot queue cells with isolation.mode agentSandbox "
            "(Kueue would hold the Sandbox's pod, which the operator does not watch): remove "
            "spec.queue, or run the cells as pods (isolation.mode pod)"
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
