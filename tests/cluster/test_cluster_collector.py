"""A ConfigMap ledger stored by the operator: cells from their gateways' logs, many per write
(:mod:`agent_health.cluster.reconcile.collector`), against the API emulator."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import pytest
from agent_health.cluster.reconcile import collector
from agent_health.ledger import audit, configmap, errors, store
from support.operator_support import Cell, Kubelet, cluster, finished, kubelet, listing, until

LEDGER = "configmap://default/ledger-{run}"
WRITES = ("POST", "PATCH", "PUT", "DELETE")


def ledger_writes(k8s: Any) -> list[Any]:
    return [
        r
        for r in k8s.emulator
        if r.method.value in WRITES and r.resource is not None and r.resource.plural == "configmaps"
    ]


async def _backend(k8s: Any) -> configmap.ConfigMapBackend:
    body = {"metadata": {"name": "ledger"}}
    answer = await k8s.client.post("/api/v1/namespaces/default/configmaps", json=body)
    assert answer.status_code == 201, answer.text
    options = store.Options(kube_api_url=k8s.url, kube_token="operator")
    return configmap.ConfigMapBackend("default", "ledger", options)


async def test_cells_that_end_together_share_one_write() -> None:
    """Every cell the run has going is in the batch: it is written at once, in one patch
    (the delay is an hour: waiting for it would hang the test)."""
    async with cluster() as k8s:
        backend = await _backend(k8s)
        collected = collector.Collector(backend, active=lambda: 3, delay=3600.0)
        cells = {f"c{n}": [f'{{"n":{n},"i":{i}}}' for i in range(5)] for n in range(3)}
        before = len(ledger_writes(k8s))
        await asyncio.gather(*(collected.store(c, lines) for c, lines in cells.items()))
        assert len(ledger_writes(k8s)) - before == 1
        for cell, lines in cells.items():
            assert await backend.read(cell) == lines
        await collected.close()
        await backend.close()


async def test_a_batch_waits_a_short_time_for_more_cells() -> None:
    async with cluster() as k8s:
        backend = await _backend(k8s)
        collected = collector.Collector(backend, active=lambda: 100, delay=0.05)
        before = len(ledger_writes(k8s))
        await asyncio.gather(collected.store("a", ["1"]), collected.store("b", ["2"]))
        await collected.store("c", ["3"])  # after the first batch: a write of its own
        assert len(ledger_writes(k8s)) - before == 2
        assert await backend.cells() == ["a", "b", "c"]
        await collected.close()
        await backend.close()


async def test_a_cell_that_does_not_fit_fails_alone() -> None:
    """A batch over the ConfigMap's 1 MiB is stored again cell by cell: only the cell that
    does not fit fails, with the size error; the others are stored. (The big cell sends its
    batch at once, by size; the last small one waits for the short delay.)"""
    async with cluster() as k8s:
        backend = await _backend(k8s)
        collected = collector.Collector(backend, active=lambda: 3, delay=0.05)
        big = [os.urandom(300 * 1024).hex() for _ in range(4)]  # gzips past 1 MiB
        outcomes = await asyncio.gather(
            collected.store("small-1", ["s1"]),
            collected.store("big", big),
            collected.store("small-2", ["s2"]),
            return_exceptions=True,
        )
        assert outcomes[0] is None
        assert outcomes[2] is None
        assert isinstance(outcomes[1], errors.LedgerTooLarge), outcomes
        assert await backend.cells() == ["small-1", "small-2"]
        await collected.close()
        await backend.close()


@pytest.mark.slow
async def test_a_cut_log_is_an_infra_error_and_the_ledger_holds_what_was_graded() -> None:
    """Three cells: one whose gateway log lost its end (errored, cause infra, not stored),
    one sealed with another key (graded as a tampered ledger), one that passed. The run's
    ConfigMap holds exactly the two graded from their records, and verifies but for the
    tampered one."""
    tests = listing(
        ("suite/t.py::cut", ["x"]), ("suite/t.py::forged", ["x"]), ("suite/t.py::fine", ["x"])
    )

    def outcome(cell: Cell) -> str:
        return {"suite/t.py::cut": "log-cut", "suite/t.py::forged": "tampered"}.get(
            cell.test_id, "passed"
        )

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        run["spec"] = {"runSpecRef": {"name": "triage"}, "repeats": 1, "parallelism": 3}
        async with kubelet(Kubelet(k8s, tests, None, outcome=outcome)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, "triage-nightly"), "the run to end")
        by_test = {t["id"]: t for t in status["tests"]}
        cut, forged, fine = (by_test[f"suite/t.py::{n}"] for n in ("cut", "forged", "fine"))
        assert (cut["errored"], cut["cause"]) == (1, "infra")
        assert "without an end frame" in cut["error"]
        assert forged["errored"] == 1
        assert forged["error"].startswith("ledger tampered")
        assert fine["passed"] == 1
        secret = k8s.emulator.read("secrets", "default", "triage-nightly-ledger-key")
        key = base64.b64decode(secret["data"]["key"])
        options = store.Options(kube_api_url=k8s.url, kube_token="operator")
        report = await audit.verify_url(
            "configmap://default/ledger-triage-nightly", key, options=options
        )
        verdicts = {c.cell.split("-")[-2]: c.result.ok for c in report.cells}
    assert len(report.cells) == 2, [c.cell for c in report.cells]
    assert sorted(verdicts.values()) == [False, True]
