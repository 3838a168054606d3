"""The kubelet: every pod of the API emulator runs on this one node (there is no scheduler).

It follows pods from the emulator's change stream, runs each (:mod:`node.pods`) and hands it
every later version (its downward-API volumes follow its labels and annotations), writes
their status through the API as ``Bearer kubelet``, serves their logs to the API's
``pods/log`` and records ``Events`` (``FailedMount``). What it adds to a pod, as the
service-account admission plugin and the kubelet do: a ``kube-api-access`` projected volume
(token, ``ca.crt``, namespace) at ``/var/run/secrets/kubernetes.io/serviceaccount`` unless
``automountServiceAccountToken`` is false; ``/etc/hosts`` (the pod, the Services, extra
hosts) and a ``resolv.conf`` with no reachable name server, so an unknown name fails at
once; ``KUBERNETES_SERVICE_HOST``/``PORT``.

Containers run on the kubelet's :class:`node.runtime.Runtime`: processes (images as
commands) or real containers (:mod:`node.podman`). Tests reach in through
:meth:`Kubelet.pod` (a pod's containers, their runs and pids).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from support.kube import ApiError, Emulator
from support.node import containers, environment, pods, runtime, services
from support.node.network import Network

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
AUTOMOUNT = "kube-api-access-node"
ROOT = Path(__file__).resolve().parents[3]
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
_READ_ONLY_VOLUMES = ("secret", "configMap", "projected", "downwardAPI")


@dataclasses.dataclass
class Kubelet:
    emulator: Emulator
    api: httpx.AsyncClient
    network: Network
    runtime: runtime.Runtime
    proxy: services.ServiceProxy
    root: Path
    backoff: float = 0.5
    """The first restart back-off (the kubelet's is 10 s); it doubles up to 32 times this."""
    probe_interval: float = 0.1
    pods: dict[str, pods.Pod] = dataclasses.field(default_factory=dict)
    closing: bool = False
    _events: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    _stopping: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    # -- following pods ------------------------------------------------------------------

    async def run(self) -> None:
        kind = self.emulator.store.kinds[("", "pods")]
        async for event in self.emulator.store.watch(
            kind, None, lambda _l: True, since=None, initial_bookmark=False, timeout=None
        ):
            body = event["object"]
            uid = body["metadata"]["uid"]
            known = self.pods.get(uid)
            if event["type"] == "DELETED" or body["metadata"].get("deletionTimestamp"):
                if known is not None:
                    stopping = asyncio.ensure_future(known.delete())
                    self._stopping.add(stopping)
                    stopping.add_done_callback(self._stopping.discard)
                continue
            if known is not None:
                # The kubelet reprocesses a pod on every update: new labels or annotations
                # reach its downward-API volumes, a new activeDeadlineSeconds its deadline.
                known.update(body)
                continue
            gated = bool((body.get("spec") or {}).get("schedulingGates"))
            if (
                known is None
                and not gated  # the scheduler places a pod only once its gates are gone
                and (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ):
                pod = pods.Pod(self, body)
                self.pods[uid] = pod
                pod.start()

    async def close(self) -> None:
        """Stop every pod at once (no grace: the test is over)."""
        self.closing = True
        await asyncio.gather(*(pod.delete() for pod in self.pods.values()))

    def pod(self, namespace: str, name: str) -> pods.Pod:
        """The newest pod of that name on the node."""
        found = [p for p in self.pods.values() if (p.namespace, p.name) == (namespace, name)]
        if not found:
            raise KeyError(f"no pod {namespace}/{name} on the node")
        return found[-1]

    # -- what pods need from the node ------------------------------------------------------

    def lookup(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.emulator.read(plural, namespace, name)
        except (ApiError, KeyError):
            return None

    def automount(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The service-account volume admission would add (none when automount is off)."""
        spec = pod["spec"]
        if spec.get("automountServiceAccountToken") is False:
            return []
        account = self.lookup(
            "serviceaccounts",
            pod["metadata"]["namespace"],
            spec.get("serviceAccountName") or "default",
        )
        if account is not None and account.get("automountServiceAccountToken") is False:
            return []
        namespace = {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
        return [
            {
                "name": AUTOMOUNT,
                "projected": {
                    "defaultMode": 0o644,
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {"downwardAPI": {"items": [namespace]}},
                    ],
                },
            }
        ]

    def service_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        namespace = pod["metadata"]["namespace"]
        found: dict[str, str] = {}
        kind = self.emulator.store.kinds[("", "services")]
        links = pod["spec"].get("enableServiceLinks", True)
        for service in self.emulator.store.list(kind, None, lambda _l: True):
            meta, spec = service["metadata"], service.get("spec") or {}
            ip = spec.get("clusterIP")
            if not ip or ip == "None":
                continue
            if (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
                found |= environment.service_env("kubernetes", ip, spec.get("ports") or [])
            elif links and meta["namespace"] == namespace:
                found |= environment.service_env(meta["name"], ip, spec.get("ports") or [])
        return found

    def launch_spec(self, pod: pods.Pod, c: pods.Container) -> dict[str, Any]:
        """What :mod:`node.launcher` needs to start ``c`` (a ConfigError if it cannot yet)."""
        assert c.image is not None
        assert pod.network is not None
        body, image = pod.body, c.image
        env = environment.compose(
            body,
            c.spec,
            image,
            self.lookup,
            services=self.service_env(body),
            pod_ip=pod.ip,
            node_ip=self.network.node_ip,
        )
        argv = environment.argv(c.spec, image, env)
        pod_security = body["spec"].get("securityContext") or {}
        security = c.spec.get("securityContext") or {}

        def setting(key: str, default: Any) -> Any:
            return security.get(key, pod_security.get(key, default))

        uid, gid = setting("runAsUser", image.user[0]), setting("runAsGroup", image.user[1])
        if setting("runAsNonRoot", False) and uid == 0:
            raise environment.ConfigError("container has runAsNonRoot and image will run as root")
        groups = [gid]
        if pod_security.get("fsGroup") is not None:
            groups.append(pod_security["fsGroup"])
        groups += pod_security.get("supplementalGroups") or []
        binds = []
        if self.runtime.image_binds:
            binds += [
                {"source": source, "target": target, "readonly": True}
                for target, source in image.binds.items()
            ]
        binds += self._mounts(pod, c)
        binds += self._etc(pod)
        seccomp = setting("seccompProfile", {}) or {}
        return {
            "id": f"{pod.uid[:13]}-{c.name}-{c.restarts}",
            "image": c.spec["image"],
            "netns": pod.network.netns_path,
            "hostname": pod.name[:63],
            "binds": binds,
            "termination_log": {
                "target": c.spec.get("terminationMessagePath", "/dev/termination-log")
            },
            "traverse": [os.path.realpath(sys.executable), sys.base_prefix, str(ROOT)],
            "read_only_root": bool(security.get("readOnlyRootFilesystem")),
            "workdir": c.spec.get("workingDir") or image.workdir,
            "uid": uid,
            "gid": gid,
            "groups": groups,
            "no_new_privs": security.get("allowPrivilegeEscalation") is False,
            "capabilities": security.get("capabilities") or {},
            "seccomp": seccomp.get("type"),
            "limits": (c.spec.get("resources") or {}).get("limits") or {},
            "argv": argv,
            "env": env,
        }

    def _mounts(self, pod: pods.Pod, c: pods.Container) -> list[dict[str, Any]]:
        declared = {v["name"]: v for v in pod.body["spec"].get("volumes") or []}
        out = []
        mounts = list(c.spec.get("volumeMounts") or [])
        paths = {m["mountPath"].rstrip("/") for m in mounts}
        if AUTOMOUNT in pod.volumes and SERVICE_ACCOUNT_DIR not in paths:
            mounts.append({"name": AUTOMOUNT, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True})
        for mount in mounts:
            source = pod.volumes.get(mount["name"])
            if source is None:
                raise environment.ConfigError(f"volume {mount['name']!r} is not declared")
            volume = declared.get(mount["name"], {"projected": {}})
            readonly = bool(mount.get("readOnly")) or any(k in volume for k in _READ_ONLY_VOLUMES)
            path = source / mount["subPath"] if mount.get("subPath") else source
            out.append({"source": str(path), "target": mount["mountPath"], "readonly": readonly})
        return out

    def _etc(self, pod: pods.Pod) -> list[dict[str, Any]]:
        etc = pod.dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines.append(f"{pod.ip}\t{pod.name[:63]}")
        lines += [f"{ip}\t{' '.join(names)}" for ip, names in self.proxy.hosts()]
        files = {
            "hosts": "\n".join(lines) + "\n",
            "hostname": pod.name[:63] + "\n",
            "resolv.conf": RESOLV_CONF,
        }
        out = []
        for name, text in files.items():
            (etc / name).write_text(text)
            (etc / name).chmod(0o644)
            out.append({"source": str(etc / name), "target": f"/etc/{name}", "readonly": True})
        return out

    # -- talking to the API ----------------------------------------------------------------

    async def patch_status(self, pod: pods.Pod, status: dict[str, Any]) -> None:
        if self.closing:
            return
        answer = await self.api.patch(
            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if answer.status_code == 404:
            return  # deleted meanwhile: the watch tells the pod to stop
        answer.raise_for_status()

    async def event(self, body: Mapping[str, Any], reason: str, message: str) -> None:
        meta = body["metadata"]
        key = (meta["uid"], reason, message)
        if key in self._events or self.closing:
            return
        self._events.add(key)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet"},
        }
        with contextlib.suppress(httpx.HTTPError):
            await self.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", json=event)

    def log(self, namespace: str, name: str, params: Mapping[str, str]) -> bytes:
        """``GET pods/NAME/log``: ``container``, ``previous``, ``tailLines``, ``limitBytes``."""
        try:
            pod = self.pod(namespace, name)
        except KeyError:
            raise ApiError(404, "NotFound", f'pods "{name}" not found') from None
        wanted = params.get("container") or next(iter(pod.containers))
        c = pod.containers.get(wanted)
        if c is None:
            raise ApiError(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
        runs = c.runs[:-1] if params.get("previous") in ("true", "1") else c.runs
        if not runs:
            raise ApiError(
                400, "BadRequest", f'container "{wanted}" in pod "{name}" is waiting to start'
            )
        lines = params.get("tailLines")
        limit = params.get("limitBytes")
        text = containers.tail(
            runs[-1].log, int(lines) if lines else None, int(limit) if limit else None
        )
        return text.encode()
