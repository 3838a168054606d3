"""The operator's own rights, replayed: it runs as the chart's ServiceAccount, the emulator
holds the chart's ClusterRole, Roles and bindings, and every request is checked the way the
API server's RBAC authorizer checks it (``tests/support/kube/rbac.py``).

Before, the ClusterRole granted ``pods create`` and ``secrets get/list/create`` in every
namespace: a tenant's RunSpec in any namespace had the operator create pods and read
Secrets there. Now those rights come from a Role in each cell namespace (the chart's
``cells.namespaces``, the release namespace and the watched one): a run in a listed
namespace completes with nothing refused, and a run elsewhere is refused by the API server
— the operator creates no pod and reads no Secret there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from agent_health.cluster import operator, rbac
from support.kube.rbac import service_account_token
from support.operator_support import Kubelet, cluster, kubelet, listing, offered_secret, until
from support.ship_support import NAMESPACE, RELEASE, by_kind, helm, render

pytestmark = pytest.mark.slow
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))
LEDGER = "configmap://{namespace}/triage-ledger-{run}"
ACCOUNT = f"{RELEASE}-agent-health"
RBAC_PATHS = {
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def finished(k8s: Any, name: str, namespace: str = "default") -> dict[str, Any] | None:
    body = k8s.emulator.read("evaluationruns.agenthealth.dev", namespace, name)
    status = dict(body.get("status") or {})
    return status if status.get("phase") in ("Succeeded", "Failed") else None


def test_no_cluster_wide_right_creates_a_pod_or_reads_a_secret() -> None:
    documents = render(helm(), "default")
    (cluster_role,) = by_kind(documents, "ClusterRole")
    granted = rbac.allowed(cluster_role["rules"])
    for right in (("", "pods", "create"), ("", "secrets", "get"), ("", "secrets", "list"),
                  ("", "secrets", "create"), ("", "configmaps", "get"),
                  ("", "configmaps", "update"), (rbac.RBAC_GROUP, "roles", "create")):  # fmt: skip
        assert right not in granted, right


async def test_the_operator_as_the_chart_grants_it_runs_here_and_is_refused_elsewhere() -> None:
    documents = render(helm(), "default", "--set", "cells.namespaces={default}")
    async with cluster() as k8s:
        for body in documents:
            if body["kind"] in RBAC_PATHS:
                path = RBAC_PATHS[body["kind"]].format(ns=body["metadata"].get("namespace"))
                answer = await k8s.client.post(path, json=body)
                assert answer.status_code == 201, answer.text
        answer = await k8s.client.post(
            "/api/v1/namespaces/team-b/secrets", json=offered_secret("judge-credentials", "team-b")
        )
        assert answer.status_code == 201, answer.text
        token = service_account_token(NAMESPACE, ACCOUNT)
        connection = dataclasses.replace(k8s.connection(), token=token)
        chosen = k8s.options(retry_delay=0.05)
        fake = Kubelet(k8s, TESTS, None)
        async with kubelet(fake), operator.running(chosen, connection, environ={}):
            runspec, run = k8s.example(ledger=LEDGER)
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, "triage-nightly"), "the run to end")
            elsewhere, run_b = k8s.example(ledger=LEDGER)
            for body in (elsewhere, run_b):
                body["metadata"]["namespace"] = "team-b"
                path = "/apis/agenthealth.dev/v1alpha1/namespaces/team-b/" + (
                    "runspecs" if body["kind"] == "RunSpec" else "evaluationruns"
                )
                answer = await k8s.client.post(path, json=body)
                assert answer.status_code == 201, answer.text
            refused = await until(
                lambda: finished(k8s, "triage-nightly", "team-b"), "the team-b run to end"
            )
        spoken = [r for r in k8s.emulator if r.headers.get("Authorization") == f"Bearer {token}"]
    assert status["phase"] == "Succeeded", status
    assert status["counts"]["passed"] == 3
    assert refused["phase"] == "Failed", refused
    failed = next(c for c in refused["conditions"] if c["type"] == "Failed")
    assert "forbidden" in failed["message"], failed
    assert f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}" in failed["message"]
    assert "add team-b to cells.namespaces" in failed["message"], failed  # what to do
    assert not [p for p in k8s.emulator.store.list(
        k8s.emulator.store.kinds[("", "pods")], "team-b", lambda _l: True)]  # fmt: skip
    assert spoken  # the operator spoke as its ServiceAccount throughout
