"""The operator, black-box, the way a cluster runs it (issue "The operator, run after run").

The chart (``ci/kind-values.yaml``) is installed into the API emulator and the real
``agent-health operator`` runs as its Deployment's pod; every container of every pod the
operator creates (discovery, gateway, peer, target, controller) runs in the pod's own
network namespace, with its env, volumes and native-sidecar order (see ``tests/support/node/``).
Every case runs twice, once on each of the node's runtimes: ``process`` (each container a
process started from the command its image's Dockerfile gives, on this checkout's files)
and ``container`` (each container a real container, run by podman and runc from the images
``make images`` built, pushed to a real registry and pulled from it by digest). One cluster
and one operator serve every case of a runtime; each case has RunSpecs and runs of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from agent_health import history
from agent_health.ledger import audit, records, store
from support import e2e_support as e2e
from support import examples_support, registry_support

pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
    # The first case of the container runtime also builds the images when they are stale.
    pytest.mark.timeout(900),
]
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "01-quickstart" / "test_triage.py"
CELL_LABELS = {"agenthealth.dev/component": "cell"}


# Each runtime's cases share one cluster (and the container runtime's images, registry and
# node store): under `make test`'s workers they run together on one worker, one group each.
RUNTIMES = [
    pytest.param(runtime, marks=pytest.mark.xdist_group(f"e2e-{runtime}"))
    for runtime in ("process", "container")
]


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=RUNTIMES)
async def k8s(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[e2e.Cluster]:
    """The cluster with the chart installed and the operator ready; the example's Secrets
    and suite ConfigMap in ``default`` (README, "Run on a cluster")."""
    runtime: str = request.param
    reason = e2e.runtime_unavailable(runtime)
    if reason is not None and not os.environ.get("CI"):
        # Off CI, a machine that cannot run this runtime skips, saying why; in CI (root,
        # with scripts/get-containers.sh run by `make tools`) it fails with the reason.
        pytest.skip(reason)
    if runtime == "container":
        await asyncio.to_thread(e2e.build_images)
    async with e2e.cluster(tmp_path_factory.mktemp(f"node-{runtime}"), runtime) as cluster:
        try:
            await cluster.secret(e2e.NAMESPACE, "judge-credentials", api_key=e2e.JUDGE_KEY)
            await cluster.secret(
                "default", "judge-credentials", offered=True, api_key=e2e.RUNSPEC_JUDGE_KEY
            )
            await cluster.secret("default", "triage-agent-llm", offered=True, api_key="unused")
            # The suite as docs/operator.md creates it: every file of the quickstart's suite.
            await cluster.config_map("default", "triage-suite", {
                "test_triage.py": QUICKSTART.read_text(),
                "triage.cases.json": (QUICKSTART.parent / "triage.cases.json").read_text(),
            })  # fmt: skip
            # The one change to the kind values beyond the cluster's own (see Cluster.install):
            # Agent Sandbox (and its warm-pool extensions) is installed here, so the operator
            # watches Sandboxes and SandboxClaims.
            await cluster.install("sandbox.enabled=true", "sandbox.warmPools=true")
            await e2e.until(cluster.operator_ready, "the operator to be ready")
            yield cluster
        except BaseException:
            print(e2e.dump(cluster, run=""))
            raise


def runspec_of(
    name: str, model_url: str, *, suite: str = "triage-suite", **spec: Any
) -> dict[str, Any]:
    """The example RunSpec, renamed, its judge pointed at the test's model."""
    runspec, _ = e2e.example()
    runspec = copy.deepcopy(runspec)
    runspec["metadata"]["name"] = name
    runspec["spec"]["suite"] = {"configMap": {"name": suite}}
    runspec["spec"]["judge"]["baseUrl"] = model_url
    runspec["spec"]["ledger"] = {"url": f"configmap://default/{name}-ledger-{{run}}"}
    runspec["spec"]["isolation"] = {"mode": "pod"}
    runspec["spec"] |= spec
    return runspec


def run_of(name: str, runspec: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agenthealth.dev/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runSpecRef": {"name": runspec}, **spec},
    }


def phase(k8s: e2e.Cluster, run: str) -> str | None:
    return k8s.run(run).get("status", {}).get("phase")


async def finished(k8s: e2e.Cluster, run: str, seconds: float = 300) -> dict[str, Any]:
    """The run once it is in a terminal phase."""
    try:
        await e2e.until(
            lambda: phase(k8s, run) in ("Succeeded", "Failed"), f"run {run} to end", seconds
        )
    except AssertionError:
        print(e2e.dump(k8s, run))
        raise
    return k8s.run(run)


def cells_of(k8s: e2e.Cluster, run: str) -> list[dict[str, Any]]:
    return k8s.pods("default", **CELL_LABELS, **{"agenthealth.dev/run": run})


# -- a run with a peer the agent really calls through the gateway ---------------------------


async def test_the_example_runs_and_its_agent_calls_its_peer_through_the_gateway(
    k8s: e2e.Cluster,
) -> None:
    await k8s.apply(runspec_of("peer", k8s.model.url))
    await k8s.apply(run_of("peer-1", "peer", repeats=2, parallelism=2,
                           selection={"grep": "payment"}))  # fmt: skip
    done = await finished(k8s, "peer-1")
    status = done["status"]
    assert status["phase"] == "Succeeded", e2e.dump(k8s, "peer-1")
    assert status["counts"]["passed"] == 2, status
    # The example's peer declares its tools, so each passed tool matcher was held to the
    # calls its gateway recorded, and every claimed call was seen.
    assert status["counts"]["unverifiedClaims"] == 0, status
    cells = cells_of(k8s, "peer-1")
    assert len(cells) == 2
    key = k8s.ledger_key("peer-1")
    for pod in cells:
        spec = pod["spec"]
        images = [c["image"] for c in [*spec["initContainers"], *spec["containers"]]]
        assert all("@sha256:" in image for image in images), images
        url = "configmap://default/peer-ledger-peer-1"
        ledger = await k8s.ledger(url, pod["metadata"]["name"], key)
        calls = {
            (r.principal, r.upstream, r.path.split("?")[0])
            for r in ledger
            if isinstance(r, records.Exchange)
        }
        assert ("target", "peer:logs", "/search_logs") in calls, calls
        assert ("target", "peer:logs", "/service_status") in calls, calls
        assert ("controller", "target", "/run") in calls, calls
        assert ("controller", "judge", "/api/judge") in calls, calls
    # The judge service answered with the RunSpec's own model and key.
    keys = {r.headers.get("Authorization") for r in k8s.model.requests}
    assert keys == {f"Bearer {e2e.RUNSPEC_JUDGE_KEY}"}, keys
    # The ledger ConfigMap was written by the operator alone (it makes it, reads each
    # ended cell's gateway log and stores the cells): no gateway, agent or controller.
    writers = {
        r.headers.get("Authorization")
        for r in k8s.emulator
        if r.method.value in ("POST", "PUT", "PATCH")
        and r.resource is not None
        and r.resource.plural == "configmaps"
        and r.namespace == "default"
    }
    operator = f"Bearer system:serviceaccount:{e2e.NAMESPACE}:{e2e.RELEASE}-agent-health"
    assert writers - {"Bearer kubelet"} == {operator}, writers
    logs = {
        r.name
        for r in k8s.emulator
        if r.subresource == "log" and r.headers.get("Authorization") == operator
    }
    assert {p["metadata"]["name"] for p in cells} <= logs, logs
    # The whole ConfigMap verifies, as `agent-health ledger verify` checks it.
    options = store.Options(kube_api_url=k8s.url, kube_token="test")
    report = await audit.verify_url("configmap://default/peer-ledger-peer-1", key, options=options)
    assert report.ok, str(report)
    assert len(report.cells) == 2, str(report)


async def test_an_mcp_peer_is_read_call_by_call_and_graded_on_what_its_gateway_read(
    k8s: e2e.Cluster,
) -> None:
    """The example's peer serving its tools as an MCP server (``protocol: mcp``): the cell's
    gateway reads each tools/call into the ledger, and the operator holds the test's tool
    matchers to those calls by tool name."""
    runspec = runspec_of("mcp", k8s.model.url)
    peer = runspec["spec"]["peers"][0]
    peer["protocol"] = "mcp"
    peer["env"] = [{"name": "LOG_SERVER_PROTOCOL", "value": "mcp"}]
    await k8s.apply(runspec)
    await k8s.apply(run_of("mcp-1", "mcp", selection={"grep": "payment"}))
    done = await finished(k8s, "mcp-1")
    status = done["status"]
    assert status["phase"] == "Succeeded", e2e.dump(k8s, "mcp-1")
    assert status["counts"]["passed"] == 1, status
    assert status["counts"]["unverifiedClaims"] == 0, status
    [pod] = cells_of(k8s, "mcp-1")
    env = {
        e["name"]: e.get("value") for c in pod["spec"]["initContainers"] for e in c.get("env", [])
    }
    assert (env["AGENT_HEALTH_PEER_LOGS_URL"] or "").endswith("/mcp"), env
    key = k8s.ledger_key("mcp-1")
    ledger = await k8s.ledger("configmap://default/mcp-ledger-mcp-1", pod["metadata"]["name"], key)
    calls = [
        (r.principal, r.server, r.method, r.name, r.is_error)
        for r in records.unfold(ledger)
        if isinstance(r, records.McpRecord) and r.method == "tools/call"
    ]
    assert ("target", "peer:logs", "tools/call", "search_logs", False) in calls, calls
    assert ("target", "peer:logs", "tools/call", "service_status", False) in calls, calls
    signals = [r.signal for r in ledger if isinstance(r, records.SignalRecord)]
    assert any(s["name"].startswith("to_have_called_tool(") for s in signals), signals


CLOCK_SUITE = """
from agent_health import test

@test("tells the time in Oslo")
async def tells_the_time(agent, expect):
    result = await agent.run("What time is it in Europe/Oslo?")
    expect(result).to_have_called_tool(
        "get_current_time", {"timezone": "Europe/Oslo"}, server="time"
    )
    expect(result.output).to_match(r"^It is \\d\\d:\\d\\d in Europe/Oslo\\.$")
    expect(result).to_have_no_tool_errors()

@test("claims a conversion it never made")
async def claims(agent, expect):
    result = await agent.run("What time is it in UTC?", env={"CLAIM": "convert_time"})
    expect(result).to_have_called_tool("convert_time")
"""


async def test_a_stdio_mcp_server_behind_the_bridge_is_a_cell_peer_listed_at_resolve(
    k8s: e2e.Cluster,
) -> None:
    """The example MCP peer (image mcp-time: the real mcp-server-time, a stdio server, behind
    ``agent-health mcp bridge``) declared with no tools: the RunSpec's discovery pod runs it
    and lists its tools; in each cell the target calls it through the gateway, which reads
    the call; the operator grades on that read — the call made passes, the call only
    claimed (a tool the peer listed, the agent never called) fails."""
    await k8s.config_map("default", "clock-suite", {"test_clock.py": CLOCK_SUITE})
    runspec = runspec_of("clock", k8s.model.url, suite="clock-suite")
    time = {"name": "time", "image": f"{e2e.REGISTRY}/agent-health/mcp-time:dev",
            "port": 9100, "protocol": "mcp"}  # fmt: skip
    runspec["spec"]["peers"] = [time]
    await k8s.apply(runspec)
    await k8s.apply(run_of("clock-1", "clock", skipJudge=True))
    done = await finished(k8s, "clock-1")
    status = done["status"]
    spec = k8s.read("runspecs.agenthealth.dev", "default", "clock") or {}
    assert spec["status"]["mcpTools"] == {"time": ["get_current_time", "convert_time"]}, spec
    tests = {t["id"]: t for t in status["tests"]}
    assert tests["test_clock.py::tells the time in Oslo"]["passed"] == 1, e2e.dump(k8s, "clock-1")
    assert tests["test_clock.py::claims a conversion it never made"]["failed"] == 1, status
    assert status["counts"]["unverifiedClaims"] == 1, status
    key = k8s.ledger_key("clock-1")
    for pod in cells_of(k8s, "clock-1"):
        peer = next(c for c in pod["spec"]["initContainers"] if c["name"] == "peer-time")
        assert "/agent-health/mcp-time@sha256:" in peer["image"], peer
        url = "configmap://default/clock-ledger-clock-1"
        ledger = await k8s.ledger(url, pod["metadata"]["name"], key)
        calls = [
            (r.principal, r.server, r.name, r.arguments, r.is_error)
            for r in records.unfold(ledger)
            if isinstance(r, records.McpRecord) and r.method == "tools/call"
        ]
        asked = next(r for r in ledger if isinstance(r, records.RunResultRecord)).prompt
        zone = "Europe/Oslo" if "Oslo" in (asked or "") else "UTC"
        assert calls == [("target", "peer:time", "get_current_time", {"timezone": zone}, False)]
        if zone == "Europe/Oslo":
            signals = {r.signal["name"]: r.signal for r in ledger
                       if isinstance(r, records.SignalRecord)}  # fmt: skip
            called = next(v for n, v in signals.items() if n.startswith("to_have_called_tool("))
            assert called["evidence"]["source"] == "gateway", called


def pod_creations(k8s: e2e.Cluster, run: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in k8s.emulator.store.events:
        meta = event.object["metadata"]
        if (
            event.kind.plural == "pods"
            and event.type == "ADDED"
            and meta.get("labels", {}).get("agenthealth.dev/run") == run
            and meta.get("labels", {}).get("agenthealth.dev/component") == "cell"
        ):
            counts[meta["name"]] = counts.get(meta["name"], 0) + 1
    return counts


# -- one RunSpec, many runs -----------------------------------------------------------------


def resolved(k8s: e2e.Cluster, name: str) -> bool:
    body = k8s.read("runspecs.agenthealth.dev", "default", name) or {}
    conditions = {c["type"]: c["status"] for c in body.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


async def test_a_runspec_runs_again_after_its_first_run(k8s: e2e.Cluster) -> None:
    await k8s.apply(runspec_of("again", k8s.model.url))
    await k8s.apply(run_of("again-1", "again", selection={"grep": "payment"}))
    assert (await finished(k8s, "again-1"))["status"]["phase"] == "Succeeded"
    await k8s.apply(run_of("again-2", "again", selection={"grep": "payment"}))
    second = await finished(k8s, "again-2")
    assert second["status"]["phase"] == "Succeeded", e2e.dump(k8s, "again-2")
    assert second["status"]["counts"]["passed"] == 1


async def test_two_runs_of_a_ready_runspec_run_side_by_side(k8s: e2e.Cluster) -> None:
    await k8s.apply(runspec_of("twice", k8s.model.url))
    await e2e.until(lambda: resolved(k8s, "twice"), "RunSpec twice to be resolved")
    for name in ("twice-a", "twice-b"):
        await k8s.apply(run_of(name, "twice", selection={"grep": "payment"}))
    for name in ("twice-a", "twice-b"):
        done = await finished(k8s, name)
        assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, name)
        assert done["status"]["counts"]["passed"] == 1, e2e.dump(k8s, name)
        assert len(cells_of(k8s, name)) == 1


# -- a gateway killed in the middle of a test -----------------------------------------------

SLOW_SUITE = """
from agent_health import test


@test("a slow diagnosis")
async def slow(agent, expect):
    result = await agent.run("Why is the payment service failing?", env={"DELAY_S": "8"})
    expect(result.output).to_contain("db-primary")
"""


def established(pid: int, port: int) -> bool:
    """Whether the process's network namespace has a connection accepted on ``port``."""
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.split(":")[1], 16) == port and state == "01":
                return True
    return False


async def test_a_gateway_killed_mid_test_is_an_infra_failure_and_the_cell_is_retried(
    k8s: e2e.Cluster,
) -> None:
    await k8s.config_map("default", "slow-suite", {"test_slow.py": textwrap.dedent(SLOW_SUITE)})
    await k8s.apply(runspec_of("gw", k8s.model.url, suite="slow-suite"))
    await k8s.apply(run_of("gw-1", "gw", retry={"infraRetries": 1, "backoffSeconds": 1}))
    pod = await e2e.until(lambda: cells_of(k8s, "gw-1"), "the cell pod")
    name = pod[0]["metadata"]["name"]
    first = None

    def target_busy() -> bool:
        nonlocal first
        try:
            first = k8s.node.pod("default", name)
        except KeyError:
            return False
        target = first.containers["target"]
        return target.run is not None and established(target.run.pid, 8080)

    # The controller's call has gone through the gateway to the target, which holds it.
    await e2e.until(target_busy, "the agent call to reach the target")
    assert first is not None
    gateway = first.containers["gateway"]
    assert gateway.run is not None
    gateway.run.signal(signal.SIGKILL)
    done = await finished(k8s, "gw-1")
    # The attempt the gateway died in is the infrastructure's failure, never a pass; its
    # retry, with a gateway that stays up, passes.
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "gw-1")
    assert done["status"]["counts"]["passed"] == 1, e2e.dump(k8s, "gw-1")
    assert pod_creations(k8s, "gw-1") == {name: 2}
    # The gateway of the first attempt died by the signal. Whether the kubelet restarted it
    # before that pod ended is a race (a real kubelet waits 10 s before a first restart);
    # the grade does not depend on it (cells.observed reads a killed gateway either way).
    assert gateway.runs[0].exit_code == 128 + signal.SIGKILL

    def reasons() -> set[str]:
        events = k8s.emulator.store.kinds[("", "events")]
        return {
            str(e.get("reason"))
            for e in k8s.emulator.store.list(events, "default", lambda _l: True)
            if e.get("involvedObject", {}).get("name") == "gw-1"
        }

    # Events are posted beside the status, so one may land just after the run ends.
    await e2e.until(lambda: "CellInfraFailure" in reasons(), "the CellInfraFailure Event")


# -- the operator restarted in the middle of a run ------------------------------------------


async def test_an_operator_killed_mid_run_is_restarted_and_the_run_completes(
    k8s: e2e.Cluster,
) -> None:
    await k8s.apply(runspec_of("restart", k8s.model.url))
    await k8s.apply(run_of("restart-1", "restart", parallelism=1,
                           selection={"labels": ["category:RCA"]}))  # fmt: skip

    def first_cell_running() -> bool:
        return any(
            (p.get("status") or {}).get("phase") == "Running" for p in cells_of(k8s, "restart-1")
        )

    await e2e.until(first_cell_running, "the first cell to run")
    operator_pod = k8s.operator_pod()
    assert operator_pod is not None
    running = k8s.node.pod(e2e.NAMESPACE, operator_pod["metadata"]["name"])
    process = running.containers["operator"]
    assert process.run is not None
    process.run.signal(signal.SIGKILL)
    done = await finished(k8s, "restart-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "restart-1")
    # payment and auth from test_triage.py, inventory from triage.cases.json
    assert done["status"]["counts"]["passed"] == 3, e2e.dump(k8s, "restart-1")
    assert set(pod_creations(k8s, "restart-1").values()) == {1}
    assert process.restarts == 1
    await e2e.until(k8s.operator_ready, "the restarted operator to be ready")
    # The restarted operator graded it and recorded it, once, as its status counts it.
    await e2e.until(lambda: recorded(k8s, "restart-1"), "run restart-1 in the history")
    (kept,) = [r for r in await asyncio.to_thread(history_runs, k8s) if ".restart-1." in r.uid]
    assert (kept.total, kept.passed) == (3, 3)


# -- a ledger nobody can write ---------------------------------------------------------------


async def test_a_bad_ledger_url_fails_the_run_with_a_reason(k8s: e2e.Cluster) -> None:
    runspec = runspec_of("badledger", k8s.model.url, ledger={"url": "configmap://triage-ledger"})
    await k8s.apply(runspec)
    await k8s.apply(run_of("badledger-1", "badledger"))
    done = await finished(k8s, "badledger-1", seconds=90)
    assert done["status"]["phase"] == "Failed", e2e.dump(k8s, "badledger-1")
    messages = " ".join(c.get("message", "") for c in done["status"].get("conditions", []))
    assert "configmap://triage-ledger" in messages, done["status"]
    assert cells_of(k8s, "badledger-1") == []
    spec = k8s.read("runspecs.agenthealth.dev", "default", "badledger") or {}
    conditions = {c["type"]: c for c in spec.get("status", {}).get("conditions", [])}
    assert conditions["Ready"]["status"] == "False", conditions


async def test_a_runspec_without_a_ledger_records_into_the_charts_default(
    k8s: e2e.Cluster,
) -> None:
    runspec = runspec_of("defaultledger", k8s.model.url)
    del runspec["spec"]["ledger"]
    await k8s.apply(runspec)
    await k8s.apply(run_of("defaultledger-1", "defaultledger", selection={"grep": "payment"}))
    done = await finished(k8s, "defaultledger-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "defaultledger-1")
    assert done["status"]["counts"]["passed"] == 1
    # The kind values' --ledger-url, filled in for this run, in the run's namespace.
    (pod,) = cells_of(k8s, "defaultledger-1")
    url = "configmap://default/agent-health-ledger-defaultledger-1"
    key = k8s.ledger_key("defaultledger-1")
    ledger = await k8s.ledger(url, pod["metadata"]["name"], key)
    assert isinstance(ledger[-1], records.CellEnd)


# -- Agent Sandbox isolation -----------------------------------------------------------------


async def test_agent_sandbox_isolation_runs_each_cell_as_a_sandbox(k8s: e2e.Cluster) -> None:
    await k8s.apply(
        runspec_of("sandboxed", k8s.model.url,
                   isolation={"mode": "agentSandbox", "runtimeClassName": "gvisor"})
    )  # fmt: skip
    await k8s.apply(run_of("sandboxed-1", "sandboxed", selection={"grep": "payment"}))
    done = await finished(k8s, "sandboxed-1")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["counts"]["passed"] == 1
    (pod,) = cells_of(k8s, "sandboxed-1")
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Sandbox", owner
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    sandbox = k8s.read("sandboxes.agents.x-k8s.io", "default", pod["metadata"]["name"])
    assert sandbox is not None
    finished_condition = {c["type"]: c for c in sandbox["status"]["conditions"]}["Finished"]
    assert finished_condition["reason"] == "PodSucceeded"


async def test_warm_pool_cells_start_from_ready_sandboxes_one_cell_each(
    k8s: e2e.Cluster,
) -> None:
    isolation = {"mode": "agentSandbox", "warmPool": {"replicas": 2}}
    await k8s.apply(runspec_of("warm", k8s.model.url, isolation=isolation))
    await k8s.apply(run_of("warm-1", "warm", repeats=3, parallelism=2,
                           selection={"grep": "payment"}))  # fmt: skip
    done = await finished(k8s, "warm-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "warm-1")
    counts = done["status"]["counts"]
    assert counts["passed"] == 3, counts
    assert counts["warmStarts"] + counts["coldStarts"] == 3, counts
    assert counts["warmStarts"] >= 1, counts  # a pool of two ready sandboxes served none
    claims = [
        c
        for c in k8s.emulator.store.list(
            k8s.kind("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"),
            "default",
            lambda _l: True,
        )
        if c["metadata"]["labels"].get("agenthealth.dev/run") == "warm-1"
    ]
    sandboxes = {c["status"]["sandbox"]["name"] for c in claims}
    assert len(claims) == 3
    assert len(sandboxes) == 3  # one sandbox per cell, never two tests in one
    # The gateway unwrapped the cell's key: the run key verifies its ledger as any cell's.
    key = k8s.ledger_key("warm-1")
    for claim in claims:
        ledger = await k8s.ledger(
            "configmap://default/warm-ledger-warm-1", claim["metadata"]["name"], key
        )
        assert isinstance(ledger[-1], records.CellEnd)
        meta = ledger[0]
        assert isinstance(meta, records.CellMeta)
        assert meta.run_id == claim["metadata"]["name"]


# -- the history on the chart's claim ---------------------------------------------------------


def recorded(k8s: e2e.Cluster, run: str) -> bool:
    """Whether the run's condition Recorded is True."""
    conditions = k8s.run(run).get("status", {}).get("conditions", [])
    return any(c["type"] == "Recorded" and c["status"] == "True" for c in conditions)


def history_file(k8s: e2e.Cluster) -> Path:
    """The SQLite history on the chart's claim (the kind values keep one there)."""
    operator_pod = k8s.operator_pod()
    assert operator_pod is not None
    running = k8s.node.pod(e2e.NAMESPACE, operator_pod["metadata"]["name"])
    return running.volumes["history"] / "history.db"


def history_runs(k8s: e2e.Cluster) -> list[history.Run]:
    with history.open_history(f"sqlite:///{history_file(k8s)}", create=False) as h:
        return h.runs(limit=1000)


async def test_a_finished_run_lands_in_the_history_with_the_counts_of_its_status(
    k8s: e2e.Cluster,
) -> None:
    await k8s.apply(runspec_of("kept", k8s.model.url))
    created = await k8s.apply(run_of("kept-1", "kept", repeats=2, parallelism=2,
                                     selection={"labels": ["category:RCA"]}))  # fmt: skip
    done = await finished(k8s, "kept-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "kept-1")
    await e2e.until(lambda: recorded(k8s, "kept-1"), "run kept-1 in the history")
    status = k8s.run("kept-1")["status"]
    uid = f"default.kept-1.{created['metadata']['uid']}"
    (kept,) = [r for r in await asyncio.to_thread(history_runs, k8s) if r.uid == uid]
    counts = status["counts"]
    assert (kept.total, kept.passed, kept.failed, kept.errored, kept.skipped) == tuple(
        counts[k] for k in ("total", "passed", "failed", "errored", "skipped")
    )
    assert kept.total == 6  # payment, auth and inventory, two repeats each
    assert kept.pass_rate == status["passRate"]
    assert (kept.source, kept.suite, kept.repeats) == ("operator", "default/kept", 2)
    assert kept.selection["labels"] == ["category:RCA"]
    # The agent is known by the image its cells ran: the target's, pinned by digest.
    targets = {
        next(c["image"] for c in pod["spec"]["initContainers"] if c["name"] == "target")
        for pod in cells_of(k8s, "kept-1")
    }
    assert kept.agent is not None
    assert {kept.agent.image} == targets
    # Read from outside the operator, as a laptop reads it (docs/operator.md, The history).
    shown = await asyncio.to_thread(
        subprocess.run,
        [str(Path(sys.executable).parent / "agent-health"), "history", "--json",
         "--history", f"sqlite:///{history_file(k8s)}", "--agent", "kept"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    (listed,) = [r for r in json.loads(shown.stdout) if r["uid"] == uid]
    assert listed["passed"] == counts["passed"]


# -- the judge cache on the chart's volume ---------------------------------------------------


def cached_verdicts(k8s: e2e.Cluster) -> int:
    """Verdicts in the judge cache the chart's volume holds (0 when there is no cache file)."""
    operator_pod = k8s.operator_pod()
    assert operator_pod is not None
    running = k8s.node.pod(e2e.NAMESPACE, operator_pod["metadata"]["name"])
    database = running.volumes["judge-cache"] / "judge.sqlite"
    if not database.exists():
        return 0
    with contextlib.closing(sqlite3.connect(database)) as connection:
        (count,) = connection.execute("SELECT COUNT(*) FROM verdicts").fetchone()
    return int(count)


async def test_judge_verdicts_are_cached_in_the_charts_cache_volume(k8s: e2e.Cluster) -> None:
    # The chart passes the mounted directory as --judge-cache; the cache is judge.sqlite in it.
    await k8s.apply(runspec_of("cached", k8s.model.url))
    await k8s.apply(run_of("cached-1", "cached", selection={"grep": "payment"}))
    done = await finished(k8s, "cached-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "cached-1")
    assert cached_verdicts(k8s) > 0


# -- the kind steps of docs/operator.md, and a local run of the same suite --------------------

OPERATOR_DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def documented_loads() -> set[str]:
    """The images docs/operator.md's kind step 2 loads onto the nodes (``kind load
    docker-image REF``, or ``podman save REF`` and ``kind load image-archive``)."""
    section = OPERATOR_DOC.read_text().split("## On kind, start to finish", 1)[1]
    step = section.split("**2. Build the images", 1)[1].split("**3. ", 1)[0]
    return set(re.findall(r"^(?:kind load docker-image|podman save) (\S+)", step, re.MULTILINE))


async def test_the_chart_asks_the_node_for_exactly_the_images_the_kind_steps_load(
    k8s: e2e.Cluster,
) -> None:
    # What `make images` names the operator's image, what step 2 loads and what the node was
    # loaded with are one name, and the chart's kind values ask for exactly it: a kind node
    # resolves no short name (agent-health/operator is docker.io's), nor does this one.
    assert documented_loads() == {e2e.OPERATOR_IMAGE}
    assert k8s.node.runtime.loaded == [e2e.OPERATOR_IMAGE]
    containers = [
        c
        for d in k8s.installed
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert {c["image"] for c in containers if c["imagePullPolicy"] == "Never"} == {
        e2e.OPERATOR_IMAGE
    }, containers
    # The images the operator gives its cells are in the registry they are pushed to.
    flags = ("--controller-image=", "--gateway-image=")
    args = [a for c in containers for a in c.get("args", []) if a.startswith(flags)]
    assert len(args) == 2, args
    for arg in args:
        assert arg.split("=", 1)[1].startswith(f"{e2e.REGISTRY}/agent-health/"), arg
    pod = k8s.operator_pod()
    assert pod is not None
    (status,) = pod["status"]["containerStatuses"]
    assert status["image"] == e2e.OPERATOR_IMAGE, status
    assert "running" in status["state"], status


def documented_run_yaml(out: Path) -> list[dict[str, Any]]:
    """``examples/run.yaml`` through the ``sed`` of docs/operator.md's kind step 6, run as
    written (from the repository root), into ``out``."""
    section = OPERATOR_DOC.read_text().split("## On kind, start to finish", 1)[1]
    lines = section.split("**6. Point `examples/run.yaml`", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("sed -e"))
    end = next(i for i in range(start, len(lines)) if "> run.kind.yaml" in lines[i])
    command = "\n".join(lines[start : end + 1]).split(" > run.kind.yaml")[0] + f" > {out}"
    subprocess.run(["bash", "-c", command], cwd=OPERATOR_DOC.parents[1], check=True)
    return list(yaml.safe_load_all(out.read_text()))


def local_run(tmp_path: Path, *args: str) -> dict[str, Any]:
    """``agent-health run`` of the quickstart suite on this machine; its JSON report."""
    report = tmp_path / "local.json"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agent-health"), "run", *args, "--no-ledger",
         "--reporter", f"json:{report}"],
        cwd=examples_support.copy(tmp_path, QUICKSTART.parent.name),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert report.exists(), done.stderr
    return dict(json.loads(report.read_text()))


def by_test(tests: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each test id → how many of its repeats passed, failed and errored."""
    found: dict[str, dict[str, int]] = {}
    for test in tests:
        counts = found.setdefault(test["id"], {"passed": 0, "failed": 0, "errored": 0})
        if test["status"] in counts:
            counts[test["status"]] += 1
    return found


async def metrics_of(k8s: e2e.Cluster) -> str:
    pod = k8s.operator_pod()
    assert pod is not None
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(f"http://{pod['status']['podIP']}:9090/metrics")
    answer.raise_for_status()
    return answer.text


async def test_the_kind_steps_run_the_example_without_a_judge_key_as_a_local_run_does(
    k8s: e2e.Cluster, tmp_path: Path
) -> None:
    runspec, run = documented_run_yaml(tmp_path / "run.kind.yaml")
    images = [runspec["spec"]["target"]["image"], runspec["spec"]["peers"][0]["image"]]
    assert images == [
        f"{e2e.REGISTRY}/agent-health/triage-agent:dev",
        f"{e2e.REGISTRY}/agent-health/log-server:dev",
    ]
    assert run["spec"]["skipJudge"] is True
    # Keyless (step 5): the user made no judge Secret at all.
    runspec["spec"]["judge"]["secretRef"]["name"] = "no-judge-key-made"
    await k8s.apply(runspec)
    await k8s.apply(run)
    done = await finished(k8s, "triage-nightly")
    status = done["status"]
    assert status["phase"] == "Succeeded", e2e.dump(k8s, "triage-nightly")

    # The same suite, selection and repeats on this machine, without a judge.
    selection = run["spec"]["selection"]
    labels = [a for label in selection["labels"] for a in ("--label", label)]
    repeats = str(run["spec"]["repeats"])
    local = local_run(
        tmp_path, "--no-judge", "--repeat", repeats, "--grep", selection["grep"], *labels
    )
    cluster = {t["id"]: {k: t[k] for k in ("passed", "failed", "errored")} for t in status["tests"]}
    assert cluster == by_test(local["tests"]), (status["tests"], local["tests"])
    for key in ("passed", "failed", "errored", "skipped"):
        assert status["counts"][key] == local["summary"][key], (status["counts"], local["summary"])

    spec = k8s.read("runspecs.agenthealth.dev", "default", "triage") or {}
    digests = spec["status"]["imageDigests"]
    cells = cells_of(k8s, "triage-nightly")
    assert len(cells) == run["spec"]["repeats"]
    if k8s.runtime == "container":
        # The digests are the registry's own: the ones it stored when the images were pushed,
        # in the RunSpec's status, in every cell's pod spec and in what the node ran.
        for image in images:
            repository = image.split("/", 1)[1].rsplit(":", 1)[0]
            assert digests[image] == k8s.pushed[repository], (digests, k8s.pushed)
        for pod in cells:
            spec_images = {c["name"]: c["image"] for c in [*pod["spec"]["initContainers"],
                                                           *pod["spec"]["containers"]]}  # fmt: skip
            repository = spec_images["target"].split("/", 1)[1].split("@")[0]
            assert spec_images["target"].endswith("@" + k8s.pushed[repository])
            statuses = [
                *pod["status"]["initContainerStatuses"],
                *pod["status"]["containerStatuses"],
            ]
            for found in statuses:
                assert found["imageID"].endswith(spec_images[found["name"]].split("@")[1])
                assert found["containerID"].startswith("podman://"), found
    # Prometheus sees the run: its cells by state and their grades.
    text = await metrics_of(k8s)
    assert (
        'agent_health_cells_graded_total{namespace="default",runspec="triage",status="passed"}'
        in text
    )
    assert (
        'agent_health_run_pass_rate{namespace="default",run="triage-nightly",runspec="triage"} 1.0'
        in text
    )


async def test_an_operator_killed_while_a_cell_is_starting_adopts_it_and_makes_no_second(
    k8s: e2e.Cluster,
) -> None:
    """SIGKILL the operator as soon as the first cell pod exists, before it runs: the
    restarted operator takes that pod over (its token, its deadline) instead of deleting it
    and making a second attempt — one pod per cell, as without the restart."""
    await k8s.apply(runspec_of("adopt", k8s.model.url))
    await e2e.until(lambda: resolved(k8s, "adopt"), "the RunSpec to be ready")
    await k8s.apply(run_of("adopt-1", "adopt", repeats=3, parallelism=3,
                           selection={"grep": "payment"}))  # fmt: skip
    starting = await e2e.until(
        lambda: [p for p in cells_of(k8s, "adopt-1")
                 if (p.get("status") or {}).get("phase") in (None, "Pending")],
        "a cell pod that has not started",
        seconds=60,
    )  # fmt: skip
    operator_pod = k8s.operator_pod()
    assert operator_pod is not None
    operator = k8s.node.pod(e2e.NAMESPACE, operator_pod["metadata"]["name"]).containers["operator"]
    assert operator.run is not None
    operator.run.signal(signal.SIGKILL)
    done = await finished(k8s, "adopt-1")
    assert done["status"]["phase"] == "Succeeded", e2e.dump(k8s, "adopt-1")
    assert done["status"]["counts"]["passed"] == 3, e2e.dump(k8s, "adopt-1")
    creations = pod_creations(k8s, "adopt-1")
    assert set(creations.values()) == {1}, creations
    assert starting[0]["metadata"]["name"] in creations
    assert len(creations) == 3, creations  # no `.a1` attempt of any cell
    await e2e.until(k8s.operator_ready, "the restarted operator to be ready")


# -- images that cannot run ------------------------------------------------------------------


def runspec_condition(k8s: e2e.Cluster, name: str, kind: str) -> dict[str, Any] | None:
    body = k8s.read("runspecs.agenthealth.dev", "default", name) or {}
    found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else None


async def test_an_image_the_registry_does_not_have_is_the_runspecs_condition_naming_it(
    k8s: e2e.Cluster,
) -> None:
    image = f"{e2e.REGISTRY}/agent-health/no-such-agent:dev"
    if k8s.runtime == "process":
        k8s.registry.missing.add("agent-health/no-such-agent")  # type: ignore[union-attr]
    runspec = runspec_of("nosuch", k8s.model.url)
    runspec["spec"]["target"]["image"] = image
    await k8s.apply(runspec)
    await k8s.apply(run_of("nosuch-1", "nosuch", selection={"grep": "payment"}))
    done = await finished(k8s, "nosuch-1", seconds=90)
    assert done["status"]["phase"] == "Failed", e2e.dump(k8s, "nosuch-1")
    resolved_ = runspec_condition(k8s, "nosuch", "Resolved")
    assert resolved_ is not None
    assert resolved_["status"] == "False"
    assert resolved_["reason"] == "ImageUnresolvable"
    assert image in resolved_["message"]
    assert "not found" in resolved_["message"]
    assert cells_of(k8s, "nosuch-1") == []


@pytest.mark.parametrize(
    ("name", "entrypoint", "hint"),
    [
        ("triage-noentry", ["no-such-agent"], "check its entrypoint or command"),
        ("triage-rofs", ["python", "-c", "open('/state.json', 'w')"], "write under /tmp"),
    ],
)
async def test_a_target_image_that_cannot_start_or_writes_to_its_root_errors_its_cell(
    k8s: e2e.Cluster, name: str, entrypoint: list[str], hint: str
) -> None:
    if k8s.runtime != "container":
        pytest.skip("needs real images: the process runtime runs this checkout's commands")
    assert isinstance(k8s.registry, registry_support.Registry)
    image = await e2e.derive(k8s.registry, name, entrypoint)
    runspec = runspec_of(name, k8s.model.url)
    runspec["spec"]["target"]["image"] = image
    await k8s.apply(runspec)
    await k8s.apply(run_of(f"{name}-1", name, selection={"grep": "payment"}))
    done = await finished(k8s, f"{name}-1", seconds=180)
    status = done["status"]
    assert status["counts"]["errored"] == 1, e2e.dump(k8s, f"{name}-1")
    (test,) = status["tests"]
    assert test["cause"] == "agent", test  # the agent's image is broken: its failure
    assert f"agent-health/{name}@sha256:" in test["error"], test
    assert hint in test["error"], test


async def test_a_pinned_digest_the_registry_no_longer_has_errors_its_cells_at_once(
    k8s: e2e.Cluster,
) -> None:
    if k8s.runtime != "container":
        pytest.skip("needs a real registry and pulls: the stand-in serves any digest it named")
    assert isinstance(k8s.registry, registry_support.Registry)
    image = await e2e.derive(k8s.registry, "triage-gone", None)
    runspec = runspec_of("gone", k8s.model.url)
    runspec["spec"]["target"]["image"] = image
    await k8s.apply(runspec)
    await e2e.until(lambda: resolved(k8s, "gone"), "the RunSpec to pin its images")
    spec = k8s.read("runspecs.agenthealth.dev", "default", "gone") or {}
    digest = spec["status"]["imageDigests"][image]
    await k8s.registry.delete("agent-health/triage-gone", digest)  # re-pushed and cleaned up
    await k8s.apply(run_of("gone-1", "gone", selection={"grep": "payment"},
                           retry={"infraRetries": 0, "backoffSeconds": 1}))  # fmt: skip
    done = await finished(k8s, "gone-1", seconds=90)
    (test,) = done["status"]["tests"]
    assert test["cause"] == "infra", test
    assert f"agent-health/triage-gone@{digest}" in test["error"], test
    assert "push the image again" in test["error"], test
