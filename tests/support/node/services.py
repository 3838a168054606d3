"""Services on the node: kube-proxy's userspace mode, and the API server behind ``kubernetes``.

For every Service with a selector, the proxy gives it a cluster IP (a ``/32`` on the node's
bridge, written to ``spec.clusterIP``) and listens on each of its ports there; a connection
goes to a *ready* pod the selector matches, on the port's ``targetPort`` (a number, or a
container port's name). The ``kubernetes`` Service in ``default`` is the API server: its
listener speaks TLS with a certificate from a throwaway CA (``trustme``) for the names and
IP in-cluster clients use, and passes the bytes on to the API emulator. The CA is what
:meth:`ServiceProxy.ca_pem` returns; the cluster publishes it as ``kube-root-ca.crt``.

:meth:`ServiceProxy.hosts` is the cluster's DNS as ``/etc/hosts`` lines
(``NAME.NAMESPACE.svc.cluster.local NAME.NAMESPACE.svc NAME.NAMESPACE``), plus extra names
such as the registry's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import ssl
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import trustme

from support.kube import Emulator, selectors

API_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclasses.dataclass
class _Listening:
    ip: str
    servers: list[asyncio.Server]


@dataclasses.dataclass
class ServiceProxy:
    emulator: Emulator
    api: httpx.AsyncClient
    """The kubelet's API client (writes ``spec.clusterIP``)."""
    allocate: Callable[[], Any]
    """Async: a fresh cluster IP on the node."""
    api_server: tuple[str, int]
    """Where the API emulator listens (plain HTTP)."""
    extra_hosts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    _ca: trustme.CA = dataclasses.field(default_factory=trustme.CA)
    _services: dict[tuple[str, str], _Listening] = dataclasses.field(default_factory=dict)
    _turn: itertools.count[int] = dataclasses.field(default_factory=itertools.count)
    _connections: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def ca_pem(self) -> str:
        return self._ca.cert_pem.bytes().decode()

    def cluster_ip(self, namespace: str, name: str) -> str | None:
        found = self._services.get((namespace, name))
        return found.ip if found else None

    def hosts(self) -> list[tuple[str, list[str]]]:
        """``(ip, names)`` for every Service (and every extra host)."""
        lines = [(ip, [name]) for name, ip in self.extra_hosts.items()]
        for (namespace, name), listening in sorted(self._services.items()):
            names = [f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}.svc"]
            names.append(f"{name}.{namespace}")
            if (namespace, name) == ("default", "kubernetes"):
                names = list(API_NAMES)
            lines.append((listening.ip, names))
        return lines

    async def run(self) -> None:
        """Follow Services until cancelled; close every listener on the way out."""
        kind = self.emulator.store.kinds[("", "services")]
        try:
            async for event in self.emulator.store.watch(
                kind, None, lambda _l: True, since=None, initial_bookmark=False, timeout=None
            ):
                body = event["object"]
                key = (body["metadata"]["namespace"], body["metadata"]["name"])
                if event["type"] == "DELETED":
                    await self._close(key)
                elif key not in self._services:
                    await self._open(key, body)
        finally:
            for key in list(self._services):
                await self._close(key)
            for task in list(self._connections):
                task.cancel()

    async def wait_for(self, namespace: str, name: str) -> str:
        """The cluster IP of a Service once its listeners are up."""
        for _ in range(3000):
            ip = self.cluster_ip(namespace, name)
            if ip is not None:
                return ip
            await asyncio.sleep(0.01)
        raise AssertionError(f"the service proxy never listened for Service {namespace}/{name}")

    async def _open(self, key: tuple[str, str], body: dict[str, Any]) -> None:
        spec = body.get("spec") or {}
        api = key == ("default", "kubernetes")
        if not api and not spec.get("selector"):
            return  # no selector: endpoints are someone else's business
        ip = await self.allocate()
        answer = await self.api.patch(
            f"/api/v1/namespaces/{key[0]}/services/{key[1]}",
            json={"spec": {"clusterIP": ip, "clusterIPs": [ip]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        answer.raise_for_status()
        context = None
        if api:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ca.issue_cert(*API_NAMES, ip).configure_cert(context)
        servers = []
        for port in spec.get("ports") or []:

            async def accept(
                reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter,
                port: dict[str, Any] = port,
            ) -> None:
                task = asyncio.current_task()
                assert task is not None
                self._connections.add(task)
                try:
                    await self._forward(key, port, api, reader, writer)
                finally:
                    self._connections.discard(task)

            servers.append(await asyncio.start_server(accept, ip, port["port"], ssl=context))
        self._services[key] = _Listening(ip, servers)

    async def _close(self, key: tuple[str, str]) -> None:
        found = self._services.pop(key, None)
        for server in found.servers if found else []:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def _endpoint(self, key: tuple[str, str], port: dict[str, Any]) -> tuple[str, int] | None:
        service = self.emulator.read("services", key[0], key[1])
        wanted = selectors.parse(
            ",".join(f"{k}={v}" for k, v in (service["spec"].get("selector") or {}).items())
        )
        kind = self.emulator.store.kinds[("", "pods")]
        ready = []
        for pod in self.emulator.store.list(kind, key[0], wanted):
            status = pod.get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if conditions.get("Ready") == "True" and status.get("podIP"):
                target = _target_port(pod, port.get("targetPort", port["port"]))
                if target is not None:
                    ready.append((status["podIP"], target))
        if not ready:
            return None
        return ready[next(self._turn) % len(ready)]

    async def _forward(
        self,
        key: tuple[str, str],
        port: dict[str, Any],
        api: bool,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        endpoint = self.api_server if api else self._endpoint(key, port)
        try:
            if endpoint is None:
                return  # no ready endpoint: the connection is refused, as kube-proxy does
            try:
                up_reader, up_writer = await asyncio.open_connection(*endpoint)
            except OSError:
                return
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()


def _target_port(pod: dict[str, Any], target: int | str) -> int | None:
    if isinstance(target, int):
        return target
    if str(target).isdigit():
        return int(target)
    spec = pod["spec"]
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        for declared in container.get("ports") or []:
            if declared.get("name") == target:
                return int(declared["containerPort"])
    return None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, ssl.SSLError):
        writer.close()
