"""Steering a running EvaluationRun by patching its spec, as ``kubectl patch`` does (and as
agent-health serve does): suspend and resume, parallelism changed mid-run, and the errored
cells of a running or a finished run requeued.

The operator runs for real (kopf) against the emulator; the test plays the kubelet."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.operator_support import (
    Cell,
    Cluster,
    Kubelet,
    cluster,
    finished,
    kubelet,
    listing,
    pod_creations,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/t.py::first", []), ("suite/t.py::second", []))
RUNS = "/apis/agenthealth.dev/v1alpha1/namespaces/default/evaluationruns"
MERGE = {"Content-Type": "application/merge-patch+json"}


def steered_run(run: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {"runSpecRef": {"name": "triage"}, "repeats": 2, "parallelism": 2} | spec
    return run | {"metadata": {"name": "steered", "namespace": "default"}, "spec": body}


async def patch(k8s: Cluster, spec: dict[str, Any]) -> None:
    answer = await k8s.client.patch(f"{RUNS}/steered", json={"spec": spec}, headers=MERGE)
    assert answer.status_code == 200, answer.text


def status(k8s: Cluster) -> dict[str, Any]:
    return k8s.run("steered").get("status") or {}


def said(found: dict[str, Any], type: str) -> str | None:
    """The status of the run's condition ``type`` (``None``: not there yet)."""
    return next((c["status"] for c in found.get("conditions", []) if c["type"] == type), None)


async def test_suspend_stops_the_running_cells_and_resume_runs_them_again() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _cell: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, retry={"infraRetries": 0}))
            await until(lambda: len(fake.held) == 2, "two cells to run (parallelism 2)")
            first = sorted(fake.held)

            await patch(k8s, {"suspend": True})
            await until(lambda: not k8s.pods(), "the running cells to be stopped")
            suspended = await until(
                lambda: status(k8s) if said(status(k8s), "Suspended") == "True" else None,
                "the Suspended condition",
            )
            assert suspended["counts"]["pending"] == 4, suspended["counts"]
            assert suspended["counts"]["errored"] == 0
            await asyncio.sleep(1)  # no cell starts while suspended
            assert k8s.pods() == []
            assert sorted(pod_creations(k8s.emulator).values()) == [1, 1]

            await patch(k8s, {"suspend": False})
            await until(lambda: len(fake.held) == 2, "the stopped cells to run again")
            assert sorted(fake.held) == first  # the stopped ones first, as their next attempt
            for name in first:
                pod = k8s.emulator.read("pods", "default", name)
                assert pod["metadata"]["annotations"]["agenthealth.dev/attempt"] == "1"
            while fake.held or (status(k8s).get("counts") or {}).get("pending"):
                for name in list(fake.held):
                    await fake.release(name)
                await asyncio.sleep(0.05)
            done = await until(lambda: finished(k8s, "steered"), "the run to finish")
        assert done["phase"] == "Succeeded", done
        assert (done["counts"]["passed"], done["counts"]["errored"]) == (4, 0)
        assert said(done, "Suspended") == "False"


async def test_parallelism_raised_mid_run_starts_more_cells() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _cell: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, parallelism=1))
            await until(lambda: len(fake.held) == 1, "one cell to run")
            await patch(k8s, {"parallelism": 3})
            await until(lambda: len(fake.held) == 3, "three cells to run at once")
            for name in list(fake.held):
                await fake.release(name)
            await until(lambda: len(fake.held) == 1, "the last cell")
            await fake.release(next(iter(fake.held)))
            done = await until(lambda: finished(k8s, "steered"), "the run to finish")
        assert done["counts"]["passed"] == 4


def evicted_once(cell: Cell) -> str:
    """The first attempt at ``first`` is evicted (an infrastructure error); the rest pass."""
    return "evicted" if cell.test_id.endswith("first") and cell.attempt == 0 else "passed"


async def test_the_errored_cells_of_a_finished_run_run_again_when_requeued() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=evicted_once)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, retry={"infraRetries": 0}))
            done = await until(lambda: finished(k8s, "steered"), "the run to finish")
            assert done["phase"] == "Succeeded", done
            assert (done["counts"]["passed"], done["counts"]["errored"]) == (2, 2)
            assert done["counts"]["erroredByCause"]["infra"] == 2

            await patch(k8s, {"requeueErrored": 1})
            again = await until(
                lambda: (
                    status(k8s)
                    if status(k8s).get("requeuedErrored") == 1
                    and status(k8s).get("phase") == "Succeeded"
                    else None
                ),
                "the requeued cells to run and the run to finish again",
            )
        assert (again["counts"]["passed"], again["counts"]["errored"]) == (4, 0), again
        created = pod_creations(k8s.emulator)
        test_of = {p["metadata"]["name"]: Cell.of(p).test_id for p in k8s.pods()}
        firsts = [n for n in created if test_of[n].endswith("first")]
        assert [created[n] for n in firsts] == [2, 2]  # the errored ones, once more each
        assert [created[n] for n in created if n not in firsts] == [1, 1]


async def test_the_errored_cells_of_a_running_run_run_again_when_requeued() -> None:
    def outcome(cell: Cell) -> str:
        return "hold" if cell.test_id.endswith("second") else evicted_once(cell)

    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, parallelism=4, retry={"infraRetries": 0}))
            await until(
                lambda: (status(k8s).get("counts") or {}).get("errored") == 2,
                "the first test's cells to error",
            )
            assert status(k8s)["phase"] == "Running"
            await patch(k8s, {"requeueErrored": 1})
            await until(
                lambda: (status(k8s).get("counts") or {}).get("passed") == 2,
                "the requeued cells to pass",
            )
            for name in list(fake.held):
                await fake.release(name)
            done = await until(lambda: finished(k8s, "steered"), "the run to finish")
        assert (done["counts"]["passed"], done["counts"]["errored"]) == (4, 0), done
        assert done["requeuedErrored"] == 1


async def test_a_budget_set_mid_run_stops_starting_cells_once_reached() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _cell: "hold")
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, parallelism=1))
            await until(lambda: len(fake.held) == 1, "one cell to run")
            await patch(k8s, {"budget": {"maxTokens": 1}})
            await fake.release(next(iter(fake.held)))
            done = await until(lambda: finished(k8s, "steered"), "the run to stop at its budget")
        assert (done["counts"]["passed"], done["counts"]["skipped"]) == (1, 3), done
        assert done["budget"]["exhausted"] == "maxTokens"
        assert said(done, "BudgetExhausted") == "True"


async def test_a_run_created_suspended_starts_nothing_until_resumed() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator(startup_seconds=1):
            await k8s.apply(runspec_body)
            await k8s.apply(steered_run(run, suspend=True, activeDeadlineSeconds=2))
            await until(lambda: said(status(k8s), "Suspended") == "True", "the run to hold")
            await asyncio.sleep(3)  # past its activeDeadlineSeconds: held, it does not count
            assert k8s.pods() == []
            assert status(k8s)["phase"] == "Running"
            await patch(k8s, {"suspend": False})
            # Resumed, its cells start (its deadline counts from now: how it ends is not
            # this test's business on a loaded machine).
            await until(lambda: len(fake.started) > 0, "the cells to start once resumed")
