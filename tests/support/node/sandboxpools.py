# Over 350 lines: the warm-pool and claim controllers reconcile the same Sandboxes at once.
"""Agent Sandbox's extensions (kubernetes-sigs/agent-sandbox, ``extensions.agents.x-k8s.io/
v1beta1``): templates, warm pools and claims, reduced to what a cell needs and following the
upstream controllers' semantics (``extensions/controllers``). The core ``Sandbox`` →
``Pod`` controller is :class:`node.controllers.Sandboxes`.

* ``SandboxTemplate`` — ``spec.podTemplate`` (metadata and a PodSpec), whether a claim
  may inject ``env`` (``envVarsInjectionPolicy``: ``Disallowed`` by default, ``Allowed``,
  ``Overrides``) or ``volumeClaimTemplates`` (``volumeClaimTemplatesPolicy``), and
  ``generatedSecrets``: Secrets made afresh for each concrete Sandbox (``<sandbox>-<name>``,
  random URL-safe tokens of ``lengthBytes``, owned by the Sandbox), the env
  ``secretKeyRef`` entries naming them rewritten to them, recorded in the Sandbox's annotation
  ``extensions.agents.x-k8s.io/generated-secrets`` (pooled Sandboxes each get their own).
* ``SandboxWarmPool`` — keeps ``spec.replicas`` unclaimed Sandboxes made from its
  ``sandboxTemplateRef``: named ``<pool>-<random>``, owned by the pool, labelled
  ``agents.x-k8s.io/warm-pool-sandbox`` (and the template's ref hash); it makes more when it
  has fewer (a claimed one no longer counts: it is replenished) and deletes unclaimed ones
  past ``replicas``, not-ready first. Status: ``replicas``, ``readyReplicas``, ``selector``.
* ``SandboxClaim`` — ``warmPoolRef`` (required), ``lifecycle`` (``shutdownPolicy``
  ``Delete``/``Retain``, ``ttlSecondsAfterFinished``), ``additionalPodMetadata`` and ``env``.
  Binding: a claim with ``env`` or ``volumeClaimTemplates`` is always cold-started (so refused
  if its template disallows them: ``EnvVarsInjectionRejected``); otherwise the controller
  takes a candidate of the pool — Ready first, then the oldest, one no other claim worker is
  taking — records it on the claim (annotation ``agents.x-k8s.io/sandbox-name``) by an update
  carrying the claim's ``resourceVersion`` (the optimistic lock: a conflict means another pass
  got there first, it tries again), then completes the adoption in one patch of the Sandbox:
  the warm-pool label removed, ``agents.x-k8s.io/launch-type: warm``, its owner the claim
  alone (controller reference), ``agents.x-k8s.io/claim-uid`` on it and on its pod template,
  whose metadata becomes the template's merged with the claim's ``additionalPodMetadata``
  (labels only in the allowed domain ``sandbox.users.io``, annotations outside the restricted
  ``kubernetes.io``, ``k8s.io`` and ``x-k8s.io`` domains; neither may override the template's:
  ``InvalidMetadata``). An empty pool falls back to a cold start: a Sandbox named as the
  claim, from the template, owned by the claim (launch type ``cold``). Status:
  ``sandbox.name``, ``sandbox.podIPs``, and the Sandbox's ``Ready`` and ``Finished``
  conditions mirrored. A claim whose Sandbox finished is deleted (``Delete``) once its
  ``ttlSecondsAfterFinished`` passed; its Sandbox, and the Sandbox's pod, go with it.

:attr:`SandboxPools.bindings` records every binding (claim, sandbox, warm or cold) in order.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import copy
import dataclasses
import hashlib
import json
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import httpx

from support.kube import ApiError, Emulator
from support.node import controllers, crds

GROUP, VERSION = "extensions.agents.x-k8s.io", "v1beta1"
WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"
LAUNCH_TYPE_LABEL = "agents.x-k8s.io/launch-type"
CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid"
SANDBOX_NAME_ANNOTATION = "agents.x-k8s.io/sandbox-name"
GENERATED_SECRETS = "extensions.agents.x-k8s.io/generated-secrets"
ALLOWED_LABEL_DOMAINS = ("sandbox.users.io",)
RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "x-k8s.io")
RETRY = 0.2  # seconds before a failed reconcile's key is taken again
CLAIM_WORKERS, POOL_WORKERS = 50, 1  # upstream's defaults (--sandbox-claim-concurrent-workers)

log = logging.getLogger(__name__)


def _crd(kind: str, plural: str) -> dict[str, Any]:
    return crds.permissive(GROUP, VERSION, kind, plural)


CRDS = (
    _crd("SandboxTemplate", "sandboxtemplates"),
    _crd("SandboxWarmPool", "sandboxwarmpools"),
    _crd("SandboxClaim", "sandboxclaims"),
)
Launch = Literal["warm", "cold"]


@dataclasses.dataclass(frozen=True)
class Binding:
    namespace: str
    claim: str
    sandbox: str
    launch: Launch


class Rejected(Exception):
    """A claim the controller will not bind: its Ready condition's reason and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def template_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:16]


@dataclasses.dataclass
class SandboxPools:
    """The template, warm-pool and claim controllers; :meth:`run` in a task."""

    emulator: Emulator
    api: httpx.AsyncClient
    bindings: list[Binding] = dataclasses.field(default_factory=list)
    _taking: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    """Pooled Sandboxes a claim worker is adopting now: no other worker picks them (as
    upstream's in-memory queue of adoptable sandboxes pops each to one claim)."""

    def _path(self, plural: str, namespace: str, name: str = "") -> str:
        group = _group(plural)
        version = controllers.SANDBOX_VERSION if plural == "sandboxes" else VERSION
        base = f"/apis/{group}/{version}/namespaces/{namespace}/{plural}"
        return f"{base}/{name}" if name else base

    async def install(self) -> None:
        for crd in CRDS:
            answer = await self.api.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
            )
            if answer.status_code != 409:
                answer.raise_for_status()

    async def run(self) -> None:
        """The warm-pool and the claim controller, each with its own workqueue and upstream's
        default number of workers (1 and 50): a key is a (namespace, name) of the reconciled
        object; an event of a Sandbox enqueues its controller owner — and, when that changed,
        its previous one, as controller-runtime's owner handler does with an update's old
        object: a pool learns that a sandbox was claimed from it. The two reconcile at once
        and meet only in the API (the claim's optimistic lock, the Sandbox's resourceVersion
        test), so a claim never waits behind a pool making its replacements."""
        store = self.emulator.store
        pools, claims = _Queue(POOL_WORKERS), _Queue(CLAIM_WORKERS)
        owners: dict[tuple[str, str], tuple[str, str]] = {}

        def enqueue_owner(namespace: str, owner: tuple[str, str] | None) -> None:
            if owner is not None:
                queue = pools if owner[0] == "SandboxWarmPool" else claims
                queue.add((namespace, owner[1]))

        async def follow(plural: str) -> None:
            async for event in store.watch(
                store.kinds[(_group(plural), plural)], None, lambda _l: True, since=None,
                initial_bookmark=False, timeout=None,
            ):  # fmt: skip
                meta = event["object"]["metadata"]
                key = (str(meta.get("namespace")), str(meta["name"]))
                if plural == "sandboxwarmpools":
                    pools.add(key)
                elif plural == "sandboxclaims":
                    claims.add(key)
                else:
                    owner = _controller(event["object"])
                    before = owners.pop(key, None)
                    if event["type"] != "DELETED" and owner is not None:
                        owners[key] = owner
                    enqueue_owner(key[0], owner)
                    if before != owner:
                        enqueue_owner(key[0], before)

        tasks = [
            asyncio.ensure_future(follow(plural))
            for plural in ("sandboxwarmpools", "sandboxclaims", "sandboxes")
        ]
        tasks.append(asyncio.ensure_future(pools.work(self._reconcile_pool)))
        tasks.append(asyncio.ensure_future(claims.work(self._reconcile_claim)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    # -- reading ---------------------------------------------------------------------------

    def _list(self, group: str, plural: str, namespace: str) -> list[dict[str, Any]]:
        kind = self.emulator.store.kinds[(group, plural)]
        return self.emulator.store.list(kind, namespace, lambda _l: True)

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.emulator.read(f"{plural}.{GROUP}", namespace, name)
        except ApiError:
            return None

    def _sandboxes(self, namespace: str) -> list[dict[str, Any]]:
        return self._list(controllers.SANDBOX_GROUP, "sandboxes", namespace)

    # -- reconciling -----------------------------------------------------------------------

    async def _reconcile_pool(self, namespace: str, name: str) -> None:
        pool = self._get("sandboxwarmpools", namespace, name)
        if pool is not None:
            await self._pool(pool)

    async def _reconcile_claim(self, namespace: str, name: str) -> None:
        claim = self._get("sandboxclaims", namespace, name)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        try:
            await self._claim(claim)
        except Rejected as err:
            await self._claim_status(claim, None, rejected=err)

    async def _pool(self, pool: dict[str, Any]) -> None:
        meta, spec = pool["metadata"], pool.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        template = self._get(
            "sandboxtemplates", meta["namespace"], spec["sandboxTemplateRef"]["name"]
        )
        mine = [
            s
            for s in self._sandboxes(meta["namespace"])
            if _controller_uid(s) == meta["uid"] and not s["metadata"].get("deletionTimestamp")
        ]
        wanted = int(spec.get("replicas", 1))
        if template is not None:
            for _ in range(wanted - len(mine)):
                await self._create_pooled(pool, template)
        if len(mine) > wanted:
            extra = sorted(mine, key=lambda s: (_ready(s), s["metadata"]["creationTimestamp"]))
            for sandbox in extra[: len(mine) - wanted]:
                await self.api.delete(
                    self._path("sandboxes", meta["namespace"], sandbox["metadata"]["name"])
                )
        status = {
            "replicas": min(len(mine), wanted),
            "readyReplicas": sum(_ready(s) for s in mine),
            "selector": f"{WARM_POOL_LABEL}={template_hash(meta['name'])}",
        }
        if (pool.get("status") or {}) != status:
            answer = await self.api.patch(
                self._path("sandboxwarmpools", meta["namespace"], meta["name"]) + "/status",
                json={"status": status},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if answer.status_code != 404:
                answer.raise_for_status()

    async def _create_pooled(self, pool: dict[str, Any], template: dict[str, Any]) -> None:
        meta = pool["metadata"]
        pod_template = copy.deepcopy(template["spec"]["podTemplate"])
        labels = {
            WARM_POOL_LABEL: template_hash(meta["name"]),
            TEMPLATE_HASH_LABEL: template_hash(template["metadata"]["name"]),
        }
        body = {
            "apiVersion": f"{controllers.SANDBOX_GROUP}/{controllers.SANDBOX_VERSION}",
            "kind": "Sandbox",
            "metadata": {
                "name": f"{meta['name'][:50]}-{uuid.uuid4().hex[:5]}",
                "namespace": meta["namespace"],
                "labels": labels,
                "ownerReferences": [_owner(pool)],
            },
            "spec": {"podTemplate": pod_template},
        }
        await self._create_sandbox(body, template)

    async def _claim(self, claim: dict[str, Any]) -> None:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        namespace = meta["namespace"]
        bound = self._bound(claim)
        if bound is None:
            pool = self._get("sandboxwarmpools", namespace, spec["warmPoolRef"]["name"])
            if pool is None:
                raise Rejected(
                    "WarmPoolNotFound", f"SandboxWarmPool {spec['warmPoolRef']['name']!r} not found"
                )
            template = self._get(
                "sandboxtemplates", namespace, pool["spec"]["sandboxTemplateRef"]["name"]
            )
            if template is None:
                raise Rejected("TemplateNotFound", "the warm pool's SandboxTemplate does not exist")
            merged = _merged_metadata(template, claim)
            cold = bool(spec.get("env") or spec.get("volumeClaimTemplates"))
            if cold:
                _check_injection(template, spec)
            bound = None if cold else await self._adopt(claim, pool, template, merged)
            if bound is None:
                bound = await self._cold(claim, template, merged)
        await self._claim_status(claim, bound)
        await self._expire(claim)

    def _bound(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """The Sandbox this claim controls already, if any."""
        for sandbox in self._sandboxes(claim["metadata"]["namespace"]):
            if _controller_uid(sandbox) == claim["metadata"]["uid"]:
                return sandbox
        return None

    async def _adopt(
        self,
        claim: dict[str, Any],
        pool: dict[str, Any],
        template: dict[str, Any],
        merged: dict[str, Any],
    ) -> dict[str, Any] | None:
        namespace = claim["metadata"]["namespace"]
        for _ in range(3):
            candidates = [
                s
                for s in self._sandboxes(namespace)
                if _controller_uid(s) == pool["metadata"]["uid"]
                and not s["metadata"].get("deletionTimestamp")
                and (namespace, s["metadata"]["name"]) not in self._taking
            ]
            if not candidates:
                return None  # the pool is empty: a cold start
            chosen = sorted(
                candidates, key=lambda s: (not _ready(s), s["metadata"]["creationTimestamp"])
            )[0]
            taking = (namespace, chosen["metadata"]["name"])
            self._taking.add(taking)
            try:
                bound = await self._take(claim, chosen, merged)
            finally:
                self._taking.discard(taking)
            if bound is not None:
                return bound
        return None

    async def _take(
        self, claim: dict[str, Any], chosen: dict[str, Any], merged: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Bind ``chosen`` to ``claim``; ``None`` if it was taken or went meanwhile."""
        namespace = claim["metadata"]["namespace"]
        # Record the adoption on the claim first, under its resourceVersion.
        current = self._get("sandboxclaims", namespace, claim["metadata"]["name"])
        if current is None:
            return None
        current["metadata"].setdefault("annotations", {})[SANDBOX_NAME_ANNOTATION] = chosen[
            "metadata"
        ]["name"]
        answer = await self.api.put(
            self._path("sandboxclaims", namespace, claim["metadata"]["name"]), json=current
        )
        if answer.status_code == 409:
            return None
        answer.raise_for_status()
        labels = {
            k: v
            for k, v in (chosen["metadata"].get("labels") or {}).items()
            if k != WARM_POOL_LABEL
        }
        labels |= {LAUNCH_TYPE_LABEL: "warm", CLAIM_UID_LABEL: claim["metadata"]["uid"]}
        pod_meta = copy.deepcopy(merged)
        pod_meta.setdefault("labels", {})[CLAIM_UID_LABEL] = claim["metadata"]["uid"]
        answer = await self.api.patch(
            self._path("sandboxes", namespace, chosen["metadata"]["name"]),
            json=[
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": chosen["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/metadata/labels", "value": labels},
                {"op": "replace", "path": "/metadata/ownerReferences",
                 "value": [_owner(claim)]},
                {"op": "replace", "path": "/spec/podTemplate/metadata", "value": pod_meta},
            ],
            headers={"Content-Type": "application/json-patch+json"},
        )  # fmt: skip
        if answer.status_code in (404, 409, 422):
            return None  # taken or gone meanwhile: the next candidate
        answer.raise_for_status()
        self.bindings.append(
            Binding(namespace, claim["metadata"]["name"], chosen["metadata"]["name"], "warm")
        )
        return dict(answer.json())

    async def _cold(
        self, claim: dict[str, Any], template: dict[str, Any], merged: dict[str, Any]
    ) -> dict[str, Any]:
        meta, spec = claim["metadata"], claim.get("spec") or {}
        pod_template = copy.deepcopy(template["spec"]["podTemplate"])
        pod_template["metadata"] = copy.deepcopy(merged)
        pod_template["metadata"].setdefault("labels", {})[CLAIM_UID_LABEL] = meta["uid"]
        containers = pod_template["spec"]["containers"]
        for var in spec.get("env") or []:
            name = var.get("containerName") or containers[0]["name"]
            target = next(c for c in containers if c["name"] == name)
            env = [e for e in target.get("env") or [] if e["name"] != var["name"]]
            target["env"] = [*env, {"name": var["name"], "value": var["value"]}]
        body = {
            "apiVersion": f"{controllers.SANDBOX_GROUP}/{controllers.SANDBOX_VERSION}",
            "kind": "Sandbox",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": {
                    LAUNCH_TYPE_LABEL: "cold",
                    CLAIM_UID_LABEL: meta["uid"],
                    TEMPLATE_HASH_LABEL: template_hash(template["metadata"]["name"]),
                },
                "ownerReferences": [_owner(claim)],
            },
            "spec": {"podTemplate": pod_template},
        }
        created = await self._create_sandbox(body, template)
        if created is None:
            return self.emulator.read(
                f"sandboxes.{controllers.SANDBOX_GROUP}", meta["namespace"], meta["name"]
            )
        self.bindings.append(Binding(meta["namespace"], meta["name"], meta["name"], "cold"))
        return created

    async def _create_sandbox(
        self, body: dict[str, Any], template: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Create a Sandbox from ``template`` (``None`` if one of its name exists), with the
        template's ``generatedSecrets``: each a Secret of its own, named
        ``<sandbox>-<logical name>``, random URL-safe tokens, owned by the Sandbox; the
        Sandbox's env references rewritten to them and the names recorded in its annotation
        ``extensions.agents.x-k8s.io/generated-secrets``."""
        meta = body["metadata"]
        names = _secret_names(meta["name"], template)
        if names:
            _rewrite_secret_refs(body["spec"]["podTemplate"]["spec"], names)
            meta.setdefault("annotations", {})[GENERATED_SECRETS] = json.dumps(names)
        answer = await self.api.post(self._path("sandboxes", meta["namespace"]), json=body)
        if answer.status_code == 409:
            return None
        answer.raise_for_status()
        sandbox = dict(answer.json())
        for declared in (template.get("spec") or {}).get("generatedSecrets") or []:
            data = {
                entry["key"]: base64.b64encode(
                    base64.urlsafe_b64encode(
                        secrets.token_bytes(int(entry.get("lengthBytes") or 32))
                    ).rstrip(b"=")
                ).decode()
                for entry in declared["data"]
            }
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": names[declared["name"]],
                    "namespace": meta["namespace"],
                    "ownerReferences": [_owner(sandbox)],
                },
                "data": data,
            }
            made = await self.api.post(
                f"/api/v1/namespaces/{meta['namespace']}/secrets", json=secret
            )
            made.raise_for_status()
        return sandbox

    async def _claim_status(
        self,
        claim: dict[str, Any],
        sandbox: dict[str, Any] | None,
        *,
        rejected: Rejected | None = None,
    ) -> None:
        meta = claim["metadata"]
        conditions: list[dict[str, Any]] = []
        status: dict[str, Any] = {}
        if rejected is not None:
            conditions.append(_condition("Ready", "False", rejected.reason, str(rejected)))
        elif sandbox is not None:
            found = {c["type"]: c for c in (sandbox.get("status") or {}).get("conditions") or []}
            ready = found.get("Ready") or _condition(
                "Ready", "False", "SandboxNotReady", "Sandbox is not ready"
            )
            conditions.append(ready)
            if "Finished" in found:
                conditions.append(found["Finished"])
            status["sandbox"] = {
                "name": sandbox["metadata"]["name"],
                "podIPs": (sandbox.get("status") or {}).get("podIPs") or [],
            }
        status["conditions"] = conditions
        if _same(claim.get("status") or {}, status):
            return
        answer = await self.api.patch(
            self._path("sandboxclaims", meta["namespace"], meta["name"]) + "/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code != 404:
            answer.raise_for_status()

    async def _expire(self, claim: dict[str, Any]) -> None:
        lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
        if lifecycle.get("shutdownPolicy", "Retain") == "Retain":
            return
        current = self._get(
            "sandboxclaims", claim["metadata"]["namespace"], claim["metadata"]["name"]
        )
        finished = any(
            c.get("type") == "Finished" and c.get("status") == "True"
            for c in ((current or {}).get("status") or {}).get("conditions") or []
        )
        if finished and int(lifecycle.get("ttlSecondsAfterFinished", 0)) == 0:
            await self.api.delete(
                self._path(
                    "sandboxclaims", claim["metadata"]["namespace"], claim["metadata"]["name"]
                )
            )


def _secret_names(sandbox: str, template: Mapping[str, Any]) -> dict[str, str]:
    """Logical → concrete name of each of the template's ``generatedSecrets`` for one Sandbox."""
    declared = (template.get("spec") or {}).get("generatedSecrets") or []
    return {g["name"]: f"{sandbox}-{g['name']}" for g in declared}


def _rewrite_secret_refs(pod_spec: dict[str, Any], names: Mapping[str, str]) -> None:
    """Point every ``env[].valueFrom.secretKeyRef`` naming a generated Secret at its concrete
    Secret (upstream rewrites env references only, never volumes)."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod_spec.get(key) or []:
            for var in container.get("env") or []:
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                if ref is not None and ref.get("name") in names:
                    ref["name"] = names[ref["name"]]


def _check_injection(template: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
    policies = template.get("spec") or {}
    if spec.get("env") and policies.get("envVarsInjectionPolicy", "Disallowed") == "Disallowed":
        raise Rejected(
            "EnvVarsInjectionRejected", "the SandboxTemplate does not allow claims to set env"
        )
    if spec.get("volumeClaimTemplates") and (
        policies.get("volumeClaimTemplatesPolicy", "Disallowed") == "Disallowed"
    ):
        raise Rejected("VolumeClaimTemplatesError", "the SandboxTemplate disallows them")


def _merged_metadata(template: Mapping[str, Any], claim: Mapping[str, Any]) -> dict[str, Any]:
    """The template's pod metadata with the claim's ``additionalPodMetadata``: labels only in
    an allowed domain, annotations outside the restricted ones, no override of the template."""
    base = copy.deepcopy((template["spec"]["podTemplate"].get("metadata")) or {})
    extra = (claim.get("spec") or {}).get("additionalPodMetadata") or {}
    for field, is_label in (("labels", True), ("annotations", False)):
        merged = dict(base.get(field) or {})
        for key, value in (extra.get(field) or {}).items():
            domain = key.split("/", 1)[0].lower() if "/" in key else ""
            if is_label and not any(
                domain == d or domain.endswith("." + d) for d in ALLOWED_LABEL_DOMAINS
            ):
                raise Rejected(
                    "InvalidMetadata", f"label domain {domain!r} is not in the allowlist"
                )
            if not is_label and any(
                domain == d or domain.endswith("." + d) for d in RESTRICTED_DOMAINS
            ):
                raise Rejected("InvalidMetadata", f"restricted system domain: {key!r}")
            if key in merged and merged[key] != value:
                raise Rejected("InvalidMetadata", f"{key!r} would override the template's")
            merged[key] = value
        if merged:
            base[field] = merged
    return base


def _same(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def strip(status: Mapping[str, Any]) -> Any:
        conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in status.get("conditions") or []
        ]
        return {**status, "conditions": sorted(conditions, key=lambda c: c["type"])}

    return bool(strip(old) == strip(new))


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": controllers.containers.now(),
    }


def _ready(sandbox: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (sandbox.get("status") or {}).get("conditions") or []
    )


@dataclasses.dataclass
class _Queue:
    """A workqueue of keys, as client-go's: a key added while queued is queued once, one
    added while a worker has it is queued again for after; ``workers`` take keys in order,
    never one key twice at once; a failed reconcile is logged and its key queued again a
    little later."""

    workers: int = 1
    order: collections.deque[tuple[str, str]] = dataclasses.field(default_factory=collections.deque)
    queued: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    processing: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def add(self, key: tuple[str, str]) -> None:
        if key in self.queued:
            return
        self.queued.add(key)
        if key not in self.processing:
            self.order.append(key)
            self.wake.set()

    async def work(self, reconcile: Callable[[str, str], Awaitable[None]]) -> None:
        await asyncio.gather(*(self._worker(reconcile) for _ in range(self.workers)))

    async def _worker(self, reconcile: Callable[[str, str], Awaitable[None]]) -> None:
        while True:
            while not self.order:
                self.wake.clear()
                await self.wake.wait()
            key = self.order.popleft()
            self.queued.discard(key)
            self.processing.add(key)
            try:
                await reconcile(*key)
            except (httpx.HTTPError, ApiError) as err:
                log.warning("reconciling %s/%s failed (%s); again in %s s", *key, err, RETRY)
                asyncio.get_running_loop().call_later(RETRY, self.add, key)
            finally:
                self.processing.discard(key)
                if key in self.queued:
                    self.order.append(key)
                    self.wake.set()


def _group(plural: str) -> str:
    """The API group of ``plural``: the core Sandbox's, or these extensions'."""
    return controllers.SANDBOX_GROUP if plural == "sandboxes" else GROUP


def _controller(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (kind, name) of the object's controller owner, if it has one."""
    for ref in body["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref["kind"]), str(ref["name"])
    return None


def _controller_uid(body: Mapping[str, Any]) -> str | None:
    for owner in body["metadata"].get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("uid"))
    return None


def _owner(body: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "name": body["metadata"]["name"],
        "uid": body["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


@contextlib.asynccontextmanager
async def running(emulator: Emulator, api: httpx.AsyncClient) -> Any:
    """The core Sandbox controller and these extensions, installed and running."""
    answer = await api.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=controllers.SANDBOX_CRD
    )
    if answer.status_code != 409:
        answer.raise_for_status()
    pools = SandboxPools(emulator, api)
    await pools.install()
    tasks = [
        asyncio.ensure_future(controllers.Sandboxes(emulator, api).run()),
        asyncio.ensure_future(pools.run()),
    ]
    try:
        yield pools
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
