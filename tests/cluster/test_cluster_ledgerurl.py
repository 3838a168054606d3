"""A bad ledger URL stops what names it, with the reason, instead of failing every cell.

The operator's ``--ledger-url`` is checked when it starts; a RunSpec's ``spec.ledger.url``
when it is reconciled (``Resolved=False``, and its runs fail); a URL that only goes wrong
once filled in for a run fails that run with ``InvalidLedgerUrl``.
"""

from __future__ import annotations

import pytest
from agent_health.cli import app
from agent_health.cluster.cells import ledgerurl
from support.operator_support import Kubelet, cluster, finished, kubelet, listing, until

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
        ("configmap://{namespace}/shared-ledger", "a ConfigMap ledger holds one run"),
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
        "configmap://evals/triage-ledger-{run}",
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


@pytest.mark.slow
async def test_a_runspec_with_a_bad_ledger_url_and_its_runs_fail_with_the_reason() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger="configmap://triage-ledger")
        async with kubelet(Kubelet(k8s, TESTS, None)), k8s.operator():
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
        name = "n" * 250  # a valid run name, too long once the template adds its prefix
        run["metadata"]["name"] = name
        fake = Kubelet(k8s, TESTS, None)
        async with kubelet(fake), k8s.operator(ledger_url="configmap://{namespace}/ledger-{run}"):
            await k8s.apply(runspec)
            await k8s.apply(run)
            status = await until(lambda: finished(k8s, name), "the run to end")
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert (status["phase"], failed["reason"]) == ("Failed", "InvalidLedgerUrl")
        assert "--ledger-url" in failed["message"]
        assert "is not a ConfigMap name" in failed["message"]
        assert not k8s.pods()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://team-a/runs/x?endpoint_url=http://evil", "carries query options"),
        ("gs://team-a/runs/x#frag", "carries query options"),
        ("s3://key:secret@team-a/runs/x", "carries credentials"),
        ("s3://team-a/runs/../../team-b/x", "climbs out of its prefix"),
        ("configmap://kube-system/ledger-x", "names a ConfigMap in namespace 'kube-system'"),
        ("s3://team-b/runs/x", "is not under a ledger prefix the operator allows"),
        ("s3://team-a/runsx/y", "is not under a ledger prefix the operator allows"),
        ("file:///var/ledgers/x", "is not under a ledger prefix the operator allows"),
    ],
)
def test_a_runspec_cannot_choose_where_the_operator_reads(url: str, says: str) -> None:
    allowed = ("configmap://{namespace}/", "s3://team-a/runs/")
    found = ledgerurl.refused(url, namespace="team-a", allowed=allowed)
    assert found is not None
    assert says in found


def test_a_runspec_may_choose_under_an_allowed_prefix() -> None:
    allowed = ("configmap://{namespace}/", "s3://evals/{namespace}/")
    for url in ("configmap://team-a/ledger-run-1", "s3://evals/team-a/run-1"):
        assert ledgerurl.refused(url, namespace="team-a", allowed=allowed) is None
    assert ledgerurl.refused("s3://evals/team-b/r", namespace="team-a", allowed=allowed)


@pytest.mark.parametrize(
    ("prefix", "says"),
    [
        ("s3://bucket/team", "must end with '/'"),
        ("s3://bucket/?endpoint_url=x/", "must end with '/'"),
        ("ftp://bucket/", "names no ledger store"),
        ("s3://bucket/{run}/", "may contain {namespace} only"),
    ],
)
def test_an_allowed_prefix_is_checked_at_start(prefix: str, says: str) -> None:
    found = ledgerurl.prefix_problem(prefix)
    assert found is not None
    assert says in found
    code = app.main(["operator", *IMAGES, f"--ledger-allow={prefix}"])
    assert code == 2
