"""The Agent Sandbox stand-in's templates, warm pools and claims behave as upstream's do.

What the operator's warm cells rely on, held here so that it is tested against behaviour and
not its own assumptions: a claim adopts a Ready pooled Sandbox (owner and claim-uid label
moved, the claim's pod metadata on the running pod, never recreated), the pool replenishes
and never hands one Sandbox to two claims, an empty pool and a claim with ``env`` start cold,
a template that disallows env refuses such a claim, scaling to zero removes only unclaimed
Sandboxes, a finished claim with ``shutdownPolicy: Delete`` takes its Sandbox with it, and a
template's ``generatedSecrets`` give every pooled Sandbox tokens of its own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from support.kube import Emulator, serve
from support.node import controllers, sandboxpools
from support.operator_support import until

pytestmark = pytest.mark.slow
EXT = f"/apis/{sandboxpools.GROUP}/{sandboxpools.VERSION}/namespaces/default"
CORE = "/api/v1/namespaces/default"


def template(name: str = "cells", **policies: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{sandboxpools.GROUP}/{sandboxpools.VERSION}",
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "cell"}},
                "spec": {"containers": [{"name": "agent", "image": "agent@sha256:" + "a" * 64}]},
            },
            **policies,
        },
    }


def pool(replicas: int, name: str = "cells") -> dict[str, Any]:
    return {
        "apiVersion": f"{sandboxpools.GROUP}/{sandboxpools.VERSION}",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": "cells"}},
    }


def claim(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{sandboxpools.GROUP}/{sandboxpools.VERSION}",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": "cells"}} | spec,
    }


async def _ready_pods(emulator: Emulator, api: httpx.AsyncClient) -> None:
    """A kubelet that makes every new pod Running and Ready at once, with an IP."""
    store = emulator.store
    seen: set[str] = set()
    async for event in store.watch(
        store.kinds[("", "pods")], None, lambda _l: True, since=None, initial_bookmark=False,
        timeout=None,
    ):  # fmt: skip
        pod = event["object"]
        uid = pod["metadata"]["uid"]
        if event["type"] == "DELETED" or uid in seen:
            continue
        seen.add(uid)
        status = {
            "phase": "Running",
            "podIP": f"10.0.0.{len(seen)}",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        await api.patch(
            f"{CORE}/pods/{pod['metadata']['name']}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[tuple[Emulator, httpx.AsyncClient, sandboxpools.SandboxPools]]:
    async with (
        serve() as (emulator, url),
        httpx.AsyncClient(base_url=url, timeout=30) as api,
        sandboxpools.running(emulator, api) as pools,
    ):
        kubelet = asyncio.ensure_future(_ready_pods(emulator, api))
        try:
            yield emulator, api, pools
        finally:
            kubelet.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await kubelet


async def post(api: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    answer = await api.post(path, json=body)
    assert answer.status_code == 201, answer.text


def sandboxes(emulator: Emulator) -> list[dict[str, Any]]:
    kind = emulator.store.kinds[(controllers.SANDBOX_GROUP, "sandboxes")]
    return emulator.store.list(kind, "default", lambda _l: True)


def pooled(emulator: Emulator) -> list[dict[str, Any]]:
    return [
        s for s in sandboxes(emulator) if sandboxpools.WARM_POOL_LABEL in s["metadata"]["labels"]
    ]


def ready(body: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (body.get("status") or {}).get("conditions") or []
    )


def read(emulator: Emulator, plural: str, name: str) -> dict[str, Any]:
    group = controllers.SANDBOX_GROUP if plural == "sandboxes" else sandboxpools.GROUP
    return emulator.read(f"{plural}.{group}", "default", name)


async def test_a_claim_adopts_a_ready_pooled_sandbox_and_the_pool_replenishes() -> None:
    async with cluster() as (emulator, api, pools):
        await post(api, f"{EXT}/sandboxtemplates", template())
        await post(api, f"{EXT}/sandboxwarmpools", pool(2))
        await until(lambda: len(pooled(emulator)) == 2 and all(map(ready, pooled(emulator))),
                    "two ready pooled sandboxes")  # fmt: skip
        before = {s["metadata"]["name"]: s["metadata"]["uid"] for s in pooled(emulator)}
        pods_before = {n: emulator.read("pods", "default", n)["metadata"]["uid"] for n in before}
        extra = {"annotations": {"agenthealth.dev/test-id": "suite/t.py::first"}}
        await post(api, f"{EXT}/sandboxclaims", claim("cell-1", additionalPodMetadata=extra))
        bound = await until(
            lambda: (read(emulator, "sandboxclaims", "cell-1").get("status") or {}).get("sandbox"),
            "the claim to be bound",
        )
        name = bound["name"]
        assert name in before  # a pooled one, not a new one
        box = read(emulator, "sandboxes", name)
        claimed = read(emulator, "sandboxclaims", "cell-1")
        assert box["metadata"]["uid"] == before[name]
        assert [o["uid"] for o in box["metadata"]["ownerReferences"]] == [
            claimed["metadata"]["uid"]
        ]
        assert box["metadata"]["labels"][sandboxpools.CLAIM_UID_LABEL] == claimed["metadata"]["uid"]
        assert box["metadata"]["labels"][sandboxpools.LAUNCH_TYPE_LABEL] == "warm"
        assert sandboxpools.WARM_POOL_LABEL not in box["metadata"]["labels"]
        assert claimed["metadata"]["annotations"][sandboxpools.SANDBOX_NAME_ANNOTATION] == name
        # The running pod is the same one, now carrying the claim's metadata.
        pod = await until(
            lambda: (
                (p := emulator.read("pods", "default", name))["metadata"]
                .get("annotations", {})
                .get("agenthealth.dev/test-id")
                and p
            ),
            "the claim's annotations on the pod",
        )
        assert pod["metadata"]["uid"] == pods_before[name]
        assert pod["metadata"]["labels"][sandboxpools.CLAIM_UID_LABEL] == claimed["metadata"]["uid"]
        assert ready(claimed) or await until(
            lambda: ready(read(emulator, "sandboxclaims", "cell-1")), "the claim Ready"
        )
        # The pool makes another: two unclaimed again, the adopted one not among them.
        await until(
            lambda: (
                len(pooled(emulator)) == 2
                and name not in {s["metadata"]["name"] for s in pooled(emulator)}
            ),
            "the pool to replenish",
        )
        assert [(b.claim, b.sandbox, b.launch) for b in pools.bindings] == [
            ("cell-1", name, "warm")
        ]


async def test_an_empty_pool_and_a_claim_with_env_start_cold() -> None:
    async with cluster() as (emulator, api, pools):
        await post(api, f"{EXT}/sandboxtemplates", template(envVarsInjectionPolicy="Allowed"))
        await post(api, f"{EXT}/sandboxwarmpools", pool(0))
        await post(api, f"{EXT}/sandboxclaims", claim("cell-1"))
        await until(lambda: pools.bindings, "a binding")
        assert [(b.sandbox, b.launch) for b in pools.bindings] == [("cell-1", "cold")]
        box = read(emulator, "sandboxes", "cell-1")
        assert box["metadata"]["labels"][sandboxpools.LAUNCH_TYPE_LABEL] == "cold"

        answer = await api.patch(
            f"{EXT}/sandboxwarmpools/cells", json={"spec": {"replicas": 1}},
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert answer.status_code == 200
        await until(lambda: pooled(emulator) and ready(pooled(emulator)[0]), "a ready pooled one")
        env = [{"name": "AGENT_HEALTH_CELL", "value": "cell-2"}]
        await post(api, f"{EXT}/sandboxclaims", claim("cell-2", env=env))
        await until(lambda: len(pools.bindings) == 2, "the second binding")
        assert (pools.bindings[1].sandbox, pools.bindings[1].launch) == ("cell-2", "cold")
        agent = read(emulator, "sandboxes", "cell-2")["spec"]["podTemplate"]["spec"]["containers"][
            0
        ]
        assert {"name": "AGENT_HEALTH_CELL", "value": "cell-2"} in agent["env"]
        assert len(pooled(emulator)) == 1  # the pooled one was left alone


async def test_a_template_that_disallows_env_refuses_such_a_claim() -> None:
    async with cluster() as (emulator, api, pools):
        await post(api, f"{EXT}/sandboxtemplates", template())
        await post(api, f"{EXT}/sandboxwarmpools", pool(1))
        await post(api, f"{EXT}/sandboxclaims", claim("cell-1", env=[{"name": "A", "value": "1"}]))

        def refused() -> dict[str, Any] | None:
            found = (read(emulator, "sandboxclaims", "cell-1").get("status") or {}).get(
                "conditions"
            )
            return next((c for c in found or [] if c["reason"] == "EnvVarsInjectionRejected"), None)

        await until(refused, "the claim to be refused")
        assert pools.bindings == []


async def test_claims_racing_for_one_pool_never_share_a_sandbox() -> None:
    async with cluster() as (emulator, api, pools):
        await post(api, f"{EXT}/sandboxtemplates", template())
        await post(api, f"{EXT}/sandboxwarmpools", pool(2))
        await until(lambda: len(pooled(emulator)) == 2 and all(map(ready, pooled(emulator))),
                    "two ready pooled sandboxes")  # fmt: skip
        await asyncio.gather(*(post(api, f"{EXT}/sandboxclaims", claim(f"c{i}")) for i in range(5)))
        await until(lambda: len(pools.bindings) == 5, "every claim bound")
        names = [b.sandbox for b in pools.bindings]
        assert len(set(names)) == 5  # one Sandbox per claim, never two claims on one
        assert sorted(b.launch for b in pools.bindings).count("warm") >= 2
        for b in pools.bindings:
            owners = read(emulator, "sandboxes", b.sandbox)["metadata"]["ownerReferences"]
            assert [o["name"] for o in owners] == [b.claim]


async def test_scaling_to_zero_keeps_claimed_sandboxes_and_a_finished_claim_goes() -> None:
    async with cluster() as (emulator, api, pools):
        await post(api, f"{EXT}/sandboxtemplates", template())
        await post(api, f"{EXT}/sandboxwarmpools", pool(2))
        await until(lambda: len(pooled(emulator)) == 2 and all(map(ready, pooled(emulator))),
                    "two ready pooled sandboxes")  # fmt: skip
        lifecycle = {"shutdownPolicy": "Delete", "ttlSecondsAfterFinished": 0}
        await post(api, f"{EXT}/sandboxclaims", claim("cell-1", lifecycle=lifecycle))
        await until(lambda: pools.bindings, "the binding")
        name = pools.bindings[0].sandbox
        answer = await api.patch(
            f"{EXT}/sandboxwarmpools/cells", json={"spec": {"replicas": 0}},
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert answer.status_code == 200
        await until(lambda: not pooled(emulator), "the unclaimed sandboxes to go")
        assert [s["metadata"]["name"] for s in sandboxes(emulator)] == [name]
        # The cell's pod ends: the Sandbox finishes, the claim is deleted and takes it along.
        answer = await api.patch(
            f"{CORE}/pods/{name}/status", json={"status": {"phase": "Succeeded"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )  # fmt: skip
        assert answer.status_code == 200
        await until(
            lambda: (
                not emulator.exists(f"sandboxclaims.{sandboxpools.GROUP}", "default", "cell-1")
                and not sandboxes(emulator)
            ),
            "the finished claim and its sandbox to be gone",
        )
        assert not emulator.exists("pods", "default", name)


async def test_each_pooled_sandbox_gets_generated_secrets_of_its_own() -> None:
    """A template's ``generatedSecrets``: every concrete Sandbox of the pool its own Secret
    (random tokens, owned by it), the env references rewritten — what gives a pooled cell
    per-cell principal tokens without the operator knowing the cell in advance."""
    body = template()
    agent = body["spec"]["podTemplate"]["spec"]["containers"][0]
    agent["env"] = [
        {
            "name": "TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "cell-tokens", "key": "controller"}},
        }
    ]
    body["spec"]["generatedSecrets"] = [
        {
            "name": "cell-tokens",
            "data": [{"key": "controller"}, {"key": "ledger-key", "lengthBytes": 64}],
        }
    ]
    async with cluster() as (emulator, api, _pools):
        await post(api, f"{EXT}/sandboxtemplates", body)
        await post(api, f"{EXT}/sandboxwarmpools", pool(2))
        await until(lambda: len(pooled(emulator)) == 2, "two pooled sandboxes")
        seen: set[bytes] = set()
        for box in pooled(emulator):
            name = box["metadata"]["name"]
            recorded = json.loads(box["metadata"]["annotations"][sandboxpools.GENERATED_SECRETS])
            assert recorded == {"cell-tokens": f"{name}-cell-tokens"}
            ref = box["spec"]["podTemplate"]["spec"]["containers"][0]["env"][0]["valueFrom"]
            assert ref["secretKeyRef"] == {"name": f"{name}-cell-tokens", "key": "controller"}
            secret = await until(
                lambda n=name: (
                    emulator.exists("secrets", "default", f"{n}-cell-tokens")
                    and emulator.read("secrets", "default", f"{n}-cell-tokens")
                ),
                "its generated Secret",
            )
            assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [
                box["metadata"]["uid"]
            ]
            token = base64.b64decode(secret["data"]["controller"])
            key = base64.b64decode(secret["data"]["ledger-key"])
            assert len(base64.urlsafe_b64decode(token + b"=" * (-len(token) % 4))) == 32
            assert len(base64.urlsafe_b64decode(key + b"=" * (-len(key) % 4))) == 64
            assert token not in seen
            seen.add(token)
