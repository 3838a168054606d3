"""A RunSpec's MCP peers on the operator (kopf against the emulator, the test playing kubelet):
their tools are read with ``tools/list`` when the RunSpec resolves — the peers run in its
discovery pod beside a container that asks them — and a cell's claims of those tools are
held to what its gateway read, whether the agent ever listed them or not."""

from __future__ import annotations

from typing import Any

import pytest
from support.operator_support import Cell, Cluster, Kubelet, cluster, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/clock-ledger-{run}"
TESTS = listing(("suite/clock.py::asks the time", ["category:RCA"]))
TIME_TOOLS = ["get_current_time", "convert_time"]


def with_time_peer(k8s: Cluster, run_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The example RunSpec with an MCP peer ``time`` that declares no tools, and a run of
    its one test."""
    runspec, run = k8s.example(ledger=LEDGER)
    time = {"name": "time", "image": f"{k8s.registry.host}/agent-health/mcp-time:0.1.0",
            "port": 9100, "protocol": "mcp"}  # fmt: skip
    runspec["spec"]["peers"].append(time)
    run["metadata"]["name"] = run_name
    run["spec"] |= {"repeats": 1, "selection": {}, "skipJudge": True}
    return runspec, run


def finished(k8s: Cluster, name: str) -> dict[str, Any] | None:
    body = k8s.run(name)
    return body if body.get("status", {}).get("phase") in ("Succeeded", "Failed") else None


def conditions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in body.get("status", {}).get("conditions", [])}


async def test_an_mcp_peers_listed_tools_hold_the_agents_claims_to_the_gateway() -> None:
    def outcome(cell: Cell) -> str:  # the first run's agent never calls the tool it claims
        return "mcp-claimed" if cell.run == "clock-1" else "mcp-made"

    async with cluster() as k8s:
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        fake.mcp_tools = {"time": {"tools": TIME_TOOLS}}
        runspec, run = with_time_peer(k8s, "clock-1")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            claimed = await until(lambda: finished(k8s, "clock-1"), "the first run to end")
            _, again = with_time_peer(k8s, "clock-2")
            await k8s.apply(again)
            made = await until(lambda: finished(k8s, "clock-2"), "the second run to end")
        status = k8s.runspec("triage")["status"]
        [pod] = k8s.pods("discovery")
    assert status["mcpTools"] == {"time": TIME_TOOLS}
    discovered = conditions(k8s.runspec("triage"))["Discovered"]
    assert discovered["status"] == "True"
    assert discovered["message"] == "1 tests in the suite; tools its MCP peers listed: time 2"
    # The peer ran in the discovery pod (the plain peer did not), and was asked its tools.
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["peer-time"]
    tools = pod["spec"]["containers"][1]
    assert tools["args"] == ["mcp", "tools", "time=http://127.0.0.1:9100/mcp"]
    # The claim of get_current_time is held to the gateway's record: not made, not passed.
    counts = claimed["status"]["counts"]
    assert (counts["failed"], counts["passed"], counts["unverifiedClaims"]) == (1, 0, 1)
    assert (made["status"]["counts"]["passed"], made["status"]["counts"]["unverifiedClaims"]) == (
        1,
        0,
    )


async def test_an_mcp_peer_that_lists_no_tools_fails_the_resolution_naming_it() -> None:
    async with cluster() as k8s:
        fake = Kubelet(k8s, TESTS, LEDGER)
        refused = "http://127.0.0.1:9100/mcp: initialize was answered HTTP 401: unauthorized"
        fake.mcp_tools = {"time": {"error": refused}}
        runspec, _ = with_time_peer(k8s, "never")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await until(
                lambda: (
                    conditions(k8s.runspec("triage")).get("Discovered", {}).get("status") == "False"
                ),
                "the RunSpec's discovery to fail",
            )
        found = conditions(k8s.runspec("triage"))
    assert found["Discovered"]["reason"] == "DiscoveryFailed"
    assert found["Discovered"]["message"] == (
        f"MCP peer time did not list its tools (tools/list) when the RunSpec resolved: {refused}"
    )
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "DiscoveryFailed")


async def test_an_mcp_peer_runs_in_discovery_only_with_secrets_offered_to_runs() -> None:
    """The peer's env may name only Secrets a run may use (offered, not the operator's): it
    runs in the discovery pod before any run starts, so the rule is held there first."""
    async with cluster() as k8s:
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": "clock-key", "namespace": "default"},
                  "data": {"key": "c2VjcmV0"}}  # fmt: skip
        answer = await k8s.client.post("/api/v1/namespaces/default/secrets", json=secret)
        assert answer.status_code == 201, answer.text
        runspec, _ = with_time_peer(k8s, "never")
        ref = {"secretKeyRef": {"name": "clock-key", "key": "key"}}
        runspec["spec"]["peers"][-1]["env"] = [{"name": "CLOCK_KEY", "valueFrom": ref}]
        async with kubelet(Kubelet(k8s, TESTS, LEDGER)), k8s.operator():
            await k8s.apply(runspec)
            await until(
                lambda: (
                    conditions(k8s.runspec("triage")).get("Discovered", {}).get("reason")
                    == "SecretNotOffered"
                ),
                "the RunSpec's discovery to be refused",
            )
        found = conditions(k8s.runspec("triage"))["Discovered"]
        assert found["status"] == "False"
        assert "spec.peers[time].env[CLOCK_KEY].valueFrom.secretKeyRef" in found["message"]
        assert "agenthealth.dev/usable-by-runs=true" in found["message"]
        assert k8s.pods("discovery") == []  # the peer never ran


async def test_a_discovery_pod_failed_by_its_tools_container_names_it_and_says_why() -> None:
    from agent_health.cluster.reconcile import listing as listing_mod

    def ended(name: str, code: int, reason: str, message: str = "") -> dict[str, Any]:
        terminated = {"exitCode": code, "reason": reason, "message": message}
        return {"name": name, "state": {"terminated": terminated}}

    why = 'Error: workdir "/suite" does not exist on container 0f3a'
    pod = {
        "metadata": {"namespace": "default", "name": "triage-discover-1"},
        "spec": {"containers": [{"name": "discover"}, {"name": "tools", "args": ["mcp", "tools"]}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                ended("discover", 0, "Completed", '{"tests": []}'),
                ended("tools", 128, "StartError", why),
            ],
        },
    }
    outcome = await listing_mod.Discoveries(api=None).observe(pod)  # type: ignore[arg-type]
    assert outcome is not None
    assert outcome.error == (
        f"discovery pod triage-discover-1 its tools container failed (StartError): {why}"
    )
