"""Controllers a cluster runs beside the operator, reduced to what the end-to-end test needs.

* :class:`Deployments` — keeps one pod of each Deployment (its pod template, labels plus
  ``pod-template-hash``, owned by the Deployment) and makes a new one when it is deleted or
  ends: how the chart's operator Deployment runs.
* :class:`Sandboxes` — the Agent Sandbox controller (kubernetes-sigs/agent-sandbox,
  ``agents.x-k8s.io/v1beta1``): a ``Sandbox`` becomes a Pod of the same name from
  ``spec.podTemplate`` (its labels and annotations plus
  ``agents.x-k8s.io/sandbox-name-hash``), owned by the Sandbox; the Sandbox's status
  follows the pod: ``Ready`` (``DependenciesReady`` once the pod is Ready,
  ``DependenciesNotReady`` before, ``PodSucceeded``/``PodFailed`` with status False once it
  ended), ``Finished`` (True, reason ``PodSucceeded`` or ``PodFailed``) when it ended,
  ``PodScheduled`` mirrored, ``Suspended`` False, ``podIPs`` and ``labelSelector``; a later
  change of the template's labels or annotations is carried over to the running pod.
  :data:`SANDBOX_CRD` is a permissive definition of the kind.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
from typing import Any

import httpx

from support.kube import ApiError, Emulator, Kind
from support.node import containers, crds

SANDBOX_GROUP, SANDBOX_VERSION = "agents.x-k8s.io", "v1beta1"
NAME_HASH = "agents.x-k8s.io/sandbox-name-hash"
SANDBOX_CRD = crds.permissive(SANDBOX_GROUP, SANDBOX_VERSION, "Sandbox", "sandboxes")


def name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


@dataclasses.dataclass
class Deployments:
    emulator: Emulator
    api: httpx.AsyncClient

    async def run(self) -> None:
        store = self.emulator.store

        async def follow(kind: Kind) -> None:
            async for event in store.watch(
                kind, None, lambda _l: True, since=None, initial_bookmark=False, timeout=None
            ):
                body = event["object"]
                if kind.plural == "deployments":
                    if event["type"] != "DELETED":
                        await self._ensure(body)
                    continue
                for owner in body["metadata"].get("ownerReferences") or []:
                    if owner.get("kind") == "Deployment":
                        await self._ensure_named(body["metadata"]["namespace"], owner["name"])

        await asyncio.gather(
            follow(store.kinds[("apps", "deployments")]), follow(store.kinds[("", "pods")])
        )

    async def _ensure_named(self, namespace: str, name: str) -> None:
        try:
            body = self.emulator.read("deployments.apps", namespace, name)
        except ApiError:
            return
        await self._ensure(body)

    async def _ensure(self, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        template = deployment["spec"]["template"]
        labels = dict(template["metadata"].get("labels") or {})
        pods = self.emulator.store.kinds[("", "pods")]
        live = [
            p
            for p in self.emulator.store.list(pods, meta["namespace"], lambda _l: True)
            if any(o.get("uid") == meta["uid"] for o in p["metadata"].get("ownerReferences") or [])
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if live:
            return
        template_hash = hashlib.sha256(repr(template).encode()).hexdigest()[:10]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{meta['name']}-{template_hash}-",
                "namespace": meta["namespace"],
                "labels": labels | {"pod-template-hash": template_hash},
                "annotations": dict(template["metadata"].get("annotations") or {}),
                "ownerReferences": [_owner(deployment, "apps/v1")],
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        answer = await self.api.post(f"/api/v1/namespaces/{meta['namespace']}/pods", json=pod)
        answer.raise_for_status()


@dataclasses.dataclass
class Sandboxes:
    emulator: Emulator
    api: httpx.AsyncClient

    def _path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/{SANDBOX_GROUP}/{SANDBOX_VERSION}/namespaces/{namespace}/sandboxes"
        return f"{base}/{name}" if name else base

    async def run(self) -> None:
        store = self.emulator.store
        kind = store.kinds[(SANDBOX_GROUP, "sandboxes")]
        pods = store.kinds[("", "pods")]

        async def follow_pods() -> None:
            async for event in store.watch(
                pods,
                None,
                lambda labels: NAME_HASH in labels,
                since=store.revision,
                initial_bookmark=False,
                timeout=None,
            ):
                await self._mirror(event["object"])

        mirror = asyncio.ensure_future(follow_pods())
        try:
            async for event in store.watch(
                kind, None, lambda _l: True, since=None, initial_bookmark=False, timeout=None
            ):
                if event["type"] == "ADDED":
                    await self._pod_for(event["object"])
                elif event["type"] == "MODIFIED":
                    await self._pod_metadata(event["object"])
        finally:
            mirror.cancel()

    async def _pod_for(self, sandbox: dict[str, Any]) -> None:
        meta, spec = sandbox["metadata"], sandbox["spec"]
        template = spec["podTemplate"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": dict(template.get("metadata", {}).get("labels") or {})
                | {NAME_HASH: name_hash(meta["name"])},
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "ownerReferences": [_owner(sandbox, f"{SANDBOX_GROUP}/{SANDBOX_VERSION}")],
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        answer = await self.api.post(f"/api/v1/namespaces/{meta['namespace']}/pods", json=pod)
        if answer.status_code != 409:
            answer.raise_for_status()
        await self._status(sandbox, None)

    async def _pod_metadata(self, sandbox: dict[str, Any]) -> None:
        """The pod template's labels and annotations, changed (a claim adopting a pooled
        Sandbox), carried over to the running pod, which is not recreated."""
        meta = sandbox["metadata"]
        wanted = (sandbox.get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
        try:
            pod = self.emulator.read("pods", meta["namespace"], meta["name"])
        except ApiError:
            return
        labels = {**(wanted.get("labels") or {}), NAME_HASH: name_hash(meta["name"])}
        annotations = dict(wanted.get("annotations") or {})
        have = pod["metadata"]
        if (have.get("labels") or {}) | labels == (have.get("labels") or {}) and (
            have.get("annotations") or {}
        ) | annotations == (have.get("annotations") or {}):
            return
        answer = await self.api.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            json={"metadata": {"labels": labels, "annotations": annotations}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code != 404:
            answer.raise_for_status()

    async def _mirror(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        owner = next(
            (o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Sandbox"), None
        )
        if owner is None:
            return
        try:
            sandbox = self.emulator.read(
                f"sandboxes.{SANDBOX_GROUP}", meta["namespace"], owner["name"]
            )
        except ApiError:
            return
        await self._status(sandbox, pod)

    async def _status(self, sandbox: dict[str, Any], pod: dict[str, Any] | None) -> None:
        generation = sandbox["metadata"].get("generation", 1)
        status = (pod or {}).get("status") or {}
        phase = status.get("phase")
        pod_conditions = {c["type"]: c for c in status.get("conditions") or []}

        def condition(kind: str, value: str, reason: str, message: str = "") -> dict[str, Any]:
            return {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": _transition(sandbox, kind, value),
            }

        conditions = [condition("Suspended", "False", "NotSuspended", "Sandbox is not suspended")]
        if phase in ("Succeeded", "Failed"):
            reason = f"Pod{phase}"
            done = "Pod completed successfully" if phase == "Succeeded" else "Pod failed"
            conditions.append(condition("Finished", "True", reason, done))
            conditions.append(condition("Ready", "False", reason, done))
        else:
            ready = pod_conditions.get("Ready", {}).get("status") == "True" and status.get("podIP")
            message = "Pod does not exist" if pod is None else f"Pod exists with phase: {phase}"
            if ready:
                conditions.append(condition("Ready", "True", "DependenciesReady", "Pod is Ready"))
            else:
                conditions.append(condition("Ready", "False", "DependenciesNotReady", message))
        if "PodScheduled" in pod_conditions:
            scheduled = pod_conditions["PodScheduled"]
            conditions.append(
                condition(
                    "PodScheduled", scheduled["status"], scheduled.get("reason") or "PodScheduled"
                )
            )
        body: dict[str, Any] = {
            "conditions": conditions,
            "labelSelector": f"{NAME_HASH}={name_hash(sandbox['metadata']['name'])}",
        }
        if status.get("podIP"):
            body["podIPs"] = [status["podIP"]]
        if (sandbox.get("status") or {}) == ((sandbox.get("status") or {}) | body):
            return
        answer = await self.api.patch(
            self._path(sandbox["metadata"]["namespace"], sandbox["metadata"]["name"]) + "/status",
            json={"status": body},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code != 404:
            answer.raise_for_status()


def _transition(sandbox: dict[str, Any], kind: str, value: str) -> str:
    for old in (sandbox.get("status") or {}).get("conditions") or []:
        if old.get("type") == kind and old.get("status") == value:
            return str(old.get("lastTransitionTime"))
    return containers.now()


def _owner(body: dict[str, Any], api_version: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": body["kind"],
        "name": body["metadata"]["name"],
        "uid": body["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
