"""Cells queued by Kueue: two teams' runs share a cohort's quota fairly, a preempted cell runs
again exactly once, a cell Kueue holds never times out, discovery waits in the queue too, and a
run without a queue is left as it was.

The operator runs for real (kopf) against the emulator; Kueue is the stand-in of
``tests/support/node/kueue.py`` (its pod webhook, quota, fair sharing and preemption by deletion),
and the test plays the kubelet, which runs a pod only once its scheduling gates are gone.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_health.cluster import errors
from agent_health.cluster.api import evaluationrun, runspec
from agent_health.cluster.cells import cellpod, discovery, kueue, manifests
from support.node import kueue as kueue_node
from support.node import kueueobjects as kueue_objects
from support.operator_support import (
    EXAMPLE,
    Cell,
    Cluster,
    Kubelet,
    cluster,
    condition,
    finished,
    kubelet,
    listing,
    pod_creations,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/triage-ledger-{run}"
TESTS = listing(("suite/t.py::first", []), ("suite/t.py::second", []), ("suite/t.py::third", []))
CHART_EXAMPLE = Path(__file__).resolve().parents[2] / "charts/agent-health/examples/kueue.yaml"
KUEUE = f"/apis/{kueue_node.GROUP}/{kueue_node.VERSION}"
PINNED = "@sha256:" + "d" * 64
SETTINGS = manifests.Settings(
    controller_image=f"ghcr.io/agent-health/controller{PINNED}",
    gateway_image=f"ghcr.io/agent-health/gateway{PINNED}",
)


def named_run(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    body = {"runSpecRef": {"name": "triage"}, "repeats": 2, "parallelism": 6} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


async def create(k8s: Cluster, path: str, body: dict[str, Any]) -> None:
    answer = await k8s.client.post(path, json=body)
    assert answer.status_code == 201, answer.text


async def queues(k8s: Cluster, *teams: tuple[str, int], flavor: bool = True) -> None:
    """A ClusterQueue and a LocalQueue (in ``default``) per team, all in cohort ``evals``."""
    if flavor:
        await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
    for team, pods in teams:
        cq = kueue_objects.cluster_queue(team, cohort="evals", pods=pods)
        await create(k8s, f"{KUEUE}/clusterqueues", cq)
        local = kueue_objects.local_queue(team, "default", team)
        await create(k8s, f"{KUEUE}/namespaces/default/localqueues", local)


def counts(k8s: Cluster, name: str) -> dict[str, int]:
    return dict((k8s.run(name).get("status") or {}).get("counts") or {})


# -- manifests ------------------------------------------------------------------------------


def _models(
    run_queue: str | None, spec_queue: str | None
) -> tuple[evaluationrun.EvaluationRun, runspec.RunSpec]:
    spec_body, run_body = (copy.deepcopy(d) for d in yaml.safe_load_all(EXAMPLE.read_text()))
    spec_body["metadata"] |= {"uid": "4f1c2b7e-0000-4000-8000-000000000001", "generation": 1}
    run_body["metadata"] |= {"uid": "9a8b7c6d-0000-4000-8000-000000000002"}
    if spec_queue is not None:
        spec_body["spec"]["queue"] = spec_queue
    if run_queue is not None:
        run_body["spec"]["queue"] = run_queue
    return (
        evaluationrun.EvaluationRun.model_validate(run_body),
        runspec.RunSpec.model_validate(spec_body),
    )


@pytest.mark.parametrize(
    ("run_queue", "spec_queue", "default", "cell_queue", "discovery_queue"),
    [
        (None, None, None, None, None),
        ("team-a", None, None, "team-a", None),
        (None, "team-b", None, "team-b", "team-b"),
        ("team-a", "team-b", "shared", "team-a", "team-b"),
        (None, None, "shared", "shared", "shared"),
    ],
)
def test_the_queue_of_a_cell_is_its_runs_then_its_runspecs_then_the_operators(
    run_queue: str | None,
    spec_queue: str | None,
    default: str | None,
    cell_queue: str | None,
    discovery_queue: str | None,
) -> None:
    run, spec = _models(run_queue, spec_queue)
    settings = manifests.Settings(
        controller_image=SETTINGS.controller_image,
        gateway_image=SETTINGS.gateway_image,
        default_queue=default,
    )
    digests = {image: "sha256:" + "e" * 64 for image in spec.images()}
    pod = cellpod.cell(
        run, spec, test_id="suite/t.py::first", repeat=0, digests=digests, settings=settings
    )
    found = discovery.discovery_pod(spec, digests=digests, settings=settings)
    for body, wanted in ((pod, cell_queue), (found, discovery_queue)):
        labels = body["metadata"]["labels"]
        assert labels.get(kueue.QUEUE_LABEL) == wanted
        # The operator only labels: Kueue's webhook gates (a namespace it does not manage
        # runs the pod at once instead of leaving it gated for ever).
        assert "schedulingGates" not in body["spec"]
        assert kueue.MANAGED_LABEL not in labels


def _sandboxed(spec: runspec.RunSpec, **isolation: Any) -> runspec.RunSpec:
    chosen = runspec.Isolation.model_validate({"mode": "agentSandbox", **isolation})
    return spec.model_copy(update={"spec": spec.spec.model_copy(update={"isolation": chosen})})


def test_sandboxed_cells_are_queued_only_when_the_operator_admits_them_and_refused_else() -> None:
    run, spec = _models(None, None)
    sandboxed = _sandboxed(spec)
    assert kueue.queue_of(sandboxed, run, "shared") is None  # refuse: never queued...
    assert kueue.queue_of(sandboxed, None, "shared") == "shared"  # its discovery is a pod
    kueue.refuse(sandboxed, run, None)
    with pytest.raises(errors.SpecError, match=r"queues every run in LocalQueue 'shared'"):
        kueue.refuse(sandboxed, run, "shared")  # ...so a run the default applies to is refused
    queued, _ = _models("team-a", None)
    with pytest.raises(errors.SpecError, match=r"spec\.queue 'team-a' cannot queue cells"):
        kueue.refuse(sandboxed, queued, None)
    # admit: the Sandbox's pod waits in the queue a plain cell would
    assert kueue.queue_of(sandboxed, run, "shared", "admit") == "shared"
    assert kueue.queue_of(sandboxed, queued, "shared", "admit") == "team-a"
    kueue.refuse(sandboxed, queued, "shared", "admit")
    # a warm pool's sandboxes serve every run: its RunSpec's queue (else the default) only
    warm = _sandboxed(spec, warmPool={"replicas": 2})
    assert kueue.queue_of(warm, queued, "shared", "admit") == "shared"
    kueue.refuse(warm, run, "shared", "admit")
    with pytest.raises(errors.SpecError, match=r"cannot queue a warm pool's cells"):
        kueue.refuse(warm, queued, "shared", "admit")


async def test_a_run_of_sandboxed_cells_naming_a_queue_fails_saying_why() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(isolation="agentSandbox", ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS[:1], LEDGER)), k8s.operator():
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "boxed", queue="team-a"))
            done = await until(lambda: finished(k8s, "boxed"), "the run to fail")
        assert done["phase"] == "Failed"
        failed = condition(done, "Failed")
        assert failed["reason"] == "InvalidSpec"
        assert "isolation.mode agentSandbox" in failed["message"]


def test_a_queue_name_must_be_a_local_queue_name() -> None:
    with pytest.raises(ValueError, match="queue"):
        _models("Team_A", None)


# -- on the emulator ------------------------------------------------------------------------


async def test_two_teams_share_their_cohort_fairly_and_a_run_shows_its_queued_cells() -> None:
    """Team A's run is created first; neither team's cell borrows while the other waits."""
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        async with (
            kueue_node.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS, LEDGER)) as fake,
            k8s.operator(),
        ):
            await queues(k8s, ("team-a", 1), ("team-b", 1), flavor=False)
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "team-a-nightly", queue="team-a"))
            await k8s.apply(named_run(run, "team-b-nightly", queue="team-b"))
            # No ResourceFlavor yet: both ClusterQueues are inactive, every cell waits.
            for name in ("team-a-nightly", "team-b-nightly"):
                await until(lambda n=name: counts(k8s, n).get("queued") == 6, f"{name} queued")
                assert counts(k8s, name)["pending"] == 0
                assert counts(k8s, name)["running"] == 0
            assert [n for n in fake.started if "-discover-" not in n] == []
            pod = next(p for p in k8s.pods() if p["metadata"]["name"].startswith("team-a"))
            assert pod["metadata"]["labels"][kueue.QUEUE_LABEL] == "team-a"
            assert pod["metadata"]["labels"][kueue.MANAGED_LABEL] == "true"
            assert kueue.gated(pod)

            await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
            for name in ("team-a-nightly", "team-b-nightly"):
                done = await until(lambda n=name: finished(k8s, n), f"{name} to finish")
                assert done["phase"] == "Succeeded", done
                assert done["counts"]["passed"] == 6
                assert done["counts"]["queued"] == 0

        order = [a.cluster_queue for a in stand_in.admissions]
        print("admission order:", " ".join(order))
        assert sorted(order) == ["team-a"] * 6 + ["team-b"] * 6
        assert set(order[:2]) == {"team-a", "team-b"}  # one each, though A asked first
        for admitted in stand_in.admissions:
            other = "team-b" if admitted.cluster_queue == "team-a" else "team-a"
            if admitted.waiting.get(other):
                # Fair: a team borrows the other's quota only while the other has no work.
                assert admitted.usage[admitted.cluster_queue]["pods"] <= 1, stand_in.admissions
        assert stand_in.preempted == []
        assert sorted(pod_creations(k8s.emulator).values()) == [1] * 12


async def test_a_preempted_cell_runs_again_exactly_once_and_is_never_errored() -> None:
    """Team A borrows team B's quota; B's run reclaims it: Kueue preempts two of A's cells
    (condition TerminationTarget, then deletion). Each runs again once, as its next attempt,
    and passes as it would have — though A's run allows no infrastructure retry at all."""

    def outcome(cell: Cell) -> str:
        return "hold" if cell.run == "team-a-nightly" else "passed"

    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS[:2], LEDGER, outcome=outcome)
        async with (
            kueue_node.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(fake),
            k8s.operator(),
        ):
            await queues(k8s, ("team-a", 2), ("team-b", 2))
            await k8s.apply(runspec_body)
            await k8s.apply(
                named_run(run, "team-a-nightly", queue="team-a", parallelism=4,
                          retry={"infraRetries": 0})
            )  # fmt: skip
            await until(lambda: len(fake.held) == 4, "team A's cells to run, two borrowed")
            await k8s.apply(named_run(run, "team-b-nightly", queue="team-b", parallelism=4))
            b_done = await until(lambda: finished(k8s, "team-b-nightly"), "team B's run")
            assert b_done["counts"]["passed"] == 4, b_done
            assert len(stand_in.preempted) == 2, stand_in.preempted
            victims = [p.split("/")[1] for p in stand_in.preempted]
            assert all(v.startswith("team-a-nightly") for v in victims)
            # Planned again, they waited in the queue; now B is done they borrow its quota.
            await until(lambda: len(fake.held) == 4, "the preempted cells to run again")
            for name in list(fake.held):
                await fake.release(name)
            done = await until(lambda: finished(k8s, "team-a-nightly"), "team A's run")

        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 4
        assert done["counts"]["errored"] == 0
        created = pod_creations(k8s.emulator)
        for victim in victims:
            assert created[victim] == 2, created  # once preempted, once again: no duplicate
            pod = k8s.emulator.read("pods", "default", victim)
            annotations = pod["metadata"]["annotations"]
            assert annotations["agenthealth.dev/attempt"] == "1"
            assert annotations["agenthealth.dev/preemptions"] == "1"
        others = [n for n in created if n.startswith("team-a") and n not in victims]
        assert [created[n] for n in others] == [1, 1]
        # Every one of A's tests passed both repeats, the preempted ones included.
        assert {t["id"]: t["passed"] for t in done["tests"]} == {
            "suite/t.py::first": 2,
            "suite/t.py::second": 2,
        }
        reasons = [
            e["reason"]
            for e in k8s.emulator.store.list(
                k8s.emulator.store.kinds[("", "events")], "default", lambda _l: True
            )
            if e["involvedObject"]["name"] == "team-a-nightly"
        ]
        assert reasons.count("CellPreempted") == 2


async def test_a_cell_kueue_holds_never_times_out_and_its_deadline_starts_at_admission() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS[:1], LEDGER, outcome=lambda _cell: "hold")
        async with (
            kueue_node.running(k8s.emulator, k8s.client),
            kubelet(fake),
            k8s.operator(startup_seconds=1, deadline_grace=0.0),
        ):
            await queues(k8s, ("team-a", 1), flavor=False)
            await k8s.apply(runspec_body)
            body = named_run(
                run, "held", queue="team-a", repeats=1, timeoutSeconds=1,
                retry={"infraRetries": 0},
            )  # fmt: skip
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


async def test_a_restarted_operator_takes_over_queued_cells_and_runs_each_once() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        async with (
            kueue_node.running(k8s.emulator, k8s.client),
            kubelet(Kubelet(k8s, TESTS, LEDGER)),
        ):
            await queues(k8s, ("team-a", 2), flavor=False)
            async with k8s.operator():
                await k8s.apply(runspec_body)
                await k8s.apply(named_run(run, "kept", queue="team-a", parallelism=3))
                await until(lambda: counts(k8s, "kept").get("queued") == 3, "three queued")
            async with k8s.operator():  # a new operator finds three gated cells
                await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
                done = await until(lambda: finished(k8s, "kept"), "the run")
        assert done["phase"] == "Succeeded", done
        assert done["counts"]["passed"] == 6
        assert sorted(pod_creations(k8s.emulator).values()) == [1] * 6


async def test_a_discovery_pod_waits_in_the_runspecs_queue() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        runspec_body["spec"]["queue"] = "team-a"
        async with (
            kueue_node.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS[:1], LEDGER)),
            k8s.operator(),
        ):
            await queues(k8s, ("team-a", 1), flavor=False)
            await k8s.apply(runspec_body)

            def queued() -> bool:
                found = (k8s.runspec("triage").get("status") or {}).get("conditions") or []
                return any(c["type"] == "Discovered" and c["reason"] == "Queued" for c in found)

            await until(queued, "discovery to wait in the queue")
            (pod,) = k8s.pods("discovery")
            assert kueue.gated(pod)
            await create(k8s, f"{KUEUE}/resourceflavors", kueue_objects.resource_flavor())
            await k8s.apply(named_run(run, "after", repeats=1))  # queued by its RunSpec
            done = await until(lambda: finished(k8s, "after"), "the run")
        assert done["counts"]["passed"] == 1, done
        assert condition(k8s.runspec("triage")["status"], "Discovered")["status"] == "True"
        # The RunSpec's queue holds its runs' cells too.
        assert [a.pod.split("-discover-")[0] for a in stand_in.admissions][:1] == ["triage"]
        assert len(stand_in.admissions) == 2


async def test_the_charts_example_kueue_objects_queue_a_run() -> None:
    """``charts/agent-health/examples/kueue.yaml`` as a cluster admin applies it (team A's
    LocalQueue in this test's namespace): a run naming the queue ``evals`` is admitted by
    team A's ClusterQueue."""
    objects = list(yaml.safe_load_all((CHART_EXAMPLE).read_text()))
    assert {o["kind"] for o in objects} == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        async with (
            kueue_node.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS[:1], LEDGER)),
            k8s.operator(),
        ):
            for body in objects:
                plural = body["kind"].lower() + "s"
                if body["kind"] == "LocalQueue":
                    if body["spec"]["clusterQueue"] != "team-a":
                        continue
                    body["metadata"]["namespace"] = "default"
                    await create(k8s, f"{KUEUE}/namespaces/default/{plural}", body)
                else:
                    await create(k8s, f"{KUEUE}/{plural}", body)
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "example", queue="evals"))
            done = await until(lambda: finished(k8s, "example"), "the run")
        assert done["counts"]["passed"] == 2, done
        assert [a.cluster_queue for a in stand_in.admissions] == ["team-a", "team-a"]


async def test_a_run_without_a_queue_is_not_queued_even_where_kueue_runs() -> None:
    async with cluster() as k8s:
        runspec_body, run = k8s.example(ledger=LEDGER)
        async with (
            kueue_node.running(k8s.emulator, k8s.client) as stand_in,
            kubelet(Kubelet(k8s, TESTS, LEDGER)),
            k8s.operator(),
        ):
            await queues(k8s, ("team-a", 1))
            await k8s.apply(runspec_body)
            await k8s.apply(named_run(run, "plain", parallelism=3))
            done = await until(lambda: finished(k8s, "plain"), "the run")
        assert done["counts"]["passed"] == 6
        assert stand_in.admissions == []
        for pod in k8s.pods():
            assert kueue.QUEUE_LABEL not in pod["metadata"]["labels"]
            assert not pod["spec"].get("schedulingGates")
