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


def _waiting(reason: str, message: str) -> dict[str, Any]:
    return {
        "name": "target",
        "image": "kind-registry:5000/team/agent@sha256:" + "ab" * 32,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": message}},
    }


@pytest.mark.parametrize(
    ("reason", "message", "hint"),
    [
        ("ErrImagePull", "pulling ...: reading manifest sha256:ab in team/agent: manifest unknown",
         "push the image again"),
        ("ImagePullBackOff", 'failed to resolve reference "x": not found', "push the image again"),
        ("ErrImageNeverPull", "image is not present with pull policy of Never", "kind load"),
        ("InvalidImageName", "couldn't parse image reference", "fix the image reference"),
    ],
)  # fmt: skip
def test_an_image_no_pull_will_bring_dooms_the_cell_at_once_naming_the_image_and_the_fix(
    reason: str, message: str, hint: str
) -> None:
    found = observed.doomed(pod(sidecar("gateway"), _waiting(reason, message), phase="Pending"))
    assert found is not None
    cause, text = found
    assert cause == "image-pull"
    assert "kind-registry:5000/team/agent@sha256:" in text
    assert hint in text


def test_a_pull_that_may_heal_waits_its_grace_and_still_names_the_image() -> None:
    waiting = _waiting("ImagePullBackOff", "dial tcp 10.0.0.1:5000: connection refused")
    body = pod(sidecar("gateway"), waiting, phase="Pending")
    assert observed.doomed(body) is None
    stuck = observed.stuck(body)
    assert stuck is not None
    assert "kind-registry:5000/team/agent@sha256:" in stuck[1]
    assert "pull secrets" in stuck[1]


@pytest.mark.parametrize(
    ("reason", "message", "hint"),
    [
        ("StartError", 'exec: "no-such-agent": executable file not found in $PATH',
         "check its entrypoint or command"),
        ("Error", "Traceback ...\nOSError: [Errno 30] Read-only file system: '/state.json'",
         "write under /tmp"),
    ],
)  # fmt: skip
def test_a_target_that_cannot_start_or_writes_to_its_read_only_root_says_so(
    reason: str, message: str, hint: str
) -> None:
    target = sidecar("target", last=reason, restarts=1, code=128 if reason == "StartError" else 1)
    target["image"] = "kind-registry:5000/team/agent@sha256:" + "cd" * 32
    target["lastState"]["terminated"]["message"] = message
    found = observed.doomed(pod(sidecar("gateway"), target, phase="Running"))
    assert found is not None
    assert found[0] == "target-crash"
    assert "kind-registry:5000/team/agent@sha256:" in found[1]
    assert message.splitlines()[-1] in found[1]
    assert hint in found[1]


def test_a_gateway_killed_as_the_pod_ended_is_a_restart_though_none_is_on_record() -> None:
    """The gateway was SIGKILLed, the controller's call failed, and the pod ended before
    the kubelet restarted the gateway: only its own exit says it died."""
    killed = {"name": "gateway", "restartCount": 0,
              "state": {"terminated": {"reason": "Error", "exitCode": 137}}}  # fmt: skip
    found = observed.infra_failure(pod(killed, sidecar("target", state="Completed")))
    assert found is not None
    assert found[0] == "gateway-restart"
    assert "exit code 137" in found[1]
    stopped = {"name": "gateway", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
    assert observed.infra_failure(pod(stopped, sidecar("target", state="Completed"))) is None
