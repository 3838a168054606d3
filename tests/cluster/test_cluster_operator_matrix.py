"""An agent matrix on the operator, against the API emulator: a RunSpec declares named
``targets``, an EvaluationRun's ``agents`` picks two; each (test, repeat) gets one cell per
agent running that agent's pinned image, and the status shows the agents side by side with the
paired test between them."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from agent_health.cluster.cells import manifests
from agent_health.engine.statistics import stats
from support.operator_support import (
    PINNED,
    Cell,
    Kubelet,
    cluster,
    finished,
    kubelet,
    listing,
    until,
)

pytestmark = pytest.mark.slow
LEDGER = "configmap://default/matrix-ledger-{run}"
TESTS = listing(*((f"suite/t.py::test {n}", []) for n in range(4)))
BROKEN = {"suite/t.py::test 0", "suite/t.py::test 1"}  # what the faulty agent fails


def matrix_spec(k8s: Any, runspec: dict[str, Any]) -> dict[str, Any]:
    """The example RunSpec with two named targets: the agent and a faulty build of it."""
    target = runspec["spec"]["target"]
    faulty = target | {"name": "faulty", "image": target["image"].replace(":0.1.0", ":faulty")}
    runspec["spec"]["targets"] = [target | {"name": "good"}, faulty]
    return runspec


def named(run: dict[str, Any], name: str, **spec: Any) -> dict[str, Any]:
    base = {k: v for k, v in run["spec"].items() if k != "selection"}
    body = base | {"repeats": 1, "parallelism": 4, "retry": {"infraRetries": 0}} | spec
    return run | {"metadata": {"name": name, "namespace": "default"}, "spec": body}


async def test_two_agents_get_a_cell_each_and_a_side_by_side_status() -> None:
    pods: dict[str, dict[str, Any]] = {}

    async with cluster() as k8s:

        def outcome(cell: Cell) -> str:
            pod = k8s.emulator.read("pods", "default", cell.name)
            pods[cell.name] = pod
            agent = pod["metadata"]["labels"][manifests.LABEL_AGENT]
            return "failed" if agent == "faulty" and cell.test_id in BROKEN else "passed"

        runspec, run = k8s.example(ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS, LEDGER, outcome=outcome)), k8s.operator():
            await k8s.apply(matrix_spec(k8s, runspec))
            await k8s.apply(named(run, "side", agents=["good", "faulty"]))
            status = await until(lambda: finished(k8s, "side"), "the run to end")
    assert status["phase"] == "Succeeded", status
    assert status["counts"]["total"] == 8
    assert (status["counts"]["passed"], status["counts"]["failed"]) == (6, 2)
    # one cell per (test, agent): each runs its agent's image, pinned, and knows its agent
    assert len(pods) == 8
    images: dict[str, set[str]] = {"good": set(), "faulty": set()}
    for pod in pods.values():
        agent = pod["metadata"]["labels"][manifests.LABEL_AGENT]
        target = next(c for c in pod["spec"]["initContainers"] if c["name"] == "target")
        images[agent].add(target["image"])
        controller = next(c for c in pod["spec"]["containers"] if c["name"] == "controller")
        assert {"name": "AGENT_HEALTH_AGENT", "value": agent} in controller["env"]
        # the gateway seals the agent into the cell-meta: grade and --replay know whose cell
        containers = [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]
        gateway = next(c for c in containers if c["name"] == "gateway")
        assert gateway["args"][gateway["args"].index("--agent") + 1] == agent
    assert len(images["good"]) == len(images["faulty"]) == 1
    (good_image,), (faulty_image,) = images["good"], images["faulty"]
    assert "triage-agent@sha256:" in good_image
    assert "triage-agent@sha256:" in faulty_image
    assert good_image != faulty_image  # each tag resolved to its own digest
    assert all(PINNED not in i for i in (good_image, faulty_image))
    pod = next(iter(pods.values()))
    pod = {k: v for k, v in pod.items() if k != "status"}
    assert kubernetes_validate.validate(pod, "1.31", strict=True) == "1.31"
    # the status: each agent's tally, each test per agent, and the pair compared
    agents = {a["name"]: a for a in status["agents"]}
    assert agents["good"]["passRate"] == 1.0
    assert agents["faulty"]["passRate"] == 0.5
    (pair,) = status["pairs"]
    assert (pair["base"], pair["new"], pair["tests"]) == ("good", "faulty", 4)
    assert (pair["worse"], pair["better"]) == (2, 0)
    assert pair["passRateDelta"] == -0.5
    assert pair["pValue"] == 0.5  # exact McNemar: 2 changed, both for the worse
    assert pair["significant"] is False
    # and the intervals beside them: Wilson per agent, Newcombe's for the paired change
    good_low, good_high = stats.wilson(4, 4)
    assert agents["good"]["passRateInterval"] == pytest.approx({"low": good_low, "high": 1.0})
    assert good_high == 1.0
    faulty_low, faulty_high = stats.wilson(2, 4)
    assert agents["faulty"]["passRateInterval"] == pytest.approx(
        {"low": faulty_low, "high": faulty_high}, abs=1e-6
    )
    low, high = stats.newcombe_paired(2, 2, 0, 0)  # 2 passed with both, 2 only with good
    assert pair["passRateDeltaInterval"] == pytest.approx({"low": low, "high": high}, abs=1e-6)
    assert low < -0.5 < high
    broken = next(t for t in status["tests"] if t["id"] == "suite/t.py::test 0")
    sides = {a["name"]: a for a in broken["agents"]}
    assert (sides["good"]["passed"], sides["faulty"]["failed"]) == (1, 1)


async def test_an_agent_the_runspec_does_not_declare_fails_the_run() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        async with kubelet(Kubelet(k8s, TESTS, LEDGER)), k8s.operator():
            await k8s.apply(matrix_spec(k8s, runspec))
            await k8s.apply(named(run, "typo", agents=["good", "faulti"]))
            status = await until(lambda: finished(k8s, "typo"), "the run to end")
            cells = k8s.pods()
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec"
    assert "spec.agents names 'faulti'" in failed["message"]
    assert "declared: good, faulty" in failed["message"]
    assert cells == []


async def test_a_run_without_agents_keeps_its_cells_as_they_were() -> None:
    async with cluster() as k8s:
        runspec, run = k8s.example(ledger=LEDGER)
        fake = Kubelet(k8s, TESTS[:1], LEDGER)
        async with kubelet(fake), k8s.operator():
            await k8s.apply(matrix_spec(k8s, runspec))
            await k8s.apply(named(run, "plain"))
            status = await until(lambda: finished(k8s, "plain"), "the run to end")
            (pod,) = k8s.pods()
    assert status["counts"]["passed"] == 1
    assert "agents" not in status or status["agents"] == []
    assert manifests.LABEL_AGENT not in pod["metadata"]["labels"]
    assert pod["metadata"]["name"] == manifests.cell_name("plain", "suite/t.py::test 0", 0)
    target = next(c for c in pod["spec"]["initContainers"] if c["name"] == "target")
    assert ":faulty" not in target["image"]
