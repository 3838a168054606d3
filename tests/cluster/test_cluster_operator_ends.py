"""Every run ends: crash loops, cells that never start, deadlines and operator errors.

No error path retries forever. A cell whose sidecar crash-loops is errored at once (its cause
says whom it blames) and its run goes on; a cell that outlives its deadline is errored by the
operator itself; a run past ``activeDeadlineSeconds`` fails and stops its cells; an error of
the operator's own while starting a run or resolving a RunSpec is named in a condition, retried
a bounded number of times, then fails the object.
"""

from __future__ import annotations

from typing import Any

import kmock
import pytest
from agent_health.cluster.cells import observed
from support.operator_support import (
    Cell,
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    listing,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(
    ("suite/t.py::gateway loops", []),
    ("suite/t.py::peer loops", []),
    ("suite/t.py::target loops", []),
    ("suite/t.py::fine", []),
)
LOOPS = {"gateway loops": "gateway", "peer loops": "logs", "target loops": "target"}


def run_named(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    base = {k: v for k, v in run["spec"].items() if k != "selection"}
    body = base | {"repeats": 1, "parallelism": 4, "retry": {"infraRetries": 0}} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


def test_a_crash_loop_dooms_a_cell_that_has_not_ended() -> None:
    def pod(name: str, restarts: int) -> dict[str, Any]:
        looping = {"name": name, "restartCount": restarts, "state": {"waiting": {}}}
        return {"kind": "Pod", "status": {"phase": "Running", "initContainerStatuses": [looping]}}

    def cause(name: str, restarts: int) -> str | None:
        found = observed.doomed(pod(name, restarts))
        return found[0] if found else None

    assert cause("logs", 2) is None
    assert cause("logs", 3) == "sidecar-crash"
    assert cause("gateway", 1) == "gateway-restart"
    assert cause("target", 1) == "target-crash"


async def test_crash_looping_sidecars_end_their_cells_at_once_and_the_run_goes_on() -> None:
    def outcome(cell: Cell) -> str:
        title = cell.test_id.split("::")[-1]
        return f"crashloop:{LOOPS[title]}" if title in LOOPS else "passed"

    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "loops"))
            status = await until(lambda: finished(k8s, "loops"), "the run to end")
            remaining = {p["metadata"]["name"] for p in k8s.pods()}
    assert status["phase"] == "Succeeded", status
    assert status["counts"]["passed"] == 1
    assert status["counts"]["errored"] == 3
    assert status["counts"]["erroredByCause"] == {"agent": 1, "judge": 0, "test": 0, "infra": 2}
    errors = {t["id"].split("::")[-1]: (t.get("error"), t.get("cause")) for t in status["tests"]}
    assert "(gateway-restart)" in errors["gateway loops"][0]
    assert errors["gateway loops"][1] == "infra"
    assert "(sidecar-crash): container logs restarted 3 times" in errors["peer loops"][0]
    assert "(target-crash)" in errors["target loops"][0]
    assert errors["target loops"][1] == "agent"
    assert len(remaining) == 1  # the looping cells were deleted, not left to their deadline


async def test_a_cell_that_never_starts_is_errored_past_its_deadline() -> None:
    def outcome(cell: Cell) -> str:
        return "never-starts" if cell.test_id.endswith("fine") else "passed"

    tests = [t for t in TESTS if t["id"].endswith(("fine", "peer loops"))]
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        runspec["spec"]["timeoutSeconds"] = 1
        fake = Kubelet(k8s, tests, LEDGER, outcome=outcome)
        async with kubelet(fake), k8s.operator(startup_seconds=1, deadline_grace=0.5):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "late"))
            status = await until(lambda: finished(k8s, "late"), "the run to end")
            remaining = k8s.pods()
    assert status["phase"] == "Succeeded", status
    assert (status["counts"]["passed"], status["counts"]["errored"]) == (1, 1)
    late = next(t for t in status["tests"] if t["id"].endswith("fine"))
    assert "(deadline): the cell did not end within its deadline (2 s)" in late["error"]
    assert late["cause"] == "infra"
    assert len(remaining) == 1  # the cell that never started was deleted


async def test_a_run_past_its_active_deadline_fails_and_stops_its_cells() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "slow", activeDeadlineSeconds=12, parallelism=2))
            await until(lambda: len(fake.held) == 2, "two running cells")
            await fake.release(next(iter(fake.held)))  # one is graded, the next one starts
            # (12 s leave room on a loaded machine for that grade to land before the deadline)
            status = await until(lambda: finished(k8s, "slow"), "the run to end")
            await until(lambda: len(k8s.pods()) == 1, "the running cell to be stopped")
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == (
        "activeDeadlineSeconds (12 s) passed: 1 of 4 cells graded, 2 running stopped, "
        "1 never started"
    )
    assert status["counts"]["passed"] == 1  # what was graded stays


async def test_a_run_whose_runspec_never_resolves_ends_at_its_deadline() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        played = fake.play

        async def no_discovery(pod: dict[str, Any]) -> None:
            if "-discover-" not in pod["metadata"]["name"]:
                await played(pod)

        fake.play = no_discovery  # type: ignore[method-assign]
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "stuck", activeDeadlineSeconds=2))
            status = await until(lambda: finished(k8s, "stuck"), "the run to end")
    failed = condition(status, "Failed")
    assert (status["phase"], failed["reason"]) == ("Failed", "DeadlineExceeded")
    assert failed["message"] == "activeDeadlineSeconds (2 s) passed before the run could start"


async def test_an_operator_error_starting_a_run_is_named_retried_and_then_fails_it() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS, LEDGER)), k8s.operator(retry_delay=0.05):
            await k8s.apply(runspec)
            await until(
                lambda: condition(k8s.runspec("triage").get("status") or {"conditions": [
                    {"type": "Ready", "status": "False"}]}, "Ready")["status"] == "True",
                "the RunSpec to be ready",
            )  # fmt: skip
            # The API server answers Secret creations with something that is not a Secret:
            # reading the run's ledger key back fails (KeyError), a bug-shaped failure.
            k8s.emulator["post", kmock.resource("", "v1", "secrets")] << {"kind": "Status"}
            await k8s.apply(run_named(run, "broken"))
            status = await until(lambda: finished(k8s, "broken"), "the run to end")
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["reason"] == "ReconcileError"
    assert failed["message"].startswith("the operator could not start the run (6 attempts): ")
    assert "KeyError" in failed["message"]
    reconciled = condition(status, "Reconciled")
    assert (reconciled["status"], reconciled["reason"]) == ("False", "KeyError")
    assert reconciled["message"].startswith("attempt 5 of 6 failed, next in ")
    assert not k8s.pods()


async def test_a_runspec_the_operator_cannot_resolve_fails_after_bounded_retries() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        k8s.emulator["post", kmock.resource("", "v1", "pods")] << 500
        async with kubelet(Kubelet(k8s, TESTS, LEDGER)), k8s.operator(retry_delay=0.05):
            await k8s.apply(runspec)
            await k8s.apply(run_named(run, "unresolved"))
            status = await until(lambda: finished(k8s, "unresolved"), "the run to end")
        resolved = condition(k8s.runspec("triage")["status"], "Resolved")
    assert (resolved["status"], resolved["reason"]) == ("False", "ReconcileError")
    assert "(6 attempts)" in resolved["message"]
    assert "500" in resolved["message"]
    assert status["phase"] == "Failed"
    assert condition(status, "Failed")["reason"] == "ReconcileError"
