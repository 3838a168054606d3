"""A RunSpec is resolved once per generation and run any number of times, in turn or at once.

A RunSpec exists to be run again (nightly, by a GitOps CronJob): its second EvaluationRun
finds it resolved and must start without resolving anything again; runs created together
all wait for the one resolution and all run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_health.cluster.cells import manifests
from agent_health.cluster.reconcile import plan
from support.operator_support import RUNS, Kubelet, cluster, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/rca.py::payment rca", ["category:RCA"]))


def named(run: dict[str, Any], name: str) -> dict[str, Any]:
    spec = run["spec"] | {"repeats": 2, "parallelism": 2}
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def runspec_status_patches(k8s: Any) -> int:
    return sum(
        1
        for r in k8s.operator_requests()
        if r.method.value == "PATCH" and r.resource and r.resource.plural == "runspecs"
    )


async def test_runs_of_a_resolved_runspec_start_in_turn_and_at_once() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            await k8s.apply(named(run, "first"))
            first = await until(lambda: finished(k8s, "first"), "the first run")
            asked, patched = len(k8s.registry.asked), runspec_status_patches(k8s)

            # The RunSpec is resolved: a later run starts at once (Pending → Running).
            await k8s.apply(named(run, "second"))
            second = await until(lambda: finished(k8s, "second"), "the second run")

            # Three at once, while nothing is left to resolve.
            for name in ("a", "b", "c"):
                await k8s.apply(named(run, name))
            together = [await until(lambda n=n: finished(k8s, n), n) for n in ("a", "b", "c")]

            # Nothing was resolved or discovered again.
            assert len(k8s.registry.asked) == asked
            assert runspec_status_patches(k8s) == patched
            assert len(k8s.pods("discovery")) == 1
        for status in (first, second, *together):
            assert status["phase"] == "Succeeded", status
            assert status["counts"]["passed"] == 2, status
        phases = [c for c in second["conditions"] if c["type"] == "Resolved"]
        assert phases[0]["status"] == "True"


async def test_runs_created_with_their_runspec_all_wait_for_one_resolution() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(runspec)
            for name in ("one", "two", "three"):  # while the RunSpec is being resolved
                await k8s.apply(named(run, name))
            done = [await until(lambda n=n: finished(k8s, n), n) for n in ("one", "two", "three")]
            assert len(k8s.pods("discovery")) == 1
            assert len(k8s.registry.asked) == 2  # the target's and the peer's image, once
        for status in done:
            assert status["phase"] == "Succeeded", status
            assert status["counts"]["passed"] == 2, status


async def test_a_run_waiting_for_its_runspec_fails_when_the_runspec_is_deleted() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS, LEDGER)
        fake.play = _hold_discovery(fake)  # type: ignore[method-assign]
        # kopf serialises one object's handlers: the RunSpec's deletion is seen once its
        # reconcile stops waiting for the discovery pod.
        async with kubelet(fake), k8s.operator(discovery_wait=0.5):
            await k8s.apply(runspec)
            await k8s.apply(named(run, "waiting"))
            await until(
                lambda: (k8s.run("waiting").get("status") or {}).get("phase") == "Resolving",
                "the run to wait for its RunSpec",
            )
            path = RUNS.replace("evaluationruns", "runspecs") + "/triage"
            answer = await k8s.client.delete(path)
            assert answer.status_code == 200, answer.text
            status = await until(lambda: finished(k8s, "waiting"), "the run to end")
        assert status["phase"] == "Failed"
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "RunSpecMissing"


def _hold_discovery(fake: Kubelet) -> Any:
    """A kubelet whose discovery pods never end (their RunSpec stays unresolved)."""
    played = fake.play

    async def play(pod: dict[str, Any]) -> None:
        if pod["metadata"].get("labels", {}).get(manifests.LABEL_COMPONENT) != "discovery":
            await played(pod)

    return play


async def test_every_run_waiting_for_a_runspec_sees_its_next_body() -> None:
    board = plan.Bulletin()
    key = ("default", "triage")
    body = {"metadata": {"namespace": "default", "name": "triage", "generation": 1}}
    seen = board.serial(key)
    waiters = [asyncio.ensure_future(board.wait(key, seen, 30)) for _ in range(3)]
    await asyncio.sleep(0)
    board.post(body)
    answers = await asyncio.gather(*waiters)
    assert answers == [(seen + 1, body)] * 3  # none took it from the others
    assert await board.wait(key, seen, 30) == (seen + 1, body)  # a late waiter: at once
    assert await board.wait(key, seen + 1, 0.01) == (seen + 1, None)  # nothing newer
    board.forget(body)
    assert await board.wait(key, seen + 1, 30) == (seen + 2, None)  # deleted
