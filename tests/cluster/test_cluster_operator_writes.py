"""Kubernetes API writes per cell, counted against the emulator (issue #12's scale target).

A cell costs its Pod. With a ConfigMap ledger its gateway writes nothing (it logs its
records) and the operator stores many cells per merge patch of the run's ConfigMap; with a
file ledger the ledger is not in the API at all. Everything else the operator writes belongs
to the run (its status, Events, its ledger key and shared token Secrets, the ledger's
ConfigMap, the RunSpec's discovery), so writes per cell fall towards 1 as a run grows.

Counted, never timed: the status interval is set far beyond the run, so its status patches
are its phase changes alone (how the batcher spaces patches in time is tested with a fake
clock in ``test_cluster_status.py``; ``bench/operator_scale.py`` prints the figures of a
200-cell run with its real interval). The gateways are played by the real recorder: into
their logs (a ConfigMap ledger, served as ``pods/NAME/log``), or spooled into the file
ledger (``Kubelet(spool=...)``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.operator_support import Kubelet, cluster, kubelet, listing, until

WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
TESTS = 12
REPEATS = 2
CELLS = TESTS * REPEATS
PER_RUN = 20
"""The most writes a run may cost beside its cells' own and its ledger's batches, whatever
its size (18 today): its status patches and Events (about one each per phase), kopf's own
mark on it, its two Secrets, its ledger's ConfigMap, the RunSpec's discovery pod and status
patches."""
PARALLELISM = 5
BATCHES = CELLS // 2
"""The most merge patches a ConfigMap ledger of :data:`CELLS` cells may take: cells that end
together share one (at parallelism 5, about one per 5 cells); one per cell is twice this."""
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
async def test_a_cell_costs_its_pod_and_a_share_of_a_ledger_write(
    ledger: str, tmp_path: Path
) -> None:
    url = f"file://{tmp_path}/ledger" if ledger == "file" else "configmap://default/ledger-{run}"
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=url)
        run["spec"] = {
            "runSpecRef": {"name": "triage"},
            "repeats": REPEATS,
            "parallelism": PARALLELISM,
        }
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
        # Nobody but the operator (and the kubelet, reporting pods) speaks to the API.
        speakers = {r.headers.get("Authorization") for r in k8s.emulator}
    assert speakers <= {"Bearer operator", "Bearer kubelet", None}, speakers
    discovery = 1  # the RunSpec's one discovery pod
    assert operator["pods"] == CELLS + discovery  # one Pod per cell, and nothing else
    # The cells' tokens and keys share one Secret; the run's key has its own.
    assert operator["secrets"] == 2
    batches = 0
    if ledger == "configmap":
        creates = [r for r in k8s.operator_requests() if r.method == "POST"]
        assert sum(kind(r) == "ledger" for r in creates) == 1  # the run's, before its cells
        batches = operator["ledger"] - 1
        assert 1 <= batches <= BATCHES, operator  # many cells per write, not one each
    else:
        assert operator["ledger"] == 0
    total = sum(operator.values())
    assert operator["status"] <= PHASES, operator
    assert operator["events"] <= PHASES, operator
    # So a run of 1,000 cells at parallelism 100 costs about 1.1 writes per cell.
    assert total - CELLS - batches <= PER_RUN, operator
