"""A RunSpec cannot choose where the operator reads ledgers, nor with what.

Each attack of issue 16 is replayed against the real operator on the API emulator. The
operator reads every ledger with its own identity (its ServiceAccount, its cloud role): a
tenant's ``spec.ledger.url`` that pointed an object store at the tenant's own endpoint
(``?endpoint_url=``) would send the operator's credentials there, and a
``configmap://<other-namespace>/...`` would have the operator read another team's objects.
The RunSpec is refused when it is reconciled (``Resolved=False InvalidLedgerUrl``) with
the rule, its runs fail, and the operator makes no request to either place.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_health.gateway import recorder
from agent_health.ledger import chain, configmap, observation, podlog, records, store
from aiohttp import web
from support.gateway_support import KEY
from support.operator_support import Kubelet, cluster, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))


@contextlib.asynccontextmanager
async def endpoint() -> AsyncIterator[tuple[str, list[str]]]:
    """The tenant's own "object store" on loopback: it records every request it gets."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path} {request.headers.get('Authorization')}")
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def resolved(k8s: Any) -> dict[str, Any]:
    conditions = k8s.runspec("triage")["status"]["conditions"]
    return dict(next(c for c in conditions if c["type"] == "Resolved"))


async def refused_run(k8s: Any, ledger: str, **operator: Any) -> dict[str, Any]:
    runspec, run = k8s.example(ledger=ledger)
    async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator(**operator):
        await k8s.apply(runspec)
        await k8s.apply(run)
        status = await until(lambda: finished(k8s, "triage-nightly"), "the run to end")
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidLedgerUrl"
    assert not k8s.pods()  # neither discovery nor a cell
    return resolved(k8s)


async def test_a_ledger_url_cannot_point_the_operator_at_the_tenants_endpoint() -> None:
    async with cluster() as k8s, endpoint() as (url, seen):
        ledger = f"s3://evals/default/{{run}}?endpoint_url={url}"
        # Even under a prefix the operator allows, a query option is refused.
        found = await refused_run(k8s, ledger, ledger_allowed=("s3://evals/{namespace}/",))
    assert (found["status"], found["reason"]) == ("False", "InvalidLedgerUrl")
    assert "carries query options" in found["message"]
    assert "is the operator's configuration, not a RunSpec's" in found["message"]
    assert seen == []  # no credentials ever went there


async def test_a_ledger_url_cannot_name_another_namespace() -> None:
    async with cluster() as k8s:
        found = await refused_run(k8s, "configmap://kube-system/ledger-{run}")
        asked = [r for r in k8s.operator_requests() if r.namespace == "kube-system"]
    assert "names a ConfigMap in namespace 'kube-system'" in found["message"]
    assert asked == []  # the operator never read there


async def test_an_object_store_the_operator_does_not_allow_is_refused() -> None:
    async with cluster() as k8s:
        found = await refused_run(k8s, "gs://someone-elses-bucket/{run}")
    assert (
        "is not under a ledger prefix the operator allows (configmap://default/)"
        in (found["message"])
    )


async def test_each_runs_ledger_is_its_own_and_no_cell_can_write_one() -> None:
    """Two runs record side by side; each run's ConfigMap is owned by it and holds its own
    cells alone, written by the operator. No cell has an identity to write anything with:
    no ServiceAccount, Role or RoleBinding is made for a run, and no cell runs as one."""
    ledger = "configmap://{namespace}/triage-ledger-{run}"
    async with cluster() as k8s:
        suite = {"metadata": {"name": "suite-code"}, "data": {"rca.py": "def test(): ..."}}
        answer = await k8s.client.post("/api/v1/namespaces/default/configmaps", json=suite)
        assert answer.status_code == 201, answer.text
        runspec, run = k8s.example(ledger=ledger)
        other = copy.deepcopy(run)
        other["metadata"]["name"] = "triage-other"
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await k8s.apply(other)
            for name in ("triage-nightly", "triage-other"):
                status = await until(lambda n=name: finished(k8s, n), f"{name} to end")
                assert status["phase"] == "Succeeded", status
        configmaps = "/api/v1/namespaces/default/configmaps"
        for name in ("triage-nightly", "triage-other"):
            mine = await k8s.client.get(f"{configmaps}/triage-ledger-{name}")
            assert mine.status_code == 200, mine.text
            cells = {key.split(".jsonl")[0] for key in mine.json()["binaryData"]}
            assert cells
            assert all(cell.startswith(f"{name}-") for cell in cells), cells
            owner = mine.json()["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("EvaluationRun", name)
        listed = await k8s.client.get("/api/v1/namespaces/default/serviceaccounts")
        assert listed.json()["items"] == [], listed.text
        roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
        for plural in ("roles", "rolebindings"):
            listed = await k8s.client.get(f"{roles}/{plural}")
            assert listed.json()["items"] == [], listed.text
        assert not any("serviceAccountName" in p["spec"] for p in k8s.pods())
        code = await k8s.client.get(f"{configmaps}/suite-code")
        assert code.json()["data"] == {"rca.py": "def test(): ..."}


async def test_a_ledger_configmap_the_run_does_not_own_fails_the_run() -> None:
    """A ConfigMap already named like the run's ledger (someone else's, or planted) is never
    read as the run's ledger nor handed to its gateways: the run fails LedgerNotOwned."""
    async with cluster() as k8s:
        planted = {"metadata": {"name": "triage-ledger-triage-nightly"}, "binaryData": {}}
        answer = await k8s.client.post("/api/v1/namespaces/default/configmaps", json=planted)
        assert answer.status_code == 201, answer.text
        runspec, run = k8s.example(ledger="configmap://{namespace}/triage-ledger-{run}")
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, "triage-nightly"), "the run to end")
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert (status["phase"], failed["reason"]) == ("Failed", "LedgerNotOwned")
        assert "ConfigMap triage-ledger-triage-nightly already exists" in failed["message"]
        assert not k8s.pods()


async def test_a_target_that_floods_its_gateway_fills_only_its_own_share() -> None:
    """One ConfigMap holds a run's cells: each cell's gateway is told its share (a quarter
    kept for the controller's records, the rest over tests × repeats × (1 + infra retries)).
    Replayed with the real gateway recorder, as the run's own identity, against the
    operator's ConfigMap: a cell whose target makes 200 calls with 8 KiB paths is cut at its
    share and marked; an innocent cell still opens, records and ends its ledger."""
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger="configmap://{namespace}/triage-ledger-{run}")
        run["spec"] |= {"repeats": 2, "selection": {}}  # 1 test × 2 repeats × 3 attempts
        fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await until(lambda: len(fake.held) == 2, "two running cells")
        args = [c["args"] for p in k8s.pods() for c in p["spec"]["initContainers"]
                if c["name"] == "gateway"]  # fmt: skip
    share = int(1024 * 1024 * 0.75) // 6
    assert [a[a.index("--max-cell-bytes") + 1] for a in args] == [str(share)] * 2
    assert all(a[a.index("--max-cell-exchanges") + 1] == "10000" for a in args)

    async with cluster() as k8s:  # the replay: the operator's objects, the gateways' writes
        runspec, run = k8s.example(ledger="configmap://{namespace}/triage-ledger-{run}")
        run["spec"] |= {"repeats": 2, "selection": {}}
        fake = Kubelet(k8s, TESTS, None, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await until(lambda: len(fake.held) == 2, "two running cells")
        # Each gateway logs its cell; the operator stores the two in one write.
        flood_log, calm_log = io.BytesIO(), io.BytesIO()
        caps = recorder.Caps(records=10_000, bytes=share)
        flooder = recorder.Recorder(podlog.LogBackend(flood_log), KEY, caps=caps)
        innocent = recorder.Recorder(podlog.LogBackend(calm_log), KEY, caps=caps)
        await flooder.open_cell("flood", records.CellMeta(test_id="t", repeat=0, run_id="f"))
        for n in range(200):
            path = "/" + secrets.token_hex(4096)  # 8 KiB that gzip cannot shrink much
            flooder.start(None).finish(_seen(path))
            if n % 20 == 0:
                await flooder.flush_all()
        await flooder.append("flood", records.CellEnd(status="passed"))
        await innocent.open_cell("calm", records.CellMeta(test_id="t", repeat=1, run_id="c"))
        for _ in range(3):
            innocent.start(None).finish(_seen("/run"))
        await innocent.append("calm", records.CellEnd(status="passed"))
        await flooder.close()
        await innocent.close()
        options = store.Options(kube_api_url=k8s.url, kube_token="operator")
        ledger = configmap.ConfigMapBackend("default", "triage-ledger-triage-nightly", options)
        try:
            await ledger.store_cells(
                {
                    "flood": podlog.extract(flood_log.getvalue().decode(), "flood"),
                    "calm": podlog.extract(calm_log.getvalue().decode(), "calm"),
                }
            )
            flood = await ledger.read("flood")
            calm = await ledger.read("calm")
        finally:
            await ledger.close()
    assert flooder.dropped("flood") > 150  # most of the 200 calls did not fit its share
    marks = [json.loads(line) for line in flood if '"dropped"' in line]
    assert marks[-1]["dropped"] == flooder.dropped("flood")
    assert [json.loads(line)["kind"] for line in calm] == [
        "cell-meta", "exchange", "exchange", "exchange", "cell-end",
    ]  # fmt: skip
    assert innocent.dropped("calm") == 0
    assert chain.verify(calm, KEY).ok
    assert chain.verify(flood, KEY).ok


def _seen(path: str) -> observation.Observation:
    now = time.time()
    return observation.Observation(
        principal="target", evidence="none", upstream="peer:tools", run_id=None,
        method="GET", path=path, status=200, started_at=now, ended_at=now,
        request_bytes=0, response_bytes=0, request_sha256="0" * 64, response_sha256=None,
    )  # fmt: skip
