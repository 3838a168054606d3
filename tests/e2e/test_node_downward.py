"""The test node's kubelet follows a running pod's updates as the kubelet does: a downward-API
volume (plain or projected) is rewritten when the pod's annotations change — each file swapped
in whole, an annotation not there an empty file — which is how a pooled cell's assignment
reaches its gateway and controller; and an ``activeDeadlineSeconds`` added to the running pod
by a PATCH ends it.

The pod runs on the real kubelet (:mod:`node.kubelet`, :mod:`node.pods`, :mod:`node.volumes`)
against the API emulator; only the node's network and container runtime are stand-ins (no
network namespaces): a container is a host process, its volume mounts its paths translated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from support.kube import serve
from support.node import containers, images, kubelet
from support.node.network import PodNetwork
from support.operator_support import until

ANNOTATION = "agenthealth.dev/assignment"
MOUNT = "/var/run/agent-health/assignment"
WATCH = """
import json, sys, time
seen = None
while True:
    try:
        text = open(sys.argv[1]).read()
    except FileNotFoundError:
        text = None
    if text != seen:
        print(json.dumps(text), flush=True)
        seen = text
    time.sleep(0.005)
"""


@dataclasses.dataclass
class HostNetwork:
    """Every pod on the host's loopback (the node's bridge needs network namespaces)."""

    node_ip: str = "127.0.0.1"

    async def attach(self) -> PodNetwork:
        return PodNetwork(ip="127.0.0.1", netns="host", veth="none")

    async def detach(self, network: PodNetwork) -> None:
        """Nothing was made."""


@dataclasses.dataclass
class HostProcesses:
    """A container is a host process; its mounts are its paths, translated to the volumes'."""

    name: str = "host"
    image_binds: bool = False

    async def pull(self, reference: str, policy: str) -> tuple[images.Image, str]:
        return images.Image(name="watcher"), reference

    async def start(
        self, spec: dict[str, Any], image: images.Image, state: Path, log: Path
    ) -> containers.Run:
        argv = [sys.executable if arg == "python" else arg for arg in spec["argv"]]
        for bind in spec["binds"]:
            argv = [arg.replace(bind["target"], bind["source"], 1) for arg in argv]
        await asyncio.to_thread(containers.prepare, spec, state, log)
        process = await containers.spawn(argv, log, env=spec["env"])
        return containers.Run(process, log, state / "termination-log", containers.now())

    async def remove(self, runs: list[containers.Run]) -> None:
        """Nothing: a process leaves only its log."""


@dataclasses.dataclass
class NoServices:
    def hosts(self) -> list[tuple[str, list[str]]]:
        return []


@contextlib.asynccontextmanager
async def node(root: Path) -> AsyncIterator[tuple[kubelet.Kubelet, httpx.AsyncClient]]:
    async with (
        serve() as (emulator, url),
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer kubelet"}) as api,
    ):
        found = kubelet.Kubelet(
            emulator,
            api,
            HostNetwork(),
            HostProcesses(),
            NoServices(),
            root,  # type: ignore[arg-type]
        )
        following = asyncio.ensure_future(found.run())
        try:
            yield found, api
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            await found.close()


def _pod(name: str) -> dict[str, Any]:
    field = {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION}']"}}
    projected = {"downwardAPI": {"items": [{"path": "a.json", **field}]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"pool": "cells"}},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "watcher",
                    "image": "watcher@sha256:" + "a" * 64,
                    "command": ["python", "-c", WATCH, f"{MOUNT}/assignment.json"],
                    "volumeMounts": [{"name": "assignment", "mountPath": MOUNT}],
                }
            ],
            "volumes": [
                {"name": "assignment",
                 "downwardAPI": {"items": [{"path": "assignment.json", **field}]}},
                {"name": "projected", "projected": {"sources": [projected]}},
            ],
        },
    }  # fmt: skip


def _seen(found: kubelet.Kubelet, name: str) -> list[str | None]:
    """What the container read, in turn (whole lines only: a long one may be half written);
    nothing while it is still waiting to start (a loaded machine starts it late)."""
    if not next(iter(found.pod("default", name).containers.values())).runs:
        return []
    log = found.log("default", name, {}).decode()
    return [json.loads(line) for line in log.splitlines(keepends=True) if line.endswith("\n")]


async def _status(api: httpx.AsyncClient, name: str) -> dict[str, Any]:
    answer = await api.get(f"/api/v1/namespaces/default/pods/{name}")
    return dict(answer.json().get("status") or {})


async def test_an_annotation_patched_on_a_running_pod_reaches_its_downward_api_files(
    tmp_path: Path,
) -> None:
    async with node(tmp_path) as (found, api):
        (await api.post("/api/v1/namespaces/default/pods", json=_pod("warm"))).raise_for_status()
        pod = await until(lambda: found.pods and found.pod("default", "warm"), "the pod")
        await until(lambda: "projected" in pod.volumes, "its volumes")
        # No annotation yet: both files are there, empty, as the kubelet projects them.
        await until(lambda: _seen(found, "warm") == [""], "the container reading an empty file")
        assert (pod.volumes["projected"] / "a.json").read_text() == ""
        inode = (pod.volumes["assignment"] / "assignment.json").stat().st_ino
        values = [json.dumps({"cell": "c-1", "n": "x" * 20000}), json.dumps({"cell": "c-2"})]
        for value in values:
            patch = {"metadata": {"annotations": {ANNOTATION: value}}}
            answer = await api.patch(
                "/api/v1/namespaces/default/pods/warm",
                json=patch,
                headers={"Content-Type": "application/merge-patch+json"},
            )
            answer.raise_for_status()
            await until(lambda v=value: _seen(found, "warm")[-1] == v, "the new annotation")
        # The container saw each whole value in turn, never a part of one.
        assert _seen(found, "warm") == ["", *values]
        # Each volume is projected on its own, as a kubelet does: the other one catches up.
        projected = pod.volumes["projected"] / "a.json"
        await until(lambda: projected.read_text() == values[-1], "the projected volume's update")
        file = pod.volumes["assignment"] / "assignment.json"
        assert file.stat().st_ino != inode  # swapped in, not rewritten in place
        assert sorted(p.name for p in file.parent.iterdir()) == ["assignment.json"]


async def test_a_deadline_patched_onto_a_running_pod_ends_it(tmp_path: Path) -> None:
    async with node(tmp_path) as (_, api):
        (await api.post("/api/v1/namespaces/default/pods", json=_pod("late"))).raise_for_status()
        for _ in range(2000):
            if (await _status(api, "late")).get("phase") == "Running":
                break
            await asyncio.sleep(0.02)
        answer = await api.patch(
            "/api/v1/namespaces/default/pods/late",
            json={"spec": {"activeDeadlineSeconds": 1}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        answer.raise_for_status()
        for _ in range(2000):
            status = await _status(api, "late")
            if status.get("phase") == "Failed":
                break
            await asyncio.sleep(0.02)
        assert (status.get("phase"), status.get("reason")) == ("Failed", "DeadlineExceeded")
