"""The emulator's object store: the API server semantics kopf and a reconciler rely on.

* server-set ``uid``, ``creationTimestamp``, a monotonic ``resourceVersion`` (one counter
  for the whole store, as etcd's revision), ``generation`` bumped on a change outside
  ``metadata`` and ``status``;
* optimistic concurrency: a stale ``metadata.resourceVersion`` in a write is 409;
* the status subresource: writes to the object ignore ``status``, writes to ``/status``
  change nothing but ``status``;
* deletion with finalizers (``deletionTimestamp`` first, removal once they are gone; new
  finalizers cannot be added while deleting) and cascading garbage collection of objects
  whose ``ownerReferences`` name a removed object;
* CRD-backed kinds get their schema's defaults and validation (OpenAPI + CEL): 422;
* an event history, so a watch can resume from any ``resourceVersion``;
* mutating admission: each of :attr:`Store.admission` may change a new object before it is
  stored, as a mutating webhook does (Kueue's adds its scheduling gate to queued pods).
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import datetime
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from support.kube import schemas

Body = dict[str, Any]
Key = tuple[str, str, str | None, str]  # group, plural, namespace, name


class ApiError(Exception):
    """An API answer other than success: HTTP status, Kubernetes reason, message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


@dataclass(frozen=True)
class Kind:
    """A served resource type."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False  # has the status subresource
    schema: dict[str, Any] | None = None
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass
class Event:
    rv: int
    kind: Kind
    type: str
    object: Body


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _labels(body: Body) -> dict[str, str]:
    return dict(body.get("metadata", {}).get("labels") or {})


def _content(body: Body) -> Body:
    """What ``generation`` tracks: everything but metadata and status."""
    return {k: v for k, v in body.items() if k not in ("metadata", "status")}


@dataclass
class Store:
    """All objects of all kinds, with their history of changes."""

    kinds: dict[tuple[str, str], Kind] = field(default_factory=dict)
    objects: dict[Key, Body] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    revision: int = 0
    closed: bool = False
    """Set by :meth:`close`: every watch ends (a server can stop without waiting for them)."""
    admission: list[Callable[[Kind, Body], None]] = field(default_factory=list)
    """Mutating webhooks: each changes a new object in place before it is checked and stored."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # -- reading ---------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> Body:
        key = self._key(kind, namespace, name)
        if key not in self.objects:
            raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
        return copy.deepcopy(self.objects[key])

    def list(
        self, kind: Kind, namespace: str | None, selector: Callable[[Any], bool]
    ) -> list[Body]:
        """Objects of ``kind`` (in ``namespace``, or everywhere when None), oldest first."""
        found = [
            copy.deepcopy(body)
            for (group, plural, ns, _), body in self.objects.items()
            if (group, plural) == (kind.group, kind.plural)
            and (namespace is None or ns == namespace)
            and selector(_labels(body))
        ]
        return sorted(found, key=lambda b: int(b["metadata"]["resourceVersion"]))

    # -- writing ---------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str | None, body: Any) -> Body:
        """Store a new object; the URL's namespace wins (a different one in the body is 400)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if kind.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key(kind, meta.get("namespace"), meta["name"])
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{meta["name"]}" already exists')
        if kind.status:
            body.pop("status", None)
        body["apiVersion"], body["kind"] = kind.api_version, kind.kind
        for server_set in ("resourceVersion", "deletionTimestamp", "generation", "uid"):
            meta.pop(server_set, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        for webhook in self.admission:
            webhook(kind, body)
        body = self._checked(kind, body, old=None)
        return self._commit(kind, key, body, "ADDED")

    def replace(
        self, kind: Kind, namespace: str | None, name: str, body: Any, *, status: bool
    ) -> Body:
        """PUT: the whole object (or only its status, through ``/status``)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        return self._update(kind, namespace, name, lambda _current: body, status=status)

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        change: Callable[[Body], Any],
        *,
        status: bool,
    ) -> Body:
        """PATCH: ``change`` computes the patched body from the current one."""
        return self._update(kind, namespace, name, change, status=status)

    def delete(self, kind: Kind, namespace: str | None, name: str) -> Body:
        """Mark for deletion while finalizers remain; otherwise remove (and collect dependents)."""
        key = self._key(kind, namespace, name)
        current = self.get(kind, namespace, name)
        meta = current["metadata"]
        if meta.get("finalizers"):
            if "deletionTimestamp" not in meta:
                meta["deletionTimestamp"] = _now()
                meta["deletionGracePeriodSeconds"] = 0
                return self._commit(kind, key, current, "MODIFIED")
            return current
        return self.remove(kind, key)

    # -- internals -------------------------------------------------------------------------

    def _update(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        change: Callable[[Body], Any],
        *,
        status: bool,
    ) -> Body:
        key = self._key(kind, namespace, name)
        current = self.get(kind, namespace, name)
        wanted = change(copy.deepcopy(current))
        if not isinstance(wanted, dict):
            raise ApiError(422, "Invalid", "the patched object is not a JSON object")
        sent_rv = (wanted.get("metadata") or {}).get("resourceVersion")
        if sent_rv not in (None, current["metadata"]["resourceVersion"]):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if status and kind.status:
            new = copy.deepcopy(current)
            if "status" in wanted:
                new["status"] = wanted["status"]
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(wanted)
            if kind.status:
                new.pop("status", None)
                if "status" in current:
                    new["status"] = current["status"]
            new["metadata"] = self._metadata(current["metadata"], wanted.get("metadata") or {})
            new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return current  # a no-op write keeps the resourceVersion, as the API server does
        if _content(new) != _content(current):
            new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        new = self._checked(kind, new, old=current)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.remove(kind, key)
        return self._commit(kind, key, new, "MODIFIED")

    @staticmethod
    def _metadata(current: Body, wanted: Body) -> Body:
        """The client's metadata, with the server-owned fields kept as they were."""
        merged = copy.deepcopy(wanted)
        for owned in ("uid", "creationTimestamp", "generation", "name", "namespace"):
            if owned in current:
                merged[owned] = current[owned]
            else:
                merged.pop(owned, None)
        for owned in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if owned in current:
                merged[owned] = current[owned]
        if "deletionTimestamp" in current:
            added = set(merged.get("finalizers") or []) - set(current.get("finalizers") or [])
            if added:
                raise ApiError(
                    422,
                    "Forbidden",
                    f"no new finalizers can be added if the object is being deleted: {added}",
                )
        return merged

    def _checked(self, kind: Kind, body: Body, old: Body | None) -> Body:
        if kind.schema is None:
            return body
        body = schemas.admit(kind.schema, body)
        found = schemas.problems(kind.schema, body, old)
        if found:
            name = body["metadata"].get("name")
            raise ApiError(422, "Invalid", f'{kind.kind} "{name}" is invalid: ' + "; ".join(found))
        return body

    def _commit(self, kind: Kind, key: Key, body: Body, type_: str) -> Body:
        self.revision += 1
        body["metadata"]["resourceVersion"] = str(self.revision)
        self.objects[key] = body
        self._record(kind, type_, body)
        return copy.deepcopy(body)

    def remove(self, kind: Kind, key: Key) -> Body:
        """Remove at once, finalizers or not (as when a CRD goes), collecting dependents."""
        body = self.objects.pop(key)
        self.revision += 1
        body["metadata"]["resourceVersion"] = str(self.revision)
        self._record(kind, "DELETED", body)
        self._collect(body["metadata"]["uid"])
        return copy.deepcopy(body)

    def _collect(self, owner_uid: str) -> None:
        """Cascade: delete every object owned by the removed one (background propagation)."""
        for key, body in list(self.objects.items()):
            owners = body["metadata"].get("ownerReferences") or []
            if key in self.objects and any(o.get("uid") == owner_uid for o in owners):
                kind = self.kind_of(key)
                self.delete(kind, key[2], key[3])

    def kind_of(self, key: Key) -> Kind:
        return self.kinds[(key[0], key[1])]

    def _key(self, kind: Kind, namespace: str | None, name: str) -> Key:
        return (kind.group, kind.plural, namespace if kind.namespaced else None, name)

    def _record(self, kind: Kind, type_: str, body: Body) -> None:
        self.events.append(Event(self.revision, kind, type_, copy.deepcopy(body)))
        # Wake every waiting watch; later waiters wait on a fresh event.
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        """End every watch now (their clients may be gone without the server noticing)."""
        self.closed = True
        self._changed.set()

    # -- watching --------------------------------------------------------------------------

    async def watch(
        self,
        kind: Kind,
        namespace: str | None,
        selector: Callable[[Any], bool],
        *,
        since: int | None,
        initial_bookmark: bool,
        timeout: float | None,
    ) -> AsyncIterator[Body]:
        """Events after ``since`` (or the current objects as ADDED first), until ``timeout``."""

        def wanted(event: Event) -> bool:
            meta = event.object["metadata"]
            return (
                (event.kind.group, event.kind.plural) == (kind.group, kind.plural)
                and (namespace is None or meta.get("namespace") == namespace)
                and selector(_labels(event.object))
            )

        if since is None:
            since = self.revision
            for body in self.list(kind, namespace, selector):
                yield {"type": "ADDED", "object": body}
            if initial_bookmark:
                yield self._bookmark(kind, initial=True)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.closed:
            # Events are in revision order: start after the last one this watch has seen.
            fresh = self.events[bisect.bisect_right(self.events, since, key=lambda e: e.rv) :]
            for event in fresh:
                since = event.rv
                if wanted(event):
                    yield {"type": event.type, "object": copy.deepcopy(event.object)}
            if fresh:
                continue
            changed = self._changed
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return

    def _bookmark(self, kind: Kind, *, initial: bool) -> Body:
        annotations = {"k8s.io/initial-events-end": "true"} if initial else {}
        return {
            "type": "BOOKMARK",
            "object": {
                "apiVersion": kind.api_version,
                "kind": kind.kind,
                "metadata": {"resourceVersion": str(self.revision), "annotations": annotations},
            },
        }
