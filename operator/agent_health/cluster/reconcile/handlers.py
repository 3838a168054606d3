"""The kopf handlers: what each watched change means to the reconcilers.

===============================  =================================  ===========================
watched                          kopf handler                       calls
===============================  =================================  ===========================
RunSpec created / spec changed   ``on.create``, ``on.update(spec)``  ``SpecReconciler.reconcile``
any RunSpec event                ``on.event``                       ``Bulletin.post`` (wakes runs)
EvaluationRun created / resumed  ``on.create``, ``on.resume``       ``Runs.start``
EvaluationRun spec changed       ``on.update(spec)``                ``Runs.steer``
EvaluationRun deleted            ``on.event``                       ``Runs.forget``
cell Pod / Sandbox events        ``on.event`` (label-filtered)      ``Runs.cell_event``
discovery Pod events             ``on.event`` (label-filtered)      ``Discoveries.observe``
===============================  =================================  ===========================

Status writes of the operator's own never trigger a reconcile: RunSpecs react to spec
changes only, EvaluationRuns to creation, resumption, deletion and a change of the fields
that steer them (``spec.suspend``, ``parallelism``, ``budget``, ``requeueErrored``).

Every handler calls its reconciler outside kopf's context (:func:`_detached`, :func:`_apart`):
kopf sets the handler's cause — which holds the watched object's whole body — in a context
variable, and every task or timer a reconciler starts copies its creator's context. A cell's
deadline timer started from a pod's event would otherwise keep that pod's last body alive
(about 40 KB) until the deadline: measured, 433 MB at 5,000 cells.

Failures are sorted per handler: a user's object that cannot be valid
(:class:`.errors.SpecError`) is a ``kopf.PermanentError``; an API or registry failure that
may heal is a ``kopf.TemporaryError`` with a delay; every failure counts in
``agent_health_reconcile_errors_total{handler}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import kopf

from agent_health.cluster import apigroup, errors, kube, metrics
from agent_health.cluster.cells import manifests
from agent_health.cluster.reconcile import listing, runs, specs

RETRY_DELAY = 10.0


@dataclasses.dataclass(frozen=True)
class Reconcilers:
    """What the handlers call."""

    runspecs: specs.SpecReconciler
    runs: runs.Runs
    discoveries: listing.Discoveries
    metrics: metrics.OperatorMetrics
    sandboxes: bool = False
    """Watch Agent Sandbox ``Sandbox`` objects too (the CRD must be installed)."""
    warm_pools: bool = False
    """Watch ``SandboxClaim`` objects too (warm-pool runs; the extensions' CRDs)."""


@contextlib.asynccontextmanager
async def _sorted(handler: str, sink: metrics.OperatorMetrics) -> AsyncIterator[None]:
    """Count the failure and tell kopf whether to retry it."""
    try:
        yield
    except (kopf.PermanentError, kopf.TemporaryError):
        sink.reconcile_error(handler)
        raise
    except errors.SpecError as err:
        sink.reconcile_error(handler)
        raise kopf.PermanentError(str(err)) from err
    except kube.ApiError as err:
        sink.reconcile_error(handler)
        if err.temporary:
            raise kopf.TemporaryError(str(err), delay=RETRY_DELAY) from err
        raise kopf.PermanentError(str(err)) from err
    except errors.ClusterError as err:
        sink.reconcile_error(handler)
        raise kopf.TemporaryError(str(err), delay=RETRY_DELAY) from err


def registry(reconcilers: Reconcilers) -> kopf.OperatorRegistry:
    """A fresh kopf registry with every handler bound to ``reconcilers``."""
    found = kopf.OperatorRegistry()
    sink = reconcilers.metrics
    cell_labels = {
        manifests.LABEL_MANAGED_BY: manifests.MANAGED_BY,
        manifests.LABEL_COMPONENT: "cell",
    }
    discovery_labels = {**cell_labels, manifests.LABEL_COMPONENT: "discovery"}

    @kopf.on.create(apigroup.GROUP, apigroup.VERSION, "runspecs", registry=found)
    @kopf.on.update(apigroup.GROUP, apigroup.VERSION, "runspecs", field="spec", registry=found)
    async def runspec_changed(body: kopf.Body, **_: Any) -> None:
        async with _sorted("runspec", sink):
            await _apart(reconcilers.runspecs.reconcile(_raw(body)))

    @kopf.on.event(apigroup.GROUP, apigroup.VERSION, "runspecs", registry=found)
    async def runspec_seen(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("type") == "DELETED":
            _detached(reconcilers.runs.bulletin.forget, event["object"])
        else:
            _detached(reconcilers.runs.bulletin.post, event["object"])

    @kopf.on.create(apigroup.GROUP, apigroup.VERSION, "evaluationruns", registry=found)
    @kopf.on.resume(apigroup.GROUP, apigroup.VERSION, "evaluationruns", registry=found)
    async def run_started(body: kopf.Body, **_: Any) -> None:
        async with _sorted("evaluationrun", sink):
            await _apart(reconcilers.runs.start(_raw(body)))

    @kopf.on.update(
        apigroup.GROUP, apigroup.VERSION, "evaluationruns", field="spec", registry=found
    )
    async def run_steered(body: kopf.Body, **_: Any) -> None:
        async with _sorted("evaluationrun", sink):
            await _apart(reconcilers.runs.steer(_raw(body)))

    @kopf.on.event(apigroup.GROUP, apigroup.VERSION, "evaluationruns", registry=found)
    async def run_seen(event: kopf.RawEvent, **_: Any) -> None:
        obj = event["object"]
        if event.get("type") == "DELETED" or (obj.get("metadata") or {}).get("deletionTimestamp"):
            _detached(reconcilers.runs.forget, obj)

    @kopf.on.event("", "v1", "pods", labels=cell_labels, registry=found)
    async def cell_seen(event: kopf.RawEvent, **_: Any) -> None:
        _cell_event(reconcilers, event)

    if reconcilers.sandboxes:

        @kopf.on.event(
            kube.SANDBOXES.group,
            kube.SANDBOXES.version,
            kube.SANDBOXES.plural,
            labels=cell_labels,
            registry=found,
        )
        async def sandbox_seen(event: kopf.RawEvent, **_: Any) -> None:
            _cell_event(reconcilers, event)

    if reconcilers.warm_pools:
        claims = kube.SANDBOX_CLAIMS

        @kopf.on.event(
            claims.group, claims.version, claims.plural, labels=cell_labels, registry=found
        )
        async def claim_seen(event: kopf.RawEvent, **_: Any) -> None:
            _cell_event(reconcilers, event)

    @kopf.on.event("", "v1", "pods", labels=discovery_labels, registry=found)
    async def discovery_seen(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("type") != "DELETED":
            async with _sorted("discovery", sink):
                await _apart(reconcilers.discoveries.observe(event["object"]))

    return found


def _cell_event(reconcilers: Reconcilers, event: kopf.RawEvent) -> None:
    kind = str(event.get("type") or "ADDED")
    _detached(reconcilers.runs.cell_event, kind, event["object"])


def _detached(call: Callable[..., None], *args: Any) -> None:
    """``call(*args)`` in an empty context: what it starts keeps nothing of kopf's."""
    contextvars.Context().run(call, *args)


async def _apart(work: Coroutine[Any, Any, object]) -> None:
    """Await ``work`` as a task of an empty context (cancelled with the handler)."""
    await asyncio.get_running_loop().create_task(work, context=contextvars.Context())


def _raw(body: kopf.Body) -> dict[str, Any]:
    """A kopf body as the plain dict the API server sent."""
    plain: dict[str, Any] = _plain(body)
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
