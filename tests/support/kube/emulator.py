"""A Kubernetes API server for tests: kmock's scaffold plus a real object store.

Why a subclass of :class:`kmock.KubernetesScaffold` and not of :class:`kmock.KubernetesEmulator`:
the emulator changes its objects in ``_handle`` *before* any reaction runs, with plain
dict merging (no resourceVersion, uid, generation, status subresource, JSON patch, PUT,
409/422, watch resumption). Every one of its six handlers and its ``_handle`` would have
to be replaced, leaving nothing of it. The scaffold keeps what is worth having — the
aiohttp server (:class:`kmock.Server`), discovery (``/api``, ``/apis``, groups,
versions, from ``kmock.resources``), Kubernetes-shaped error bodies, the request log
(``emulator.requests``) and the reaction DSL, so a test can still inject a fault with
priority over the fallbacks, e.g. ``emulator['patch', kmock.resource(...)] << 500``.

Applying a CustomResourceDefinition (POST to ``customresourcedefinitions``) serves its
kind at once, with its schema's defaults and validation, and marks it Established.
Known gap: kmock's URL parser cannot parse ``/api/v1/namespaces`` (it answers 500), so
namespaces cannot be listed; run kopf cluster-wide (``clusterwide=True`` / ``-A``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import kmock

from support.kube import patching, rbac, selectors, store

_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}
CRDS = store.Kind(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    status=True,
    short_names=("crd", "crds"),
)
BUILTINS = (
    CRDS,
    # Discoverable because kopf waits for it even cluster-wide; see the known gap above.
    store.Kind("", "v1", "namespaces", "Namespace", namespaced=False, status=True),
    store.Kind("", "v1", "pods", "Pod", status=True, short_names=("po",)),
    store.Kind("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    store.Kind("", "v1", "secrets", "Secret"),
    store.Kind("", "v1", "services", "Service", status=True, short_names=("svc",)),
    store.Kind("", "v1", "endpoints", "Endpoints", short_names=("ep",)),
    store.Kind("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
    store.Kind("", "v1", "events", "Event", short_names=("ev",)),
    store.Kind("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
)


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesScaffold):
    """The API server: discovery from kmock, objects and semantics from :class:`store.Store`."""

    store: store.Store = attrs.field(factory=store.Store, init=False)
    logs: Callable[[str, str, Mapping[str, str]], bytes] | None = attrs.field(
        default=None, init=False
    )
    """What ``GET pods/NAME/log`` answers: ``(namespace, name, params)`` → the log, or an
    :class:`store.ApiError`; a kubelet sets it (the API server asks the node too)."""
    _direct: dict[Any, Any] = attrs.field(factory=dict, init=False)
    _baseline: list[Any] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for kind in (*BUILTINS, *rbac.KINDS):
            self.serve(kind)
        self._direct = {
            kmock.action.LIST: self.fallback[kmock.action.LIST] << self._list,
            kmock.action.WATCH: self.fallback[kmock.action.WATCH] << self._watch,
            kmock.action.FETCH: self.fallback[kmock.action.FETCH] << self._fetch,
            kmock.action.CREATE: self.fallback[kmock.action.CREATE] << self._create,
            kmock.action.UPDATE: self.fallback[kmock.action.UPDATE] << self._patch,
            kmock.action.DELETE: self.fallback[kmock.action.DELETE] << self._delete,
        }
        self._direct[kmock.method.PUT] = self.fallback[kmock.method.PUT] << self._put
        self._baseline = list(self._payloads)

    async def _handle(self, request: kmock.Request) -> Any:
        """A resource request goes straight to its fallback while a test has added no
        reaction: kmock finds a reaction by filtering every request served so far for each
        one (``request in view``), which grows with the run — quadratic over a long one."""
        resource = request.resource
        named = resource is not None and bool(resource.plural)  # not discovery (/apis/G/V)
        if not named:
            direct = None
        elif request.method == kmock.method.PUT:  # an update's action, but a replace
            direct = self._direct[kmock.method.PUT]
        else:
            direct = self._direct.get(request.action)
        untouched = len(self._payloads) == len(self._baseline) and all(
            a is b for a, b in zip(self._payloads, self._baseline, strict=True)
        )
        if direct is not None and untouched:
            return await direct(request)
        return await super()._handle(request)

    def serve(self, kind: store.Kind) -> None:
        """Serve ``kind``: discoverable, listable, watchable."""
        self.store.kinds[(kind.group, kind.plural)] = kind
        self.resources[kmock.resource(kind.group, kind.version, kind.plural)] = kmock.ResourceInfo(
            kind=kind.kind,
            singular=kind.kind.lower(),
            namespaced=kind.namespaced,
            verbs=_VERBS,
            shortnames=kind.short_names,
            categories=kind.categories,
            subresources={"status"} if kind.status else set(),
        )

    def read(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object, for assertions (``kind`` as ``plural.group``, e.g. ``pods``)."""
        plural, _, group = kind.partition(".")
        found = self.store.kinds[(group, plural)]
        return self.store.get(found, namespace, name)

    def exists(self, kind: str, namespace: str | None, name: str) -> bool:
        """Whether the object is stored (not yet removed)."""
        try:
            self.read(kind, namespace, name)
        except store.ApiError:
            return False
        return True

    async def _serve_version(self, request: kmock.Request) -> Any:
        # kmock writes the core group's groupVersion as "/v1"; the API server says "v1".
        answer = await super()._serve_version(request)
        if isinstance(answer, dict) and request.resource is not None and not request.resource.group:
            answer["groupVersion"] = request.resource.version
        return answer

    # -- routing ---------------------------------------------------------------------------

    def _kind(self, request: kmock.Request, verb: str) -> store.Kind:
        res = request.resource
        kind = None if res is None else self.store.kinds.get((res.group or "", res.plural or ""))
        if kind is None or res is None or res.version != kind.version:
            raise _error(store.ApiError(404, "NotFound", f"the server could not find {res}"))
        self._authorize(request, kind, verb)
        return kind

    def _authorize(self, request: kmock.Request, kind: store.Kind, verb: str) -> None:
        """RBAC for ServiceAccount tokens (:mod:`kube.rbac`): 403 when no rule allows it."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        resource = kind.plural + (f"/{request.subresource}" if request.subresource else "")
        why = rbac.refusal(
            self.store,
            token.strip() if scheme.lower() == "bearer" else None,
            group=kind.group,
            resource=resource,
            verb=verb,
            namespace=request.namespace,
            name=request.name,
        )
        if why is not None:
            raise _error(store.ApiError(403, "Forbidden", why))

    def _status(self, request: kmock.Request, kind: store.Kind) -> bool:
        if request.subresource is None:
            return False
        if request.subresource == "status" and kind.status:
            return True
        raise _error(store.ApiError(404, "NotFound", f"no subresource {request.subresource!r}"))

    async def _list(self, request: kmock.Request) -> dict[str, Any]:
        kind = self._kind(request, "list")
        with _translated():
            items = self.store.list(kind, request.namespace, self._selector(request))
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": {"resourceVersion": str(self.store.revision), "continue": ""},
            "items": items,
        }

    async def _watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        kind = self._kind(request, "watch")
        selector = self._selector(request)
        params = request.params
        since = params.get("resourceVersion")
        timeout = params.get("timeoutSeconds")
        events = self.store.watch(
            kind,
            request.namespace,
            selector,
            since=int(since) if since not in (None, "", "0") else None,
            initial_bookmark=params.get("sendInitialEvents") == "true",
            timeout=float(timeout) if timeout else None,
        )

        async def stream() -> AsyncIterator[Any]:
            yield b""  # send the headers now, even if nothing happens for a while
            async for event in events:
                yield event

        return stream()

    async def _fetch(self, request: kmock.Request) -> dict[str, Any] | bytes:
        kind = self._kind(request, "get")
        if request.subresource == "log" and (kind.group, kind.plural) == ("", "pods"):
            return self._log(request)
        self._status(request, kind)
        with _translated():
            return self.store.get(kind, request.namespace, _name(request))

    def _log(self, request: kmock.Request) -> bytes:
        with _translated():
            if self.logs is None:
                raise store.ApiError(404, "NotFound", "no node serves pod logs")
            namespace = request.namespace or "default"
            return self.logs(namespace, _name(request), dict(request.params))

    async def _create(self, request: kmock.Request) -> kmock.Response:
        kind = self._kind(request, "create")
        with _translated():
            body = self.store.create(kind, request.namespace, request.data)
            if kind is CRDS:
                body = self._install(body)
        return kmock.Response(status=201, payload=body)

    async def _put(self, request: kmock.Request) -> dict[str, Any]:
        kind = self._kind(request, "update")
        status = self._status(request, kind)
        with _translated():
            return self.store.replace(
                kind, request.namespace, _name(request), request.data, status=status
            )

    async def _patch(self, request: kmock.Request) -> dict[str, Any]:
        kind = self._kind(request, "patch")
        status = self._status(request, kind)
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        data = request.data

        def change(current: dict[str, Any]) -> Any:
            # The store refuses a result that is not an object (422).
            try:
                if content_type == "application/json-patch+json":
                    return patching.apply(current, data)
                # Merge patch; a strategic merge patch is treated as one (lists replace).
                return patching.merge(current, data)
            except patching.PatchError as err:
                raise store.ApiError(422, "Invalid", str(err)) from err

        with _translated():
            return self.store.patch(kind, request.namespace, _name(request), change, status=status)

    async def _delete(self, request: kmock.Request) -> dict[str, Any]:
        kind = self._kind(request, "delete")
        with _translated():
            body = self.store.delete(kind, request.namespace, _name(request))
            if kind is CRDS and not self.exists(
                "customresourcedefinitions.apiextensions.k8s.io", None, body["metadata"]["name"]
            ):
                self._uninstall(body)
            return body

    def _selector(self, request: kmock.Request) -> selectors.Requirement:
        try:
            return selectors.parse(request.params.get("labelSelector"))
        except selectors.SelectorError as err:
            raise _error(store.ApiError(400, "BadRequest", str(err))) from err

    # -- CRDs ------------------------------------------------------------------------------

    def _install(self, crd: dict[str, Any]) -> dict[str, Any]:
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            self.serve(
                store.Kind(
                    spec["group"],
                    version["name"],
                    names["plural"],
                    names["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    status="status" in (version.get("subresources") or {}),
                    schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                    short_names=tuple(names.get("shortNames", ())),
                    categories=tuple(names.get("categories", ())),
                )
            )
        established = [
            {
                "type": t,
                "status": "True",
                "reason": r,
                "message": "",
                "lastTransitionTime": store._now(),
            }
            for t, r in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))
        ]
        status = {
            "acceptedNames": names,
            "conditions": established,
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
        }
        return self.store.patch(
            CRDS,
            None,
            crd["metadata"]["name"],
            lambda body: {**body, "status": status},
            status=True,
        )

    def _uninstall(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        kinds = [
            k
            for k in self.store.kinds.values()
            if (k.group, k.plural) == (spec["group"], spec["names"]["plural"])
        ]
        for kind in kinds:
            for body in self.store.list(kind, None, lambda _labels: True):
                meta = body["metadata"]
                key = (kind.group, kind.plural, meta.get("namespace"), meta["name"])
                self.store.remove(kind, key)
            del self.store.kinds[(kind.group, kind.plural)]
            del self.resources[kmock.resource(kind.group, kind.version, kind.plural)]


def _name(request: kmock.Request) -> str:
    assert request.name is not None  # an UPDATE/DELETE/FETCH action always has a name
    return request.name


def _error(err: store.ApiError) -> kmock.KubernetesError:
    return kmock.KubernetesError(
        status=err.status, reason=err.reason, message=err.message, details={"causes": []}
    )


@contextlib.contextmanager
def _translated() -> Any:
    try:
        yield
    except store.ApiError as err:
        raise _error(err) from err


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[Emulator, str]]:
    """Run an emulator on a free 127.0.0.1 port; yield it and its base URL."""
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        yield emulator, str(server.url).rstrip("/")
