"""The operator's own Kubernetes API client: async, on httpx, with kopf's credentials.

kopf watches; this client does everything else the reconciler needs (create cells and
Secrets, merge-patch statuses, read pod logs) without the synchronous ``kubernetes``
client, which would block the event loop. It is built from the same
:class:`kopf.ConnectionInfo` kopf logs in with (:meth:`Client.from_connection`), so the
operator and kopf always talk to one API server with one identity.

Every request is counted by ``(verb, resource)`` in :attr:`Client.requests` (what the
benchmark reports and :mod:`.rbac` checks against). Errors become :class:`ApiError` with
the API server's status, reason and message; callers decide what a 404 or 409 means.

>>> async with kube.Client.from_connection(info) as api:
...     pod, created = await api.ensure(kube.PODS, "default", manifest)
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import logging
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import kopf

from agent_health.cluster import apigroup, errors
from agent_health.ledger import store

SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
MERGE_PATCH = "application/merge-patch+json"
TOKEN_REFRESH_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Resource:
    """A served resource type, by API group, version and plural."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of the collection, or of one object (and its subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        return f"{base}/{sub}" if sub else base


PODS = Resource("", "v1", "pods")
SECRETS = Resource("", "v1", "secrets")
CONFIGMAPS = Resource("", "v1", "configmaps")
EVENTS = Resource("", "v1", "events")
RUNSPECS = Resource(apigroup.GROUP, apigroup.VERSION, "runspecs")
EVALUATIONRUNS = Resource(apigroup.GROUP, apigroup.VERSION, "evaluationruns")
SANDBOXES = Resource("agents.x-k8s.io", "v1beta1", "sandboxes")
SANDBOX_CLAIMS = Resource("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims")
SANDBOX_TEMPLATES = Resource("extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates")
SANDBOX_WARMPOOLS = Resource("extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools")
NETWORKPOLICIES = Resource("networking.k8s.io", "v1", "networkpolicies")
ENDPOINTS = Resource("", "v1", "endpoints")


class ApiError(errors.ClusterError):
    """The API server refused a request (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def temporary(self) -> bool:
        """Whether waiting may heal it (unreachable, throttled, server errors, conflicts)."""
        return self.status in (0, 409, 429) or self.status >= 500


def selector(labels: Mapping[str, str]) -> str:
    """A label selector requiring every ``key=value``."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Client:
    """An async client for one API server; use as an async context manager.

    ``token_file`` (a service account's projected token) is re-read every minute, as the
    kubelet rotates it; ``token`` is used as it is.
    """

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._token_file = Path(token_file) if token_file else None
        self._token_read = 0.0
        self._client = httpx.AsyncClient(
            base_url=self.server,
            verify=verify,
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self.requests: Counter[tuple[str, str]] = Counter()

    @classmethod
    def from_connection(
        cls, info: kopf.ConnectionInfo, *, token_file: str | None = None, timeout: float = 30.0
    ) -> Client:
        """A client with the credentials kopf logged in with (token or client certificate).

        ``token_file``: where the token came from, to follow its rotation.
        """
        verify = info.as_ssl_context()  # CA and client certificate, as data or as files
        token = info.token if (info.scheme or "Bearer").lower() == "bearer" else None
        if token_file is not None:
            token = None
        return cls(info.server, token=token, token_file=token_file, verify=verify, timeout=timeout)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- verbs -----------------------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return await self._json("get", resource, "GET", resource.path(namespace, name))

    async def get_status(
        self, resource: Resource, namespace: str | None, name: str
    ) -> dict[str, Any]:
        path = resource.path(namespace, name, "status")
        return await self._json("get", resource, "GET", path, sub="status")

    async def list(
        self, resource: Resource, namespace: str | None, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """Every object matching ``labels`` (all pages)."""
        items: list[dict[str, Any]] = []
        params = {"labelSelector": selector(labels), "limit": "500"}
        while True:
            page = await self._json(
                "list", resource, "GET", resource.path(namespace), params=params
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            params = {**params, "continue": token}

    async def list_versioned(
        self, resource: Resource, namespace: str | None
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object (all pages) and the list's ``resourceVersion``, to watch from."""
        items: builtins.list[dict[str, Any]] = []
        params = {"limit": "500"}
        while True:
            page = await self._json(
                "list", resource, "GET", resource.path(namespace), params=params
            )
            items.extend(page.get("items") or [])
            metadata = page.get("metadata") or {}
            if not metadata.get("continue"):
                return items, str(metadata.get("resourceVersion") or "")
            params = {**params, "continue": metadata["continue"]}

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """The watch events after ``resource_version`` (``{"type", "object"}``; bookmarks
        included), until the API server ends the watch (about ``timeout_seconds``). A
        ``410 Gone`` arrives as an ``ERROR`` event: the caller lists again."""
        self.requests[("watch", resource.plural)] += 1
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version:
            params["resourceVersion"] = resource_version
        headers = {"Accept": "application/json"}
        token = await self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        path = resource.path(namespace)
        timeout = httpx.Timeout(30.0, read=timeout_seconds + 30.0)
        try:
            async with self._client.stream(
                "GET", path, params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise _error("GET", path, response)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as err:
            raise ApiError(
                0, "Unreachable", f"GET {self.server}{path}: {type(err).__name__}: {err}"
            ) from err

    async def create(
        self, resource: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._json("create", resource, "POST", resource.path(namespace), body=body)

    async def ensure(
        self, resource: Resource, namespace: str | None, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Create ``body``; when it already exists, the stored object. ``(object, created)``."""
        try:
            return await self.create(resource, namespace, body), True
        except ApiError as err:
            if err.status != 409:
                raise
        return await self.get(resource, namespace, body["metadata"]["name"]), False

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        status: bool = False,
    ) -> dict[str, Any]:
        """A JSON merge patch of the object (or of its ``/status``)."""
        sub = "status" if status else ""
        return await self._json(
            "patch", resource, "PATCH", resource.path(namespace, name, sub), body=patch, sub=sub
        )

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> bool:
        """Delete (background propagation); ``False`` when it was already gone."""
        try:
            await self._json("delete", resource, "DELETE", resource.path(namespace, name))
        except ApiError as err:
            if err.status == 404:
                return False
            raise
        return True

    async def log(self, namespace: str, name: str, container: str, *, limit: int) -> str:
        """The container's log (at most ``limit`` bytes, the API server cuts the rest)."""
        params = {"container": container, "limitBytes": str(limit)}
        response = await self._send(
            "get", PODS, "GET", PODS.path(namespace, name, "log"), params=params, sub="log"
        )
        return response.text

    # -- plumbing --------------------------------------------------------------------------

    async def _json(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        sub: str = "",
    ) -> dict[str, Any]:
        response = await self._send(verb, resource, method, path, params=params, body=body, sub=sub)
        answer = response.json() if response.content else {}
        if not isinstance(answer, dict):
            raise ApiError(500, "BadAnswer", f"{method} {path} answered {type(answer).__name__}")
        return answer

    async def _send(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        sub: str = "",
    ) -> httpx.Response:
        self.requests[(verb, resource.plural + (f"/{sub}" if sub else ""))] += 1
        headers = {"Accept": "application/json"}
        token = await self._current_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if method == "PATCH":
            headers["Content-Type"] = MERGE_PATCH
        try:
            response = await self._client.request(
                method, path, params=params, json=body, headers=headers
            )
        except httpx.TransportError as err:
            raise ApiError(
                0, "Unreachable", f"{method} {self.server}{path}: {type(err).__name__}: {err}"
            ) from err
        if response.status_code >= 400:
            raise _error(method, path, response)
        return response

    async def _current_token(self) -> str | None:
        if self._token_file is None:
            return self._token
        now = time.monotonic()
        if self._token is None or now - self._token_read > TOKEN_REFRESH_SECONDS:
            text = await asyncio.to_thread(self._token_file.read_text)
            self._token, self._token_read = text.strip(), now
        return self._token


def _error(method: str, path: str, response: httpx.Response) -> ApiError:
    reason, message = "", response.text[:512]
    try:
        status = response.json()
        if isinstance(status, dict):
            reason = str(status.get("reason") or "")
            message = str(status.get("message") or message)
    except ValueError:
        pass
    return ApiError(
        response.status_code, reason or response.reason_phrase, f"{method} {path}: {message}"
    )


async def login(
    given: kopf.ConnectionInfo | None = None,
) -> tuple[kopf.ConnectionInfo, str | None]:
    """Who to be, and the token file to follow (``None``: the token is used as it is).

    In a pod, its service account. Elsewhere the kubeconfig (``$KUBECONFIG``, else
    ``~/.kube/config``, its current context), read as kubectl reads it — exec plugins such
    as ``gke-gcloud-auth-plugin`` or ``aws eks get-token`` included — when the
    ``kubernetes`` package is installed (the ``operator`` extra), else by kopf's own reader
    (tokens and client certificates).
    """
    if given is not None:
        return given, None
    settings = kopf.OperatorSettings()
    info = await asyncio.to_thread(kopf.login_with_service_account, settings=settings)
    if info is not None:
        return info, SERVICE_ACCOUNT_TOKEN
    logger = logging.getLogger("agent_health.kube")
    try:
        info = await asyncio.to_thread(kopf.login_via_client, logger=logger, settings=settings)
        if info is None:  # no kubernetes package
            info = await asyncio.to_thread(kopf.login_with_kubeconfig, settings=settings)
    except (kopf.LoginError, OSError, KeyError, ValueError) as err:
        raise errors.ClusterError(
            f"cannot log in to Kubernetes: no service account here and the kubeconfig "
            f"($KUBECONFIG or ~/.kube/config) is unusable: {err}"
        ) from err
    if info is None:
        raise errors.ClusterError(
            "cannot log in to Kubernetes: no service account here and no kubeconfig "
            "($KUBECONFIG or ~/.kube/config)"
        )
    return info, None


def ledger_options(info: kopf.ConnectionInfo, token_file: str | None) -> store.Options:
    """How a ConfigMap ledger reaches the API server with the identity of ``info``."""
    if token_file is not None:  # in a pod: the backend reads the mounted token and CA
        return store.Options(kube_token=info.token)
    return store.Options(
        kube_api_url=info.server,
        kube_headers=info.as_http_headers(),
        kube_verify=info.as_ssl_context(),
    )
