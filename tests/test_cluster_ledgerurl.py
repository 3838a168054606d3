"""A bad ledger URL stops what names it, with the reason, instead of failing every cell.

The operator's ``--ledger-url`` is checked when it starts; a RunSpec's ``spec.ledger.url``
when it is reconciled (``Resolved=False``, and its runs fail); a URL that only goes wrong
once filled in for a run fails that run with ``InvalidLedgerUrl``.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.cli import app
from agent_health.cluster.cells import ledgerurl
from operator_support import Kubelet, cluster, kubelet, listing, until

TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))
IMAGES = ["--controller-image=c@sha256:" + "a" * 64, "--gateway-image=g@sha256:" + "b" * 64]


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("configmap://agent-health-ledger", "must be configmap://NAMESPACE/NAME"),
        ("configmap://ledger", "must be configmap://NAMESPACE/NAME"),
        ("configmap://{namespce}/ledger", "unknown placeholder {namespce}"),
        ("configmap://Default/ledger", "is not a Kubernetes namespace name"),
        ("configmap://default/Ledger_1", "is not a ConfigMap name"),
        ("ftp://host/ledger", "unknown ledger URL scheme 'ftp'"),
        ("s3://", "names no bucket"),
    ],
)
def test_a_template_that_names_no_ledger_says_why(template: str, says: str) -> None:
    found = ledgerurl.problem(template)
    assert found is not None
    assert says in found


@pytest.mark.parametrize(
    "template",
    [
        "configmap://{namespace}/agent-health-ledger-{run}",
        "configmap://evals/triage-ledger",
        "gs://bucket/runs/{runspec}/{run}",
        "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000",
        "file:///var/ledgers",
    ],
)
def test_good_templates_pass(template: str) -> None:
    assert ledgerurl.problem(template) is None


def test_the_operator_refuses_to_start_with_a_malformed_ledger_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = app.main(["operator", *IMAGES, "--ledger-url=configmap://agent-health-ledger"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--ledger-url" in err
    assert "configmap://NAMESPACE/NAME" in err


def finished(k8s: Any, name: str) -> dict[str, Any] | None:
    status = dict(k8s.run(name).get("status") or {})
    return status if status.get("phase") in ("Succeeded", "Failed") else None


@pytest.mark.slow
async def test_a_runspec_with_a_bad_ledger_url_and_its_runs_fail_with_the_reason() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger="configmap://triage-ledger")
        async with kubelet(Kubelet(k8s, TESTS, "configmap://default/x")), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, "triage-nightly"), "the run to end")
        resolved = next(
            c for c in k8s.runspec("triage")["status"]["conditions"] if c["type"] == "Resolved"
        )
        assert (resolved["status"], resolved["reason"]) == ("False", "InvalidLedgerUrl")
        assert "spec.ledger.url" in resolved["message"]
        assert "configmap://NAMESPACE/NAME" in resolved["message"]
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert status["phase"] == "Failed"
        assert failed["reason"] == "InvalidLedgerUrl"
        assert not k8s.pods()  # neither discovery nor a cell


@pytest.mark.slow
async def test_a_default_ledger_url_that_fits_no_run_fails_that_run() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example()
        del runspec["spec"]["ledger"]
        run["metadata"]["name"] = "nightly.2"  # a valid run name, not a namespace name
        fake = Kubelet(k8s, TESTS, "configmap://default/x")
        async with kubelet(fake), k8s.operator(ledger_url="configmap://{run}/ledger"):
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, "nightly.2"), "the run to end")
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert (status["phase"], failed["reason"]) == ("Failed", "InvalidLedgerUrl")
        assert "--ledger-url" in failed["message"]
        assert "'nightly.2' is not a Kubernetes namespace name" in failed["message"]
        assert not k8s.pods()
