"""Sandboxed cells and Kueue (issue 34, item 8): no sandbox runs outside the quota a queue
keeps, and no namespace holds more warm sandboxes than the operator's admin allows.

The operator runs for real (kopf) against the emulator with the stand-ins of Kueue
(``tests/support/node/kueue.py``: its pod webhook, quota, preemption) and Agent Sandbox
(``tests/support/node/sandboxpools.py``: Sandboxes and their pods, templates, warm pools, claims);
the test plays the kubelet, which runs a pod only once its scheduling gates are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_health.cluster.cells import kueue
from support.node import kueue as kueue_node
from support.node import kueueobjects as kueue_objects
from support.node import sandboxpools
from support.operator_support import (
    Cell,
    Cluster,
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    listing,
    until,
)
from test_cluster_kueue import KUEUE, counts, create, queues

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/t.py::first", []), ("suite/t.py::second", []), ("suite/t.py::third", []))
SANDBOXES = "agents.x-k8s.io"


def sandboxed(k8s: Cluster, **warm: Any) -> list[dict[str, Any]]:
    """The example, its cells in Agent Sandboxes (from a warm pool when ``warm`` is given)."""
    runspec_body, run = k8s.example(isolation="agentSandbox", ledger=LEDGER)
    if warm:
        runspec_body["spec"]["isolation"]["warmPool"] = {"keepSeconds": 0} | warm
    return [runspec_body, run]


def named_run(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    body = {"runSpecRef": {"name": "triage"}, "repeats": 1, "parallelism": 3} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


def listed(k8s: Cluster, group: str, plural: str) -> list[dict[str, Any]]:
    store = k8s.emulator.store
    return store.list(store.kinds[(group, plural)], "default", lambda _l: True)


@contextlib.asynccontextmanager
async def stand_ins(
    k8s: Cluster, fake: Kubelet, **operator: Any
) -> AsyncIterator[tuple[kueue_node.Kueue, sandboxpools.SandboxPools]]:
    async with (
        kueue_node.running(k8s.emulator, k8s.client) as queued,
        sandboxpools.running(k8s.emulator, k8s.client) as pools,
        kubelet(fake),
        k8s.operator(sandboxes=True, warm_pools=True, **operator),
    ):
        yield queued, pools


# -- the switch: refuse (the default) ------------------------------------------------------


@pytest.mark.parametrize("warm", [False, True])
async def test_by_default_a_sandboxed_run_the_default_queue_applies_to_is_refused(
    warm: bool,
) -> None:
    """Was: its Sandboxes ran at once, outside the queue every other run waits in."""
    async with cluster() as k8s:
        runspec_body, run = sandboxed(k8s, **({"replicas": 2} if warm else {}))
        async with stand_ins(k8s, Kubelet(k8s, TESTS, LEDGER), default_queue="team-a") as (
            queued,
            _,
        ):
            await queues(k8s, ("team-a", 3))
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "boxed"))
            done = await until(lambda: finished(k8s, "boxed"), "the run to end")
        assert done["phase"] == "Failed", done
        failed = condition(done, "Failed")
        assert failed["reason"] == "InvalidSpec"
        assert "queues every run in LocalQueue 'team-a' (--default-queue)" in failed["message"]
        assert "--sandbox-queueing refuse" in failed["message"]
        assert not listed(k8s, SANDBOXES, "sandboxes")  # none ran outside the queue
        # Its discovery pod is a plain pod: it waited in the queue and was admitted.
        assert [a.pod.split("-discover-")[0] for a in queued.admissions] == ["triage"]


# -- the switch: admit ---------------------------------------------------------------------


async def test_admitted_sandboxes_pods_wait_in_the_queue_within_its_quota() -> None:
    async with cluster() as k8s:
        runspec_body, run = sandboxed(k8s)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with stand_ins(k8s, fake, sandbox_queueing="admit") as (queued, _):
            await queues(k8s, ("team-a", 1), flavor=False)
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "boxed", queue="team-a"))
            await until(lambda: counts(k8s, "boxed").get("queued") == 3, "three queued")
            for box in listed(k8s, SANDBOXES, "sandboxes"):
                # The Sandbox's pod is the workload; the Sandbox itself carries no queue.
                assert kueue.QUEUE_LABEL not in box["metadata"]["labels"]
                labels = box["spec"]["podTemplate"]["metadata"]["labels"]
                assert labels[kueue.QUEUE_LABEL] == "team-a"
            pods = k8s.pods()
            assert len(pods) == 3
            assert all(kueue.gated(p) for p in pods)
            assert fake.started == [n for n in fake.started if "-discover-" in n]
            await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
            done = await until(lambda: finished(k8s, "boxed"), "the run to finish")
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 3
        assert done["counts"]["queued"] == 0
        cells = [a for a in queued.admissions if a.pod.startswith("boxed-")]
        assert len(cells) == 3  # each Sandbox's pod, admitted by Kueue
        assert all(a.usage["team-a"]["pods"] <= 1 for a in cells)  # one at a time: the quota


async def test_an_admitted_sandbox_never_times_out_in_the_queue_and_its_deadline_starts_at_admission(  # noqa: E501
) -> None:
    async with cluster() as k8s:
        runspec_body, run = sandboxed(k8s)
        fake = Kubelet(k8s, TESTS[:1], LEDGER, outcome=lambda _cell: "hold")
        operator = {"sandbox_queueing": "admit", "startup_seconds": 1, "deadline_grace": 0.0}
        async with stand_ins(k8s, fake, **operator):
            await queues(k8s, ("team-a", 1), flavor=False)
            await k8s.apply(runspec_body)
            body = named_run(
                run, "held", queue="team-a", timeoutSeconds=1, retry={"infraRetries": 0}
            )
            await k8s.apply(body)
            await until(lambda: counts(k8s, "held").get("queued") == 1, "the cell to be queued")
            await asyncio.sleep(4)  # twice the cell's deadline (1 s timeout + 1 s startup)
            assert counts(k8s, "held")["queued"] == 1
            assert counts(k8s, "held")["errored"] == 0
            assert k8s.run("held")["status"]["phase"] == "Running"

            await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
            done = await until(lambda: finished(k8s, "held"), "the admitted cell to time out")
        assert done["counts"]["errored"] == 1, done
        assert done["counts"]["erroredByCause"]["infra"] == 1
        assert "deadline" in done["tests"][0]["error"]


async def test_a_warm_pools_idle_sandboxes_hold_quota_in_the_runspecs_queue() -> None:
    async with cluster() as k8s:
        runspec_body, run = sandboxed(k8s, replicas=2)
        fake = Kubelet(k8s, TESTS, LEDGER)
        async with stand_ins(k8s, fake, sandbox_queueing="admit", default_queue="team-a") as (
            queued,
            _,
        ):
            await queues(k8s, ("team-a", 4))
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "warm", parallelism=1))
            done = await until(lambda: finished(k8s, "warm"), "the run to finish")
            (template,) = listed(k8s, sandboxpools.GROUP, "sandboxtemplates")
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 3
        labels = template["spec"]["podTemplate"]["metadata"]["labels"]
        assert labels[kueue.QUEUE_LABEL] == "team-a"
        pool = template["metadata"]["name"]
        pooled = [a for a in queued.admissions if a.pod.startswith(f"{pool}-")]
        assert len(pooled) >= 2  # the pool's sandboxes were admitted before any cell took one


async def test_a_warm_pool_run_cannot_name_a_queue_of_its_own() -> None:
    async with cluster() as k8s:
        runspec_body, run = sandboxed(k8s, replicas=1)
        async with stand_ins(k8s, Kubelet(k8s, TESTS, LEDGER), sandbox_queueing="admit"):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "own-queue", queue="team-b"))
            done = await until(lambda: finished(k8s, "own-queue"), "the run to end")
        assert done["phase"] == "Failed", done
        failed = condition(done, "Failed")
        assert failed["reason"] == "InvalidSpec"
        assert "cannot queue a warm pool's cells" in failed["message"]


# -- the cap on warm sandboxes -------------------------------------------------------------


async def test_a_namespace_holds_no_more_warm_sandboxes_than_the_cap() -> None:
    """Two RunSpecs of two warm sandboxes each under a cap of three: the second pool gets
    one (an Event says so; its other cells start cold); a RunSpec asking for four is refused
    before it runs anything."""

    def outcome(cell: Cell) -> str:
        return "hold" if cell.name.startswith("first-") else "passed"

    async with cluster() as k8s:
        # Kept up after their runs: the sizes are read once the second run ended.
        first_spec, run = sandboxed(k8s, replicas=2, keepSeconds=600)
        second_spec = first_spec | {"metadata": {"name": "second", "namespace": "default"}}
        greedy = sandboxed(k8s, replicas=4)[0]
        greedy["metadata"] = {"name": "greedy", "namespace": "default"}
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=outcome)
        async with stand_ins(k8s, fake, max_warm_replicas=3):
            await k8s.apply(first_spec)
            await k8s.apply(named_run(run, "first", repeats=1, parallelism=1))
            await until(lambda: fake.held, "the first run's cell to hold its pool up")
            await k8s.apply(second_spec)
            second = named_run(run, "second", runSpecRef={"name": "second"}, parallelism=3)
            await k8s.apply(second)
            done = await until(lambda: finished(k8s, "second"), "the second run")
            sizes = {
                p["metadata"]["name"].split("-g")[0]: p["spec"]["replicas"]
                for p in listed(k8s, sandboxpools.GROUP, "sandboxwarmpools")
            }
            await k8s.apply(greedy)
            await k8s.apply(named_run(run, "greedy", runSpecRef={"name": "greedy"}))
            refused = await until(lambda: finished(k8s, "greedy"), "the greedy run to end")
            for name in list(fake.held):
                await fake.release(name)
        assert sizes == {"triage": 2, "second": 1}, sizes  # was: 2 and 2, over the cap
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 3
        events = listed(k8s, "", "events")
        capped = [e for e in events if e["reason"] == "WarmPoolCapped"]
        assert len(capped) == 1, capped
        assert capped[0]["involvedObject"]["name"] == "second"
        assert "keeps 1 of the 2 sandboxes" in capped[0]["message"]
        assert refused["phase"] == "Failed", refused
        assert "spec.isolation.warmPool.replicas: 4 is more than" in str(refused["conditions"])
