"""Kubernetes API writes per cell, counted against the emulator (issue #12's scale target).

A cell costs its Pod and, with a ConfigMap ledger, its gateway's one merge patch at the
cell's end; everything else the operator writes belongs to the run (its status, Events, its
ledger key and shared token Secrets, the ledger's ConfigMap, the RunSpec's discovery), so
writes per cell fall towards 2 (ConfigMap ledger) or 1 (file ledger) as a run grows.

Counted, never timed: the status interval is set far beyond the run, so its status patches
are its phase changes alone (how the batcher spaces patches in time is tested with a fake
clock in ``test_cluster_status.py``; ``bench/operator_scale.py`` prints the figures of a
200-cell run with its real interval). The gateways are played by the real recorder and
spool (``Kubelet(spool=...)``), writing through the emulator with their own credentials.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from operator_support import Kubelet, cluster, kubelet, listing, until

WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
TESTS = 12
REPEATS = 2
CELLS = TESTS * REPEATS
PER_RUN = 23
"""The most writes a run may cost beside its cells' own, whatever its size (21 today): its
status patches and Events (about one each per phase), kopf's own mark on it, its two
Secrets, its ledger's ConfigMap and the ledger writer's ServiceAccount, Role and
RoleBinding, the RunSpec's discovery pod and status patches."""
PHASES = 6
"""At most one status patch and one Event per phase change (Pending, Running, ...)."""


def kind(request: Any) -> str:
    """What a write request writes: ``pods``, ``secrets``, ``status``, ``ledger``..."""
    plural = request.resource.plural if request.resource is not None else "?"
    if plural == "evaluationruns" and request.subresource == "status":
        return "status"
    return "ledger" if plural == "configmaps" else plural


@pytest.mark.slow
@pytest.mark.parametrize("ledger", ["configmap", "file"])
async def test_a_cell_costs_its_pod_and_one_ledger_write(ledger: str, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/ledger" if ledger == "file" else "configmap://default/ledger-{run}"
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=url)
        run["spec"] = {"runSpecRef": {"name": "triage"}, "repeats": REPEATS, "parallelism": 5}
        tests = listing(*((f"suite/t.py::test {i}", ["x"]) for i in range(TESTS)))
        fake = Kubelet(k8s, tests, None, spool=tmp_path / "spools")
        allowed = ("configmap://{namespace}/", f"file://{tmp_path}/")  # --ledger-allow
        async with kubelet(fake), k8s.operator(status_interval=86400.0, ledger_allowed=allowed):
            await k8s.apply(runspec)
            await k8s.apply(run)
            name = run["metadata"]["name"]
            done = await until(
                lambda: (
                    k8s.run(name).get("status", {}).get("phase") == "Succeeded" and k8s.run(name)
                ),
                "the run to succeed",
                attempts=15000,
            )
        assert done["status"]["counts"]["passed"] == CELLS
        pods = k8s.pods()
        assert len(pods) == CELLS
        for pod in pods:  # one Secret for all, yet each pod mounts its own items alone
            cell = pod["metadata"]["name"]
            mounted = [v["secret"] for v in pod["spec"]["volumes"] if "secret" in v]
            assert {m["secretName"] for m in mounted} == {f"{name}-tokens-0"}
            assert all(i["key"].startswith(f"{cell}.") for m in mounted for i in m["items"])
        operator = Counter(kind(r) for r in k8s.operator_requests() if r.method in WRITES)
        gateways = Counter(
            kind(r)
            for r in k8s.emulator
            # A ConfigMap ledger's gateways speak as their run's own ServiceAccount.
            if r.headers.get("Authorization", "").startswith(
                ("Bearer gateway", "Bearer serviceaccount:")
            )
            and r.method in WRITES
        )
    discovery = 1  # the RunSpec's one discovery pod
    assert operator["pods"] == CELLS + discovery  # one Pod per cell, and nothing else
    # The cells' tokens and keys share one Secret; the run's key has its own.
    assert operator["secrets"] == 2
    if ledger == "configmap":
        assert operator["ledger"] == 1  # the run's ConfigMap, made before its first cell
        assert gateways == Counter({"ledger": CELLS})  # each cell's records in one patch
    else:
        assert operator["ledger"] == 0
        assert not gateways
    per_cell = CELLS + (CELLS if ledger == "configmap" else 0)
    total = sum(operator.values()) + sum(gateways.values())
    assert operator["status"] <= PHASES, operator
    assert operator["events"] <= PHASES, operator
    # So a run of 1,000 cells costs at most 2.02 writes per cell (ConfigMap), 1.02 (file).
    assert total - per_cell <= PER_RUN, (operator, gateways)
