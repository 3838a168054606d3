"""The Kubernetes API emulator, driven over real HTTP (httpx) on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import kmock
import pytest
from agent_health.cluster.api import crds
from support.kube import Emulator, serve

CM = "/api/v1/namespaces/default/configmaps"
RUNS = "/apis/agenthealth.dev/v1alpha1/namespaces/default/evaluationruns"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, httpx.AsyncClient]]:
    async with serve() as (emulator, url), httpx.AsyncClient(base_url=url) as client:
        yield emulator, client


@pytest.fixture
async def client(api: tuple[Emulator, httpx.AsyncClient]) -> httpx.AsyncClient:
    return api[1]


@pytest.fixture
async def with_crds(client: httpx.AsyncClient) -> httpx.AsyncClient:
    for definition in crds.definitions():
        answer = await client.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=definition
        )
        assert answer.status_code == 201, answer.text
    return client


def _run(name: str = "nightly", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agenthealth.dev/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name},
        "spec": {"runSpecRef": {"name": "triage"}, **spec},
    }


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


async def test_create_sets_server_fields_and_answers_201(client: httpx.AsyncClient) -> None:
    answer = await client.post(CM, json=_cm("a"))
    assert answer.status_code == 201
    meta = answer.json()["metadata"]
    assert meta["namespace"] == "default"  # from the URL
    assert meta["generation"] == 1
    assert all(meta[k] for k in ("uid", "creationTimestamp", "resourceVersion"))
    assert answer.json()["kind"] == "ConfigMap"
    assert (await client.get(f"{CM}/a")).json() == answer.json()


async def test_create_refuses_a_duplicate_and_a_namespace_mismatch(
    client: httpx.AsyncClient,
) -> None:
    await client.post(CM, json=_cm("a"))
    again = await client.post(CM, json=_cm("a"))
    assert again.status_code == 409
    assert again.json()["reason"] == "AlreadyExists"
    other = _cm("b") | {"metadata": {"name": "b", "namespace": "other"}}
    mismatch = await client.post(CM, json=other)
    assert mismatch.status_code == 400
    assert "does not match the namespace" in mismatch.json()["message"]
    nameless = await client.post(CM, json={"metadata": {}})
    assert nameless.status_code == 422


async def test_generate_name_makes_a_unique_name(client: httpx.AsyncClient) -> None:
    names = set()
    for _ in range(3):
        answer = await client.post(CM, json={"metadata": {"generateName": "cell-"}})
        names.add(answer.json()["metadata"]["name"])
    assert len(names) == 3
    assert all(n.startswith("cell-") for n in names)


async def test_resource_versions_grow_and_a_noop_keeps_them(client: httpx.AsyncClient) -> None:
    first = int((await client.post(CM, json=_cm("a"))).json()["metadata"]["resourceVersion"])
    second = await client.patch(f"{CM}/a", json={"data": {"k": "w"}}, headers=MERGE)
    assert int(second.json()["metadata"]["resourceVersion"]) > first
    same = await client.patch(f"{CM}/a", json={"data": {"k": "w"}}, headers=MERGE)
    assert (
        same.json()["metadata"]["resourceVersion"] == second.json()["metadata"]["resourceVersion"]
    )


async def test_a_stale_resource_version_is_a_conflict(client: httpx.AsyncClient) -> None:
    created = (await client.post(CM, json=_cm("a"))).json()
    await client.patch(f"{CM}/a", json={"data": {"k": "changed"}}, headers=MERGE)
    stale = created | {"data": {"k": "mine"}}
    answer = await client.put(f"{CM}/a", json=stale)
    assert answer.status_code == 409
    assert answer.json()["reason"] == "Conflict"
    fresh = (await client.get(f"{CM}/a")).json() | {"data": {"k": "mine"}}
    assert (await client.put(f"{CM}/a", json=fresh)).json()["data"] == {"k": "mine"}


async def test_a_failed_json_patch_test_is_422_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    created = (await client.post(CM, json=_cm("a"))).json()
    rv = created["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "999"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]},
    ]
    refused = await client.patch(f"{CM}/a", json=ops, headers=JSON_PATCH)
    assert refused.status_code == 422
    assert "finalizers" not in (await client.get(f"{CM}/a")).json()["metadata"]
    ops[0]["value"] = rv
    applied = await client.patch(f"{CM}/a", json=ops, headers=JSON_PATCH)
    assert applied.status_code == 200
    assert applied.json()["metadata"]["finalizers"] == ["x/y"]


async def test_generation_follows_the_spec_not_status_or_metadata(
    with_crds: httpx.AsyncClient,
) -> None:
    client = with_crds
    await client.post(RUNS, json=_run())
    labelled = await client.patch(
        f"{RUNS}/nightly", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
    )
    assert labelled.json()["metadata"]["generation"] == 1
    status = await client.patch(
        f"{RUNS}/nightly/status", json={"status": {"phase": "Running"}}, headers=MERGE
    )
    assert status.json()["metadata"]["generation"] == 1
    assert status.json()["status"]["phase"] == "Running"


async def test_the_status_subresource_is_separate(with_crds: httpx.AsyncClient) -> None:
    client = with_crds
    created = await client.post(RUNS, json=_run() | {"status": {"phase": "Succeeded"}})
    assert "status" not in created.json()  # status is ignored on create
    main = await client.patch(
        f"{RUNS}/nightly",
        json={"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}},
        headers=MERGE,
    )
    assert "status" not in main.json()
    assert main.json()["metadata"]["labels"] == {"x": "y"}
    sub = await client.patch(
        f"{RUNS}/nightly/status",
        json={"status": {"phase": "Running"}, "spec": {"repeats": 9}},
        headers=MERGE,
    )
    assert sub.json()["status"]["phase"] == "Running"
    assert sub.json()["spec"]["repeats"] == 1
    whole = sub.json() | {"status": {"phase": "Grading"}}
    put = await client.put(f"{RUNS}/nightly/status", json=whole)
    assert put.json()["status"]["phase"] == "Grading"


async def test_custom_objects_get_defaults_pruning_and_validation(
    with_crds: httpx.AsyncClient,
) -> None:
    client = with_crds
    created = await client.post(RUNS, json=_run(unknownField=1))
    spec = created.json()["spec"]
    assert (spec["repeats"], spec["parallelism"], spec["skipJudge"]) == (1, 1, False)
    assert "unknownField" not in spec
    bad = await client.post(RUNS, json=_run("bad", repeats=0))
    assert bad.status_code == 422
    assert "spec.repeats: 0 is less than the minimum of 1" in bad.json()["message"]
    immutable = await client.patch(f"{RUNS}/nightly", json={"spec": {"repeats": 2}}, headers=MERGE)
    assert immutable.status_code == 422
    assert "spec is immutable" in immutable.json()["message"]
    steered = await client.patch(f"{RUNS}/nightly", json={"spec": {"suspend": True}}, headers=MERGE)
    assert steered.status_code == 200, steered.text


async def test_a_crd_is_discoverable_once_applied(with_crds: httpx.AsyncClient) -> None:
    client = with_crds
    groups = (await client.get("/apis")).json()["groups"]
    assert "agenthealth.dev" in [g["name"] for g in groups]
    listing = (await client.get("/apis/agenthealth.dev/v1alpha1")).json()
    names = {r["name"]: r for r in listing["resources"]}
    assert {"evaluationruns", "evaluationruns/status", "runspecs", "runspecs/status"} <= set(names)
    assert names["evaluationruns"]["namespaced"] is True
    assert set(names["evaluationruns"]["shortNames"]) == {"evalrun", "er"}  # kmock keeps a set
    crd = await client.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/evaluationruns.agenthealth.dev"
    )
    conditions = {c["type"]: c["status"] for c in crd.json()["status"]["conditions"]}
    assert conditions["Established"] == "True"
    core = (await client.get("/api/v1")).json()
    assert core["groupVersion"] == "v1"


async def test_label_selectors_filter_lists(client: httpx.AsyncClient) -> None:
    await client.post(CM, json=_cm("web", app="web", tier="front"))
    await client.post(CM, json=_cm("db", app="db", tier="back"))
    await client.post(CM, json=_cm("plain"))

    async def names(selector: str) -> list[str]:
        answer = await client.get(CM, params={"labelSelector": selector})
        return [i["metadata"]["name"] for i in answer.json()["items"]]

    assert await names("app=web") == ["web"]
    assert await names("app in (web,db)") == ["web", "db"]
    assert await names("tier!=back") == ["web", "plain"]
    assert await names("app") == ["web", "db"]
    assert await names("!app") == ["plain"]
    assert await names("app notin (web),tier") == ["db"]
    bad = await client.get(CM, params={"labelSelector": "a=(b"})
    assert bad.status_code == 400


async def _watch(client: httpx.AsyncClient, params: dict[str, str], count: int) -> list[Any]:
    """Read ``count`` events (or until the server closes the stream)."""
    events: list[Any] = []
    async with client.stream("GET", CM, params={"watch": "true", **params}) as stream:
        async for line in stream.aiter_lines():
            if line.strip():
                events.append(json.loads(line))
            if len(events) == count:
                break
    return events


async def test_a_watch_resumes_after_a_resource_version(client: httpx.AsyncClient) -> None:
    created = (await client.post(CM, json=_cm("a", app="x"))).json()
    await client.patch(f"{CM}/a", json={"data": {"k": "2"}}, headers=MERGE)
    await client.post(CM, json=_cm("b"))
    await client.delete(f"{CM}/a")
    since = created["metadata"]["resourceVersion"]
    events = await _watch(client, {"resourceVersion": since, "labelSelector": "app=x"}, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]


async def test_a_watch_without_a_version_lists_first_then_follows(
    client: httpx.AsyncClient,
) -> None:
    await client.post(CM, json=_cm("a"))
    async with client.stream("GET", CM, params={"watch": "true"}) as stream:
        lines = stream.aiter_lines()
        first = json.loads(await anext(lines))
        await client.post(CM, json=_cm("b"))
        second = json.loads(await anext(lines))
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "b")


async def test_a_watch_ends_at_its_timeout_and_can_mark_initial_events(
    client: httpx.AsyncClient,
) -> None:
    await client.post(CM, json=_cm("a"))
    params = {"timeoutSeconds": "1", "sendInitialEvents": "true"}
    events = await _watch(client, params, count=-1)  # reads until the server closes
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]["metadata"]
    assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_finalizers_hold_a_deletion_until_removed(client: httpx.AsyncClient) -> None:
    await client.post(CM, json=_cm("a") | {"metadata": {"name": "a", "finalizers": ["x/y"]}})
    marked = await client.delete(f"{CM}/a")
    assert marked.status_code == 200
    assert marked.json()["metadata"]["deletionTimestamp"]
    assert (await client.get(f"{CM}/a")).status_code == 200
    more = await client.patch(
        f"{CM}/a", json={"metadata": {"finalizers": ["x/y", "z/w"]}}, headers=MERGE
    )
    assert more.status_code == 422
    released = await client.patch(f"{CM}/a", json={"metadata": {"finalizers": None}}, headers=MERGE)
    assert released.status_code == 200
    assert (await client.get(f"{CM}/a")).status_code == 404


async def test_owned_objects_are_garbage_collected(with_crds: httpx.AsyncClient) -> None:
    client = with_crds
    owner = (await client.post(RUNS, json=_run())).json()
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": "nightly",
        "uid": owner["metadata"]["uid"],
    }
    owned = {"metadata": {"name": "cell-1", "ownerReferences": [reference]}}
    grandchild_of = (await client.post(CM, json=owned)).json()
    child_ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "cell-1",
        "uid": grandchild_of["metadata"]["uid"],
    }
    await client.post(CM, json={"metadata": {"name": "cell-1-log", "ownerReferences": [child_ref]}})
    await client.post(CM, json=_cm("unrelated"))
    await client.delete(f"{RUNS}/nightly")
    assert (await client.get(f"{CM}/cell-1")).status_code == 404
    assert (await client.get(f"{CM}/cell-1-log")).status_code == 404
    assert (await client.get(f"{CM}/unrelated")).status_code == 200


async def test_unknown_kinds_and_objects_are_404(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"{CM}/missing")).status_code == 404
    assert (await client.get("/apis/nope.dev/v1/namespaces/default/things")).status_code == 404
    assert (await client.get(f"{CM}/missing/status")).status_code == 404


async def test_kmock_reactions_still_take_priority_for_fault_injection(
    api: tuple[Emulator, httpx.AsyncClient],
) -> None:
    emulator, client = api
    await client.post(CM, json=_cm("a"))
    emulator["patch", kmock.resource("", "v1", "configmaps")] << 503
    refused = await client.patch(f"{CM}/a", json={"data": {"k": "x"}}, headers=MERGE)
    assert refused.status_code == 503
    assert (await client.get(f"{CM}/a")).json()["data"] == {"k": "v"}


async def test_json_patch_ops_apply_in_order_and_bad_ones_are_422(
    client: httpx.AsyncClient,
) -> None:
    await client.post(CM, json={"metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}})
    ops = [
        {"op": "copy", "from": "/data/x", "path": "/data/z"},
        {"op": "move", "from": "/data/y", "path": "/data/w"},
        {"op": "replace", "path": "/data/x", "value": "9"},
        {"op": "remove", "path": "/data/z"},
        {"op": "add", "path": "/metadata/labels", "value": {"a~b/c": "d"}},
        {"op": "test", "path": "/metadata/labels/a~0b~1c", "value": "d"},
    ]
    applied = await client.patch(f"{CM}/a", json=ops, headers=JSON_PATCH)
    assert applied.json()["data"] == {"x": "9", "w": "2"}
    assert applied.json()["metadata"]["labels"] == {"a~b/c": "d"}
    for bad in (
        [{"op": "remove", "path": "/data/missing"}],
        [{"op": "frobnicate", "path": "/data"}],
        {"op": "add"},
    ):
        answer = await client.patch(f"{CM}/a", json=bad, headers=JSON_PATCH)
        assert answer.status_code == 422, bad
    not_an_object = await client.patch(f"{CM}/a", json=["x"], headers=MERGE)
    assert not_an_object.status_code == 422


async def test_deleting_a_crd_stops_serving_its_kind(with_crds: httpx.AsyncClient) -> None:
    client = with_crds
    await client.post(RUNS, json=_run())
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/evaluationruns.agenthealth.dev"
    assert (await client.delete(crd)).status_code == 200
    assert (await client.get(f"{RUNS}/nightly")).status_code == 404
    listing = (await client.get("/apis/agenthealth.dev/v1alpha1")).json()
    assert "evaluationruns" not in {r["name"] for r in listing["resources"]}
