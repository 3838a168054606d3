"""The cluster as the server sees it (``serve --cluster``): the EvaluationRuns watched
through the Kubernetes API and streamed to the hub cell by cell, and the calls that create,
steer and delete them.

It talks to the API server as the operator does (:mod:`agent_health.cluster.kube`: httpx,
no blocking client), as whoever the kubeconfig or the pod's service account names. The
watch lists the runs, then watches from the list's ``resourceVersion``; a watch that ends
is started again from the last version seen, and one the API server no longer holds
(``410 Gone``) lists again. Every change of a run's status becomes hub events: its state
(phase, counts, pass rate, the cells running now from ``status.runningCells``), and one
result per cell graded since the last change, read from the count of each test's outcomes
(``status.tests``).

Needs the ``operator`` extra (kopf logs in; ``kubernetes`` reads a kubeconfig as kubectl).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from agent_health.engine import running
from agent_health.server import errors, live, state

log = logging.getLogger("agent_health.server")
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
TERMINAL = ("Succeeded", "Failed")


@dataclasses.dataclass
class Cluster:
    """The watch and the API client of one server."""

    api: Any
    served: state.State
    namespace: str | None = None
    task: asyncio.Task[None] | None = None
    seen: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)
    """Run uid → test id → the outcomes published so far, in order (one per graded cell)."""
    watching: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once the first list was read (what the tests wait for)."""

    @classmethod
    async def start(cls, served: state.State, connection: Any = None) -> Cluster:
        """Log in (``connection``: a ``kopf.ConnectionInfo`` to use instead) and watch."""
        try:
            from agent_health.cluster import kube
        except ModuleNotFoundError as err:
            raise errors.SettingsError(
                "serve --cluster needs the operator extra (it talks to Kubernetes as the "
                "operator does): pip install 'agent-health[operator]'"
            ) from err
        from agent_health.cluster import errors as cluster_errors

        try:
            info, token_file = await kube.login(connection)
        except cluster_errors.ClusterError as err:
            raise errors.SettingsError(f"serve --cluster: {err}") from err
        api = kube.Client.from_connection(info, token_file=token_file)
        found = cls(api, served, served.settings.namespace)
        found.task = asyncio.create_task(found._watch())
        return found

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.api.aclose()

    # -- the watch -------------------------------------------------------------------------

    async def _watch(self) -> None:
        from agent_health.cluster import kube

        failures = 0
        version = ""
        while True:
            try:
                if not version:
                    items, version = await self.api.list_versioned(
                        kube.EVALUATIONRUNS, self.namespace
                    )
                    for body in items:
                        self.publish(body)
                    self.watching.set()
                async for event in self.api.watch(kube.EVALUATIONRUNS, self.namespace, version):
                    kind, body = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        version = ""  # 410 Gone: what was missed is read by listing again
                        break
                    version = str((body.get("metadata") or {}).get("resourceVersion") or version)
                    if kind in ("ADDED", "MODIFIED"):
                        self.publish(body)
                    elif kind == "DELETED":
                        self.publish(body, deleted=True)
                failures = 0
            except kube.ApiError as err:
                delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    log.warning("watching EvaluationRuns: %s; again in %.0f s", err, delay)
                if err.status == 410:
                    version = ""
                await asyncio.sleep(delay)

    def publish(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A run's body as hub events: its state and a result per cell graded since."""
        hub: live.Hub | None = self.served.hub
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        if hub is None or not uid:
            return
        status = body.get("status") or {}
        spec = body.get("spec") or {}
        counts = status.get("counts") or {}
        phase = status.get("phase")
        view = live.LiveRun(
            uid=uid,
            source="cluster",
            agent=(spec.get("runSpecRef") or {}).get("name"),
            suite=(spec.get("runSpecRef") or {}).get("name"),
            total=int(counts.get("total") or 0),
            started_at=_moment(status.get("startTime") or metadata.get("creationTimestamp")),
            ended=deleted or phase in TERMINAL,
            interrupted=deleted,
            stopped="the EvaluationRun was deleted" if deleted else None,
            counts=live.Counts(
                passed=int(counts.get("passed") or 0),
                failed=int(counts.get("failed") or 0),
                errored=int(counts.get("errored") or 0),
                skipped=int(counts.get("skipped") or 0),
            ),
            pass_rate=status.get("passRate"),
            phase=("Suspended" if spec.get("suspend") and phase not in TERMINAL else phase),
            namespace=metadata.get("namespace"),
            name=metadata.get("name"),
            in_flight=[] if deleted or phase in TERMINAL else _in_flight(status),
        )
        hub.cluster_run(uid, view, self._new_results(uid, status))

    def _new_results(self, uid: str, status: Mapping[str, Any]) -> list[running.LiveResult]:
        """One result per cell graded since the run's last change, from each test's counts
        (a requeued cell's new grade replaces its old one: the counts go down, then up)."""
        known = self.seen.setdefault(uid, {})
        found = []
        for test in status.get("tests") or []:
            test_id = str(test.get("id"))
            now = {s: int(test.get(s) or 0) for s in ("passed", "failed", "errored")}
            had = known.setdefault(test_id, [])
            for name in ("passed", "failed", "errored"):
                while had.count(name) > now[name]:
                    had.remove(name)
            for name in ("passed", "failed", "errored"):
                while had.count(name) < now[name]:
                    had.append(name)
                    found.append(
                        running.LiveResult(
                            id=test_id,
                            name=test_id.rsplit("::", 1)[-1],
                            repeat=len(had) - 1,
                            status=name,
                            cause=test.get("cause") if name == "errored" else None,
                            score=test.get("score"),
                            error=test.get("error") if name == "errored" else None,
                        )
                    )
        return found

    # -- create, steer, delete -------------------------------------------------------------

    async def create(self, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
        from agent_health.cluster import kube
        from agent_health.cluster.api import evaluationrun

        try:
            model = evaluationrun.Spec.model_validate(spec)
        except ValueError as err:
            raise errors.Invalid(f"spec: {err}".splitlines()[0]) from err
        base = model.run_spec_ref.name[:40].rstrip("-")
        body = {
            "apiVersion": "agenthealth.dev/v1alpha1",
            "kind": "EvaluationRun",
            "metadata": {
                "name": f"{base}-{secrets.token_hex(3)}",
                "namespace": namespace,
                "labels": {"app.kubernetes.io/created-by": "agent-health-serve"},
            },
            "spec": model.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        made: dict[str, Any] = await self._call(
            self.api.create(kube.EVALUATIONRUNS, namespace, body)
        )
        self.publish(made)
        return made

    async def patch(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        from agent_health.cluster import kube

        found: dict[str, Any] = await self._call(
            self.api.patch(kube.EVALUATIONRUNS, namespace, name, {"spec": spec})
        )
        self.publish(found)
        return found

    async def requeue(self, namespace: str, name: str) -> dict[str, Any]:
        """``spec.requeueErrored`` raised by one (as ``kubectl patch`` would)."""
        from agent_health.cluster import kube

        body = await self._call(self.api.get(kube.EVALUATIONRUNS, namespace, name))
        current = int((body.get("spec") or {}).get("requeueErrored") or 0)
        return await self.patch(namespace, name, {"requeueErrored": current + 1})

    async def delete(self, namespace: str, name: str) -> None:
        from agent_health.cluster import kube

        gone = await self._call(self.api.delete(kube.EVALUATIONRUNS, namespace, name))
        if not gone:
            raise errors.NotFound(f"no EvaluationRun {namespace}/{name}")

    async def _call(self, call: Any) -> Any:
        """An API call, its refusal said as the API server said it (404, 403, 422...)."""
        from agent_health.cluster import kube

        try:
            return await call
        except kube.ApiError as err:
            problem = errors.SteeringError(err.message)
            if err.status == 404:
                problem = errors.NotFound(err.message)
            elif err.status in (400, 403, 422):
                problem = errors.Invalid(err.message)
            if err.status in (400, 403, 404, 409, 422):
                problem.status = err.status
            raise problem from err


def _in_flight(status: Mapping[str, Any]) -> list[live.InFlight]:
    """The cells the operator says are running (``status.runningCells``: at most 100 of
    ``counts.running``), as the live page lists what is in flight."""
    found = []
    for cell in status.get("runningCells") or []:
        test = str(cell.get("test") or "")
        if test:
            found.append(
                live.InFlight(
                    id=test,
                    name=test.rsplit("::", 1)[-1],
                    repeat=int(cell.get("repeat") or 0),
                    agent=cell.get("agent"),
                    since=_moment(cell.get("since")),
                )
            )
    return found


def _moment(text: Any) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
