"""RunSpec reconciliation: pin every image once, discover the suite's tests with a pod.

:meth:`SpecReconciler.reconcile` runs on a RunSpec's creation and on each change of its
spec (never on status echoes). It

1. resolves every image to a digest (skipped when ``status.imageDigests`` already belongs
   to this generation), with credentials from the operator's image pull Secrets read in the
   RunSpec's namespace, and records them with a ``Resolved`` condition. An unresolvable or
   refused image sets ``Resolved=False`` with the registry's reason and raises
   ``kopf.PermanentError``; an unreachable or failing registry raises
   ``kopf.TemporaryError``;
2. creates the discovery pod (:func:`.discovery.discovery_pod`, named by the suite source
   and generation, so a re-run finds the same pod) and waits — on pod watch events fed to
   :meth:`Discoveries.observe`, bounded — for it to end;
3. reads ``agent-health list --json`` from the pod's termination message, else its log,
   and stores the test ids (bounded) and ``testCount`` with a ``Discovered`` condition; a
   RunSpec's MCP peers run in that pod too, and the tools each listed go into ``mcpTools``
   (their Secrets are held to the rule a run's are first: :mod:`.secretrefs`).

``Ready`` sums the two up (True once both are True for this generation; False with the
failing one's reason): the ``Ready`` column of ``kubectl get runspecs``. A RunSpec is
resolved once per generation; every EvaluationRun of it uses that resolution.

The operator never imports user code: the listing is the only thing it reads
(:mod:`.discoveries` keeps it, and reads it again from the pod after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from agent_health.cluster import errors, kube
from agent_health.cluster.api import meta, runspec
from agent_health.cluster.cells import (
    admission,
    discovery,
    kueue,
    ledgerurl,
    manifests,
    netpol,
)
from agent_health.cluster.reconcile import events, listing, policy, refusals, secretrefs
from agent_health.cluster.reconcile import status as status_mod
from agent_health.cluster.registry import registry

MAX_ATTEMPTS = 6
DISCOVERY_GRACE = 60.0
RESOLVED, DISCOVERED, READY = "Resolved", "Discovered", "Ready"


def _age(body: Mapping[str, Any]) -> float:
    """Seconds since the pod started (``status.startTime``: a pod Kueue held back is not
    late for the time it waited), or was created (0 when it says neither)."""
    stamp = (body.get("status") or {}).get("startTime") or (body.get("metadata") or {}).get(
        "creationTimestamp"
    )
    try:
        created = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (status_mod.utcnow() - created).total_seconds()


def condition(body: Mapping[str, Any], type: str) -> Mapping[str, Any] | None:
    """A condition of an object body, by type."""
    for found in (body.get("status") or {}).get("conditions") or []:
        if found.get("type") == type:
            return dict(found)
    return None


def ready(
    conditions: Sequence[meta.Condition], generation: int | None
) -> tuple[status_mod.ConditionStatus, str, str]:
    """The ``Ready`` condition (status, reason, message) that ``Resolved`` and ``Discovered``
    make together: what ``kubectl get runspecs`` shows, and ``kubectl wait`` can wait for."""
    found = {c.type: c for c in conditions}
    for type in (RESOLVED, DISCOVERED):
        condition = found.get(type)
        if condition is None or condition.observed_generation != generation:
            return "Unknown", "Resolving", f"{type} is not yet known"
        if condition.status != "True":
            return condition.status, condition.reason, condition.message
    return "True", "Ready", "images pinned and tests discovered: runs may start"


def readiness(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """``("ready"|"failed"|"waiting", reason, message)`` of a RunSpec for its runs."""
    generation = (body.get("metadata") or {}).get("generation")
    for type in (RESOLVED, DISCOVERED):
        found = condition(body, type)
        if found is None or found.get("observedGeneration") != generation:
            return "waiting", "Resolving", f"RunSpec {type} is not yet known"
        if found.get("status") == "False":
            return "failed", str(found.get("reason")), str(found.get("message"))
        if found.get("status") != "True":
            return "waiting", str(found.get("reason")), str(found.get("message"))
    return "ready", "Resolved", "images pinned and tests discovered"


@dataclasses.dataclass
class SpecReconciler:
    """Resolves and discovers RunSpecs; see the module docstring."""

    api: kube.Client
    settings: manifests.Settings
    discoveries: listing.Discoveries
    policy: policy.Policy = dataclasses.field(default_factory=policy.Policy)
    discovery_deadline: int = 300
    failures: dict[tuple[str, int | None], int] = dataclasses.field(default_factory=dict)
    """Failed attempts per (uid, generation), until one succeeds."""

    async def reconcile(self, body: Mapping[str, Any]) -> None:
        """Resolve and discover; an error other than waiting is retried a bounded number of
        times with ``Resolved=Unknown`` naming it, then ``Resolved=False ReconcileError``."""
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        generation = metadata.get("generation")
        writer = _StatusWriter(self.api, namespace, name, generation, body)
        key = (str(metadata.get("uid")), generation)
        try:
            await self._reconcile(body, writer)
        except (kopf.TemporaryError, kopf.PermanentError, asyncio.CancelledError):
            raise
        except Exception as err:
            attempt = self.failures[key] = self.failures.get(key, 0) + 1
            why = f"{type(err).__name__}: {err}"
            why += refusals.advice(err, namespace)
            if attempt >= MAX_ATTEMPTS:
                del self.failures[key]
                message = f"the operator could not resolve the RunSpec ({attempt} attempts): {why}"
                with contextlib.suppress(Exception):
                    await writer.set(RESOLVED, "False", "ReconcileError", message)
                raise kopf.PermanentError(message) from err
            delay = self.policy.backoff(attempt)
            message = f"attempt {attempt} of {MAX_ATTEMPTS} failed, next in {delay:.0f} s: {why}"
            with contextlib.suppress(Exception):
                await writer.set(RESOLVED, "Unknown", events.to_reason(type(err).__name__), message)
            raise kopf.TemporaryError(message, delay=delay) from err
        self.failures.pop(key, None)

    async def _discovery_policy(self, spec: runspec.RunSpec, namespace: str) -> None:
        """The RunSpec's discovery policy; one that exists already (409) is kept."""
        try:
            await self.api.create(kube.NETWORKPOLICIES, namespace, netpol.discovery_policy(spec))
        except kube.ApiError as err:
            if err.status != 409:
                raise

    async def _reconcile(self, body: Mapping[str, Any], writer: _StatusWriter) -> None:
        namespace, name = writer.namespace, writer.name
        try:
            spec = meta.parse(runspec.RunSpec, dict(body), what=f"RunSpec {namespace}/{name}")
        except errors.SpecError as err:
            await writer.set(RESOLVED, "False", "InvalidSpec", str(err))
            raise kopf.PermanentError(str(err)) from err
        if spec.spec.ledger is not None:
            template = spec.spec.ledger.url
            filled = ledgerurl.fill(template, namespace=namespace, run="run", runspec=name)
            wrong = ledgerurl.problem(template) or ledgerurl.refused(
                filled, namespace=namespace, allowed=self.policy.ledger_allowed
            )
            if wrong is not None:
                message = f"RunSpec {namespace}/{name} spec.ledger.url: {wrong}"
                await writer.set(RESOLVED, "False", "InvalidLedgerUrl", message)
                raise kopf.PermanentError(message)
        try:  # before any pod: discovery runs the suite's code too
            admission.admit(spec, self.settings)
        except errors.SpecError as err:
            await writer.set(RESOLVED, "False", "NotAllowed", str(err))
            raise kopf.PermanentError(str(err)) from err
        digests = await self._digests(spec, writer)
        await self._peers_may_run(spec, writer)
        pod = discovery.discovery_pod(
            spec, digests=digests, settings=self.settings, deadline_seconds=self.discovery_deadline
        )
        key = (namespace, pod["metadata"]["name"])
        if self.policy.fence is not None:  # first: the suite's code runs as soon as the pod does
            await self._discovery_policy(spec, namespace)
        created, _ = await self.api.ensure(kube.PODS, namespace, pod)
        if kueue.gated(created):  # no deadline runs while Kueue holds it
            queue = (created["metadata"].get("labels") or {}).get(kueue.QUEUE_LABEL)
            message = f"discovery pod {key[1]} waits for Kueue to admit it (queue {queue})"
            await writer.set(DISCOVERED, "Unknown", "Queued", message)
            raise kopf.TemporaryError(message, delay=5)
        outcome = await self.discoveries.observe(created) or await self.discoveries.wait(
            key, self.policy.discovery_wait
        )
        if outcome is None:  # its age counts from its start (Kueue may have held it back)
            created = await self._current(namespace, key[1]) or created
        if outcome is None and _age(created) > self.discovery_deadline + DISCOVERY_GRACE:
            # Never scheduled, or its node is gone: the kubelet's deadline never started.
            message = f"discovery pod {key[1]} did not end within {self.discovery_deadline} s"
            await writer.set(DISCOVERED, "False", "DiscoveryTimedOut", message)
            with contextlib.suppress(kube.ApiError):
                await self.api.delete(kube.PODS, namespace, key[1])
            raise kopf.PermanentError(message)
        if outcome is None:
            await writer.set(DISCOVERED, "Unknown", "Discovering", f"waiting for pod {key[1]}")
            raise kopf.TemporaryError(f"discovery pod {key[1]} is still running", delay=5)
        if outcome.error is not None:
            await writer.set(DISCOVERED, "False", "DiscoveryFailed", outcome.error)
            raise kopf.PermanentError(outcome.error)
        ids = [t.id for t in outcome.tests if len(t.id) <= 512][: runspec.MAX_DISCOVERED]
        message = f"{len(outcome.tests)} tests in the suite"
        if outcome.mcp_tools:
            listed = ", ".join(f"{peer} {len(t)}" for peer, t in outcome.mcp_tools.items())
            message += f"; tools its MCP peers listed: {listed}"
        await writer.set(
            DISCOVERED,
            "True",
            "Discovered",
            message,
            more={
                "discoveredTests": ids,
                "testCount": len(outcome.tests),
                "mcpTools": {peer: list(t) for peer, t in outcome.mcp_tools.items()} or None,
            },
        )

    async def _peers_may_run(self, spec: runspec.RunSpec, writer: _StatusWriter) -> None:
        """The Secrets the MCP peers that run in the discovery pod name are theirs to use
        (offered, not ours), as every Secret of a run's cells is when the run starts."""
        peers = [f"spec.peers[{p.name}]." for p in discovery.mcp_peers(spec)]
        if not peers:
            return
        try:
            admission.refuse_our_secrets(spec, self.settings)
            for ref in secretrefs.references(spec):
                if ref.field.startswith(tuple(peers)):
                    await secretrefs.read(self.api, writer.namespace, ref, self.policy.own_secrets)
        except (errors.SpecError, errors.SecretNotOffered) as err:
            await writer.set(DISCOVERED, "False", "SecretNotOffered", str(err))
            raise kopf.PermanentError(str(err)) from err

    async def _current(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The discovery pod as it is now (``None`` once it is gone)."""
        try:
            return await self.api.get(kube.PODS, namespace, name)
        except kube.ApiError as err:
            if err.status == 404:
                return None
            raise

    async def _digests(self, spec: runspec.RunSpec, writer: _StatusWriter) -> dict[str, str]:
        status = spec.status or runspec.Status()
        resolved = condition(writer.body, RESOLVED)
        if (
            resolved is not None
            and resolved.get("status") == "True"
            and resolved.get("observedGeneration") == writer.generation
            and all(i in status.image_digests for i in spec.images())
        ):
            return dict(status.image_digests)
        secrets = await self._pull_secrets(writer.namespace)
        try:
            digests = await registry.resolve_all(
                spec.images(), pull_secrets=secrets, insecure=self.policy.insecure_registries
            )
        except errors.PermanentRegistryError as err:
            await writer.set(RESOLVED, "False", "ImageUnresolvable", str(err))
            raise kopf.PermanentError(str(err)) from err
        except errors.TemporaryRegistryError as err:
            await writer.set(RESOLVED, "Unknown", "RegistryUnavailable", str(err))
            raise kopf.TemporaryError(str(err), delay=err.retry_after or 30) from err
        await writer.set(
            RESOLVED,
            "True",
            "Resolved",
            f"{len(digests)} images pinned by digest",
            more={
                "imageDigests": digests,
                "discoveredTests": [],
                "testCount": None,
                "mcpTools": None,
            },
        )
        return digests

    async def _pull_secrets(self, namespace: str) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for secret in self.settings.image_pull_secrets:
            try:
                body = await self.api.get(kube.SECRETS, namespace, secret)
            except kube.ApiError as err:
                if err.status == 404:
                    continue  # the registry's refusal will name what is missing
                raise kopf.TemporaryError(f"cannot read pull secret {secret}: {err}") from err
            found[secret] = dict(body.get("data") or {})
        return found


class _StatusWriter:
    """Merge-patches a RunSpec's status, keeping its conditions' transition times."""

    def __init__(
        self,
        api: kube.Client,
        namespace: str,
        name: str,
        generation: int | None,
        body: Mapping[str, Any],
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.generation = generation
        self.body: Mapping[str, Any] = body

    async def set(
        self,
        type: str,
        status: status_mod.ConditionStatus,
        reason: str,
        message: str,
        *,
        more: Mapping[str, Any] | None = None,
    ) -> None:
        current = (self.body.get("status") or {}).get("conditions") or []
        kept = [meta.Condition.model_validate(c) for c in current]
        now = status_mod.utcnow()
        conditions = status_mod.set_condition(
            kept, type, status, reason, message, generation=self.generation, now=now
        )
        conditions = status_mod.set_condition(
            conditions,
            READY,
            *ready(conditions, self.generation),
            generation=self.generation,
            now=now,
        )
        patch = {
            "observedGeneration": self.generation,
            "conditions": [c.wire() for c in conditions],
            **(more or {}),
        }
        self.body = await self.api.patch(
            kube.RUNSPECS, self.namespace, self.name, {"status": patch}, status=True
        )
