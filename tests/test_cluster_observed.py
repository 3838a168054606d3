"""Reading an ended cell's pod: which deaths blame the agent, which the infrastructure."""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.cluster.cells import observed


def pod(*sidecars: dict[str, Any], phase: str = "Succeeded") -> dict[str, Any]:
    controller = {"name": "controller", "state": {"terminated": {"exitCode": 0}}}
    return {
        "kind": "Pod",
        "status": {
            "phase": phase,
            "initContainerStatuses": list(sidecars),
            "containerStatuses": [controller],
        },
    }


def sidecar(name: str, *, state: str | None = None, last: str | None = None,
            restarts: int = 0, code: int = 137) -> dict[str, Any]:  # fmt: skip
    found: dict[str, Any] = {"name": name, "restartCount": restarts}
    found["state"] = {"terminated": {"reason": state, "exitCode": 143}} if state else {}
    found["lastState"] = {"terminated": {"reason": last, "exitCode": code}} if last else {}
    return found


@pytest.mark.parametrize(
    ("target", "cause"),
    [
        (sidecar("target", last="OOMKilled", restarts=1), "target-oom"),
        (sidecar("target", state="OOMKilled"), "target-oom"),  # killed as the pod ended
        (sidecar("target", last="Error", restarts=1, code=1), "target-crash"),
        (sidecar("target", last="Completed", restarts=1, code=0), "target-crash"),
        (sidecar("target", restarts=2), "target-crash"),  # lastState already rotated out
    ],
)
def test_a_target_that_died_during_the_cell_is_the_agents_failure(
    target: dict[str, Any], cause: str
) -> None:
    found = observed.infra_failure(pod(sidecar("gateway"), target))
    assert found is not None
    assert found[0] == cause


def test_a_target_stopped_when_the_controller_finished_is_no_failure() -> None:
    stopped = sidecar("target", state="Error")  # SIGTERM at the end of the pod: exit 143
    assert observed.infra_failure(pod(sidecar("gateway", state="Completed"), stopped)) is None


def test_a_gateway_restart_and_a_peers_oom_are_the_infrastructures() -> None:
    restarted = observed.infra_failure(pod(sidecar("gateway", last="OOMKilled", restarts=1)))
    assert restarted is not None
    assert restarted[0] == "gateway-restart"
    assert "OOMKilled" in restarted[1]
    peer = observed.infra_failure(pod(sidecar("peer-logs", last="OOMKilled", restarts=1)))
    assert peer == ("sidecar-oom", "sidecar peer-logs was OOMKilled")
