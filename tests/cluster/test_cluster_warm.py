"""Warm cells: a RunSpec with ``isolation.warmPool`` runs each cell in a pooled sandbox.

The operator runs for real (kopf) against the emulator; Agent Sandbox is the stand-in of
``tests/support/node/sandboxpools.py`` (templates, warm pools replenished, claims bound under the
optimistic lock, generated Secrets per sandbox, cold starts from an empty pool), and the test
plays the kubelet: a pooled pod is ready at once, waits for the assignment the operator writes
on it, and records its cell with the key it unwraps as its gateway does.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_health.cluster.api import runspec
from support.node import sandboxpools
from support.operator_support import Cluster, Kubelet, cluster, finished, kubelet, listing, until

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/t.py::first", []), ("suite/t.py::second", []), ("suite/t.py::third", []))
EXT = f"/apis/{sandboxpools.GROUP}/{sandboxpools.VERSION}/namespaces/default"


def warm_example(k8s: Cluster, replicas: int) -> list[dict[str, Any]]:
    runspec_body, run = k8s.example(isolation="agentSandbox", ledger=LEDGER)
    runspec_body["spec"]["isolation"]["warmPool"] = {"replicas": replicas, "keepSeconds": 0}
    return [runspec_body, run]


@contextlib.asynccontextmanager
async def warm_cluster(
    k8s: Cluster,
) -> AsyncIterator[tuple[sandboxpools.SandboxPools, Kubelet]]:
    """Agent Sandbox's stand-ins, the test's kubelet and an operator watching claims."""
    async with (
        sandboxpools.running(k8s.emulator, k8s.client) as stand_in,
        kubelet(Kubelet(k8s, TESTS, LEDGER)) as fake,
        k8s.operator(sandboxes=True, warm_pools=True),
    ):
        yield stand_in, fake


def named_run(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    body = {"runSpecRef": {"name": "triage"}, "repeats": 2, "parallelism": 2} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


def pools(k8s: Cluster) -> list[dict[str, Any]]:
    store = k8s.emulator.store
    return store.list(
        store.kinds[(sandboxpools.GROUP, "sandboxwarmpools")], "default", lambda _l: True
    )


def templates(k8s: Cluster) -> list[dict[str, Any]]:
    store = k8s.emulator.store
    return store.list(
        store.kinds[(sandboxpools.GROUP, "sandboxtemplates")], "default", lambda _l: True
    )


async def test_a_warm_pool_run_gives_every_cell_a_sandbox_of_its_own() -> None:
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=3)
        async with warm_cluster(k8s) as (stand_in, fake):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "warm-1"))
            done = await until(lambda: finished(k8s, "warm-1"), "the warm run to finish")
            assert done["phase"] == "Succeeded", done
            assert done["counts"]["passed"] == 6
            assert done["counts"]["warmStarts"] + done["counts"]["coldStarts"] == 6
            # Scaled to zero once no run needs it; its template stays for the next run.
            await until(lambda: pools(k8s)[0]["spec"]["replicas"] == 0, "the pool scaled down")

        # One cell per sandbox: six pods, each handed one cell, each cell handed once.
        handed = fake.assignments
        assert len(handed) == 6
        assert len({a.cell for a in handed.values()}) == 6
        claimed = [b for b in stand_in.bindings if b.claim.startswith("warm-1-")]
        assert sorted(b.claim for b in claimed) == sorted(a.cell for a in handed.values())
        assert {b.sandbox for b in claimed} == set(handed)
        warm = [b for b in claimed if b.launch == "warm"]
        assert len(warm) == done["counts"]["warmStarts"]
        assert warm, "a pool of three ready sandboxes served no cell warm"
        # Each sandbox's tokens are its own: no two pods share a controller token.
        (template,) = templates(k8s)
        (generated,) = template["spec"]["generatedSecrets"]
        logical = generated["name"]  # unpredictable: made with the template
        assert logical.startswith("cell-keys-")
        assert len(logical) == len("cell-keys-") + 16
        secrets = [k8s.emulator.read("secrets", "default", f"{pod}-{logical}") for pod in handed]
        assert len({s["data"]["controller"] for s in secrets}) == 6
        assert template["metadata"]["name"].startswith("triage-g1-")
        pod_spec = template["spec"]["podTemplate"]["spec"]
        assert "activeDeadlineSeconds" not in pod_spec
        target = next(c for c in pod_spec["initContainers"] if c["name"] == "target")
        assert "@sha256:" in target["image"]  # pinned, as every cell's
        # The target gets no token: nothing of the sandbox's generated Secret.
        assert logical not in json.dumps(target.get("env") or [])
        gateway = next(c for c in pod_spec["initContainers"] if c["name"] == "gateway")
        assert logical in json.dumps(gateway["env"])


async def test_an_empty_pool_falls_back_to_cold_starts_counted() -> None:
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=1)
        async with warm_cluster(k8s) as (stand_in, _):
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "cold-1", repeats=1, parallelism=3))
            done = await until(lambda: finished(k8s, "cold-1"), "the run to finish")
            assert done["phase"] == "Succeeded", done
            assert done["counts"]["passed"] == 3
        launches = [b.launch for b in stand_in.bindings if b.claim.startswith("cold-1-")]
        assert len(launches) == 3
        assert "cold" in launches  # three claims at once on a pool of one
        assert done["counts"]["coldStarts"] == launches.count("cold")
        assert done["counts"]["warmStarts"] == launches.count("warm")


def test_a_warm_pool_needs_agent_sandbox_isolation() -> None:
    with pytest.raises(ValueError, match="warmPool is only allowed with mode agentSandbox"):
        runspec.Isolation.model_validate({"mode": "pod", "warmPool": {"replicas": 2}})


async def test_a_restarted_operator_takes_over_warm_cells_and_hands_each_sandbox_one_cell() -> None:
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=3)
        fake = Kubelet(k8s, TESTS, LEDGER, outcome=lambda _cell: "hold")
        async with sandboxpools.running(k8s.emulator, k8s.client), kubelet(fake):
            async with k8s.operator(sandboxes=True, warm_pools=True):
                await k8s.apply(runspec_body)
                await k8s.apply(named_run(run, "kept", repeats=1, parallelism=3))
                await until(lambda: len(fake.held) == 3, "three cells handed and running")
            # A new operator finds three claims, bound and handed; it hands them nothing new.
            async with k8s.operator(sandboxes=True, warm_pools=True):
                for name in list(fake.held):
                    await fake.release(name)
                done = await until(lambda: finished(k8s, "kept"), "the run")
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 3
        handed = list(fake.assignments.values())
        assert len(handed) == 3
        assert len({a.cell for a in handed}) == 3
        # A warm cell's tokens are its sandbox's: the new operator made no Secret of its own.
        store = k8s.emulator.store
        secrets = store.list(store.kinds[("", "secrets")], "default", lambda _l: True)
        assert not [s for s in secrets if s["metadata"]["name"].endswith("-tokens")]


async def test_a_pool_an_operator_stopped_before_scaling_down_is_scaled_down_by_the_next() -> None:
    keep = 10  # seconds: the first operator stops well within them
    async with cluster() as k8s:
        runspec_body, run = warm_example(k8s, replicas=2)
        runspec_body["spec"]["isolation"]["warmPool"]["keepSeconds"] = keep
        async with (
            sandboxpools.running(k8s.emulator, k8s.client),
            kubelet(Kubelet(k8s, TESTS, LEDGER)),
        ):
            async with k8s.operator(sandboxes=True, warm_pools=True):
                await k8s.apply(runspec_body)
                await k8s.apply(named_run(run, "short", repeats=1, parallelism=3))
                done = await until(lambda: finished(k8s, "short"), "the run")
            assert done["phase"] == "Succeeded", done
            (pool,) = pools(k8s)
            assert pool["spec"]["replicas"] == 2  # its keepSeconds had not passed
            assert pool["metadata"]["annotations"]["agenthealth.dev/keep-seconds"] == str(keep)
            # No run of it now: the next operator scales it down once keepSeconds passed.
            async with k8s.operator(sandboxes=True, warm_pools=True):
                await until(lambda: pools(k8s)[0]["spec"]["replicas"] == 0, "the pool down")
