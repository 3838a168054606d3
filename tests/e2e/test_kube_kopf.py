"""kopf runs for real against the emulator: handlers, finalizers, annotations, deletion.

Settings the reconciler should keep: cluster-wide (kopf lists namespaces otherwise), a
finalizer and annotation storage under our own group, events only at WARNING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import kopf
import pytest
from agent_health.cluster.api import crds
from support.kube import Emulator, serve

GROUP, VERSION, PLURAL = "agenthealth.dev", "v1alpha1", "evaluationruns"
RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
CM = "/api/v1/namespaces/default/configmaps"
KIND = f"{PLURAL}.{GROUP}"
FINALIZER = "agenthealth.dev/finalizer"


async def _until(check: Any, what: str, attempts: int = 400) -> None:
    """Poll ``check`` a bounded number of times (a count, not a clock)."""
    for _ in range(attempts):
        if check():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"gave up waiting for {what}")


def _settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 5
    settings.watching.client_timeout = 10
    settings.posting.level = logging.WARNING  # no k8s Events for routine handler logs
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    return settings


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Emulator, httpx.AsyncClient, str]]:
    async with serve() as (emulator, url), httpx.AsyncClient(base_url=url) as client:
        for definition in crds.definitions():
            answer = await client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=definition
            )
            assert answer.status_code == 201, answer.text
        yield emulator, client, url


async def test_kopf_handles_create_and_delete_through_its_finalizer(
    cluster: tuple[Emulator, httpx.AsyncClient, str],
) -> None:
    emulator, client, url = cluster
    registry = kopf.OperatorRegistry()
    seen: list[tuple[str, str, int]] = []

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=url, insecure=True)

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    async def created(
        name: str, spec: kopf.Spec, patch: kopf.Patch, body: kopf.Body, **_: Any
    ) -> None:
        seen.append(("create", name, spec["repeats"]))
        # A dependent, as a cell pod will be: owned by the run, so deleting the run collects it.
        child: dict[str, Any] = {"metadata": {"name": f"{name}-cell-0"}, "data": {}}
        kopf.adopt(child, owner=body)
        answer = await client.post(CM, json=child)
        assert answer.status_code == 201, answer.text
        patch.status["phase"] = "Pending"  # a field of the schema: the server keeps it

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def deleted(name: str, **_: Any) -> None:
        seen.append(("delete", name, 0))

    stop, ready = asyncio.Event(), asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(
            registry=registry,
            settings=_settings(),
            clusterwide=True,
            standalone=True,
            stop_flag=stop,
            ready_flag=ready,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), timeout=30)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "EvaluationRun",
            "metadata": {"name": "nightly"},
            "spec": {"runSpecRef": {"name": "triage"}, "repeats": 2},
        }
        assert (await client.post(RUNS, json=body)).status_code == 201

        def handled() -> bool:
            obj = emulator.read(KIND, "default", "nightly")
            return bool(seen) and obj.get("status", {}).get("phase") == "Pending"

        await _until(handled, "the create handler and its status patch")
        assert seen == [("create", "nightly", 2)]
        stored = emulator.read(KIND, "default", "nightly")
        assert stored["metadata"]["finalizers"] == [FINALIZER]  # the JSON patch with `test` passed
        annotations = stored["metadata"]["annotations"]
        assert f"{GROUP}/last-handled-configuration" in annotations
        assert stored["metadata"]["generation"] == 1
        owners = emulator.read("configmaps", "default", "nightly-cell-0")["metadata"]
        assert owners["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]

        assert (await client.delete(f"{RUNS}/nightly")).status_code == 200
        await _until(lambda: not emulator.exists(KIND, "default", "nightly"), "the deletion")
        assert seen == [("create", "nightly", 2), ("delete", "nightly", 0)]
        assert (await client.get(f"{RUNS}/nightly")).status_code == 404
        assert not emulator.exists("configmaps", "default", "nightly-cell-0")
    finally:
        stop.set()
        await asyncio.wait_for(operator, timeout=30)
    assert operator.exception() is None
