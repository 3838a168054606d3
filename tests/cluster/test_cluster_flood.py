"""A target that floods its gateway past its cell's share of a ConfigMap ledger, through the
operator on the API emulator: its gateway records what fits and marks the rest dropped, and
the grade holds the gap against the agent — a failed test stays failed, a passed one is not
passed — never an infrastructure error out of the pass rate."""

from __future__ import annotations

from typing import Any

import pytest
from support.operator_support import Cell, Kubelet, cluster, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(
    ("suite/t.py::floods and fails", []),
    ("suite/t.py::floods and passes", []),
    ("suite/t.py::fine", []),
)
OUTCOMES = {"floods and fails": "flood-failed", "floods and passes": "flood", "fine": "passed"}


async def test_a_target_that_floods_its_share_is_graded_on_its_own_doing() -> None:
    def outcome(cell: Cell) -> str:
        return OUTCOMES[cell.test_id.split("::")[-1]]

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        spec: dict[str, Any] = {k: v for k, v in run["spec"].items() if k != "selection"}
        spec |= {"repeats": 1, "retry": {"infraRetries": 1}}
        run |= {"spec": spec}
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run)
            name = run["metadata"]["name"]
            status = await until(lambda: finished(k8s, name), "the run to end")
    counts = status["counts"]
    errors = [(t.get("error"), t.get("cause")) for t in status["tests"]]
    assert (counts["passed"], counts["failed"], counts["errored"]) == (1, 1, 1), errors
    assert counts["erroredByCause"] == {"agent": 1, "judge": 0, "test": 0, "infra": 0}
    assert status["passRate"] == pytest.approx(1 / 3)  # the flooder's two count against it
    tests = {t["id"].split("::")[-1]: t for t in status["tests"]}
    failed, errored = tests["floods and fails"], tests["floods and passes"]
    assert failed["failed"] == 1
    assert errored["cause"] == "agent"
    assert "not passed: the gateway had to drop" in errored["error"]
    assert "the target's own traffic filled it" in errored["error"]
    assert len(fake.seen) == 3  # no retries: nothing here is the infrastructure's to retry
