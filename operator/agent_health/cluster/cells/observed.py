"""Reading a cell's object as the kubelet (or the Agent Sandbox controller) left it.

A cell is a Pod or a Sandbox around one. :func:`state` says whether it is waiting,
running or has ended; :func:`infra_failure` says whether the *infrastructure* failed it —
then :func:`.grading.grade_failed_pod` grades it and decides on a retry — or whether the
test ran (even if it failed), so its ledger decides the grade:

=============================================  ===============  ============================
what the object says                           cause            when
=============================================  ===============  ============================
``status.reason`` Evicted / Preempting         evicted          ended
``status.reason`` DeadlineExceeded             deadline         ended
``status.reason`` NodeLost, NodeShutdown …     node-lost        ended
the target died (``state`` or ``lastState``)   target-crash     ended; blames the agent
the target was OOMKilled                       target-oom       ended; blames the agent
the gateway restarted (OOMKilled or not)       gateway-restart  ended
another sidecar (a peer) OOMKilled             sidecar-oom      ended
a container restarted 3 times                  sidecar-crash    not ended (a crash loop)
ImagePullBackOff / ErrImagePull …              image-pull       waiting longer than a grace
an image that can never be pulled (not found,  image-pull       at once
  Never on a node without it, an invalid name)
``PodScheduled=False`` Unschedulable           unschedulable    waiting longer than a grace
the pod was deleted before it ended            evicted          deleted
=============================================  ===============  ============================

A pod that ended with the controller terminated by itself (any exit code) ran its test.
:func:`doomed` says the same of a cell still waiting or running, so it ends at once: a
dead target, a restarted gateway, an OOMKilled sidecar, or any container in a crash loop.
A dead target blames the agent under test (cause ``agent``, never retried: a retry would
hand it best-of-N); every other cause is the infrastructure's (``infra``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from agent_health.cluster.cells import cellgateway, cellpod, sandbox
from agent_health.cluster.grading import grading

State = Literal["waiting", "running", "succeeded", "failed"]
PULL_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
)
_ENDED_REASONS: Mapping[str, grading.InfraCause] = {
    "Evicted": "evicted",
    "Preempting": "evicted",
    "DeadlineExceeded": "deadline",
    "NodeLost": "node-lost",
    "NodeShutdown": "node-lost",
    "Terminated": "node-lost",
    "UnexpectedAdmissionError": "node-lost",
}
Failure = tuple[grading.InfraCause, str]
CRASH_LOOP_RESTARTS = 3
# How a registry's 404 reads in a kubelet's pull error (containerd, CRI-O, podman).
_NOT_FOUND = re.compile(r"not found|manifest unknown|NotFound|MANIFEST_UNKNOWN", re.IGNORECASE)


def is_sandbox(body: Mapping[str, Any]) -> bool:
    """A Sandbox, or a claim on a warm pool of them (it mirrors its Sandbox's conditions)."""
    return body.get("kind") in (sandbox.KIND, "SandboxClaim")


def is_claim(body: Mapping[str, Any]) -> bool:
    """A claim on a warm pool (:mod:`.warmpool`)."""
    return body.get("kind") == "SandboxClaim"


def state(body: Mapping[str, Any]) -> State:
    """Where the cell is: from the pod's phase, or the Sandbox's ``Finished`` condition."""
    status = body.get("status") or {}
    if is_sandbox(body):
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Finished" and condition.get("status") == "True":
                return "succeeded" if condition.get("reason") == "PodSucceeded" else "failed"
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return "running" if ready else "waiting"
    phase = status.get("phase")
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed":
        return "failed"
    return "running" if phase == "Running" else "waiting"


def infra_failure(body: Mapping[str, Any]) -> Failure | None:
    """Why the infrastructure failed an *ended* cell, or ``None`` when its test ran."""
    status = body.get("status") or {}
    if is_sandbox(body):
        return None  # the Sandbox reports only PodSucceeded/PodFailed: the ledger decides
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or reason)
    if reason in _ENDED_REASONS:
        return _ENDED_REASONS[reason], message
    failed = _sidecar_failure(status) or _unpullable(status)
    if failed is not None:
        return failed
    if state(body) == "failed" and _controller_ended(status) is None:
        return "other", f"the pod failed before the controller ran ({message or 'no reason'})"
    return None


def doomed(body: Mapping[str, Any], restarts: int = CRASH_LOOP_RESTARTS) -> Failure | None:
    """Why a cell that has *not* ended can no longer be graded from its ledger.

    What :func:`infra_failure` would say once it ended (the target died, the gateway
    restarted, a sidecar was OOMKilled), or a container that restarted ``restarts`` times
    (a crash loop: ``sidecar-crash``). The reconciler ends such a cell at once instead of
    leaving it to its deadline.
    """
    if is_sandbox(body):
        return None  # a Sandbox does not report its containers
    status = body.get("status") or {}
    failed = _sidecar_failure(status) or _unpullable(status)
    if failed is not None:
        return failed
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            count = int(container.get("restartCount") or 0)
            if count >= restarts:
                why = _restarted(container) or "restarted"
                name = container.get("name")
                return "sidecar-crash", f"container {name} restarted {count} times ({why})"
    return None


def _sidecar_failure(status: Mapping[str, Any]) -> Failure | None:
    """The target died, the gateway restarted, or another sidecar was OOMKilled."""
    sidecars = {str(s.get("name")): s for s in status.get("initContainerStatuses") or []}
    target = sidecars.pop(cellpod.TARGET, None)
    if target is not None and (crashed := _crashed(target)) is not None:
        return crashed
    gateway = sidecars.get(cellgateway.NAME)
    if gateway is not None and (why := _restarted(gateway) or _killed(gateway)) is not None:
        return "gateway-restart", (
            f"the gateway restarted during the cell ({why}): exchanges in flight were lost "
            "and its ports were free meanwhile, so the ledger is not complete evidence"
        )
    for name, sidecar in sidecars.items():
        for key in ("state", "lastState"):
            ended = (sidecar.get(key) or {}).get("terminated") or {}
            if ended.get("reason") == "OOMKilled":
                return "sidecar-oom", f"sidecar {name} was OOMKilled"
    return None


def _unpullable(status: Mapping[str, Any]) -> Failure | None:
    """A container whose image no pull will ever bring: waiting the grace changes nothing."""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason, detail = waiting.get("reason"), str(waiting.get("message") or "")
            if reason in PULL_REASONS and (
                reason in ("ErrImageNeverPull", "InvalidImageName") or _NOT_FOUND.search(detail)
            ):
                return "image-pull", _pull_failure(container, reason, detail)
    return None


def _pull_failure(container: Mapping[str, Any], reason: str, detail: str) -> str:
    """What a cell's error says of an image that cannot be pulled, and what to do."""
    image = container.get("image") or "its image"
    if reason == "ErrImageNeverPull":
        hint = "put it on every node (kind load docker-image) or let the node pull it"
    elif reason == "InvalidImageName":
        hint = "fix the image reference in the RunSpec"
    elif _NOT_FOUND.search(detail):
        hint = (
            "the registry does not have it (any more): the RunSpec pinned this digest when it "
            "was resolved; push the image again, or edit the RunSpec so that it resolves anew"
        )
    else:
        hint = "check that it exists and that the nodes can reach the registry (pull secrets)"
    why = detail or reason
    return f"container {container.get('name')}: image {image} cannot be pulled ({why}); {hint}"


def _crashed(target: Mapping[str, Any]) -> Failure | None:
    """How the target container died during the cell, if it did.

    Any earlier instance (``lastState``, or a restart count) means it died and the kubelet
    restarted it; an OOM kill shows in ``state`` too when the pod ended with it. A target that
    was merely stopped when the controller finished is neither.
    """
    last = (target.get("lastState") or {}).get("terminated") or {}
    now = (target.get("state") or {}).get("terminated") or {}
    if "OOMKilled" in (last.get("reason"), now.get("reason")):
        return "target-oom", "the target container was OOM-killed (over its memory limit)"
    if last or int(target.get("restartCount") or 0) > 0:
        code, why = last.get("exitCode"), last.get("reason") or "no reason"
        said = [line for line in str(last.get("message") or "").splitlines() if line.strip()]
        words = f": {said[-1].strip()[:300]}" if said else ""
        image = f" ({target['image']})" if target.get("image") else ""
        found = f"the target container{image} died (exit code {code}, {why}){words}"
        if why == "StartError":
            found += "; its image's command cannot be started: check its entrypoint or command"
        elif "Read-only file system" in words:
            found += "; a cell's root filesystem is read-only: write under /tmp (an emptyDir)"
        return "target-crash", found
    return None


def _restarted(sidecar: Mapping[str, Any]) -> str | None:
    """Why a sidecar's earlier instance ended, if it restarted."""
    last = (sidecar.get("lastState") or {}).get("terminated") or {}
    if last or int(sidecar.get("restartCount") or 0) > 0:
        return f"{last.get('reason') or 'terminated'}, exit code {last.get('exitCode')}"
    return None


def _killed(gateway: Mapping[str, Any]) -> str | None:
    """A gateway that ended by a signal or an error, not by the stop at the pod's end (it
    exits 0 on SIGTERM): it died while the cell ran, and the pod ended before the kubelet
    could restart it, so neither ``lastState`` nor a restart count shows it."""
    ended = (gateway.get("state") or {}).get("terminated") or {}
    code = ended.get("exitCode")
    if ended and code not in (0, 143, None):
        return f"{ended.get('reason') or 'terminated'}, exit code {code}, not restarted"
    return None


def stuck(body: Mapping[str, Any]) -> Failure | None:
    """Why a *waiting* cell cannot start (to fail it once a grace period has passed)."""
    status = body.get("status") or {}
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return "unschedulable", str(condition.get("message") or "Unschedulable")
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in PULL_REASONS:
                detail = str(waiting.get("message") or "")
                return "image-pull", _pull_failure(container, waiting["reason"], detail)
    return None


def _controller_ended(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == cellpod.CONTROLLER:
            ended = (container.get("state") or {}).get("terminated")
            return dict(ended) if ended else None
    return None
