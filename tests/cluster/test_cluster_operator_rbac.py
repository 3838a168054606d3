"""``rbac.RULES`` against what the operator really asks the API server for, end to end."""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.cluster import rbac
from support.operator_support import Kubelet, cluster, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def verb(request: Any) -> str:
    method = request.method.value
    if method != "GET":
        return _VERBS[method]
    if request.params.get("watch") in ("true", "1"):
        return "watch"
    return "get" if request.name else "list"


def permission(request: Any) -> tuple[str, str, str] | None:
    """(apiGroup, resource[/subresource], verb) of a resource request; None for discovery."""
    if request.resource is None or not request.resource.plural:
        return None
    resource = request.resource.plural
    if request.subresource:
        resource = f"{resource}/{request.subresource}"
    return (request.resource.group or "", resource, verb(request))


def test_rules_are_what_the_chart_needs() -> None:
    granted = rbac.allowed()
    assert set(rbac.UNSEEN) <= granted
    assert ("", "secrets", "delete") not in granted  # cell Secrets go with their cell
    cluster_wide = rbac.allowed(rbac.CLUSTER_RULES)
    for group, resource, verb in rbac.allowed(rbac.NAMESPACE_RULES):
        if verb not in ("list", "watch"):
            assert (group, resource, verb) not in cluster_wide, (resource, verb)


async def test_every_request_is_allowed_and_every_rule_is_used() -> None:
    """One run through every path: a pull secret, a restart, an eviction, the TTL, a fence."""
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"ttlSecondsAfterFinished": 0, "retry": {"backoffSeconds": 1}}
        tests = listing(("suite/rca.py::payment rca", ["category:RCA"]))
        fake = Kubelet(k8s, tests, LEDGER, outcome=lambda _: "hold")
        async with kubelet(fake):
            async with k8s.operator(image_pull_secrets=("regcred",), network_policy=True):
                await k8s.apply(runspec)
                await k8s.apply(run)
                await until(lambda: len(fake.held) == 3, "three running cells")
            async with k8s.operator(network_policy=True):  # its policy exists: a 409
                fake.outcome = lambda _: "passed"
                await until(lambda: op_ready(k8s), "the restarted operator to adopt the run")
                for name, cell in list(fake.held.items()):
                    await fake.release(name, "evicted" if cell.repeat == 2 else "passed")
                await until(
                    lambda: k8s.run("triage-nightly").get("status", {}).get("phase") == "Succeeded",
                    "the run",
                )
                await until(lambda: not k8s.pods(), "ttlSecondsAfterFinished: 0 to delete cells")
        assert k8s.run("triage-nightly")["status"]["counts"]["passed"] == 3
        requests = k8s.operator_requests()
        used = {p for p in map(permission, requests) if p is not None}
        cluster_wide = {p for r in requests if r.namespace is None and (p := permission(r))}
    granted = rbac.allowed()
    assert sorted(used - granted) == []  # nothing the ClusterRole and Roles would refuse
    assert sorted(granted - used) == sorted(rbac.UNSEEN)  # nothing granted for nothing
    # What names no namespace (kopf's watches, the API server's Endpoints) is the
    # ClusterRole's; creating pods and reading Secrets is only ever asked in a namespace.
    assert sorted(cluster_wide - rbac.allowed(rbac.CLUSTER_RULES)) == []


def op_ready(k8s: Any) -> bool:
    """The second operator listed the run's secrets (it adopts cells after that)."""
    listed = [r for r in k8s.operator_requests() if permission(r) == ("", "secrets", "list")]
    return bool(listed)


async def test_a_configmap_ledger_is_written_by_the_operator_alone() -> None:
    """The cells' gateways log their records and hold no credential: every request to the
    API server comes from the operator or the kubelet, the ledger's writes are the
    operator's merge patches of the run's one ConfigMap, and no cell runs as an identity."""
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] |= {"repeats": 2}
        tests = listing(("suite/rca.py::payment rca", ["category:RCA"]))
        async with kubelet(Kubelet(k8s, tests, None)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            await until(
                lambda: k8s.run("triage-nightly").get("status", {}).get("phase") == "Succeeded",
                "the run",
            )
        speakers = {r.headers.get("Authorization") for r in k8s.emulator}
        ledger = [
            permission(r)
            for r in k8s.operator_requests()
            if r.resource is not None and r.resource.plural == "configmaps"
        ]
        names = {
            r.name
            for r in k8s.operator_requests()
            if r.resource is not None and r.resource.plural == "configmaps"
        }
        pods = k8s.pods()
    assert k8s.run("triage-nightly")["status"]["counts"]["passed"] == 2
    assert speakers <= {"Bearer operator", "Bearer kubelet", None}, speakers
    assert set(ledger) == {("", "configmaps", v) for v in ("create", "get", "patch")}
    assert names <= {"triage-ledger-triage-nightly", None}
    for pod in pods:
        assert "serviceAccountName" not in pod["spec"]
        assert all("serviceAccountToken" not in str(v) for v in pod["spec"]["volumes"])
