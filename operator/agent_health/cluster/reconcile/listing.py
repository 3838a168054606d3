"""Discovery pods and what they list: the tests of a RunSpec's suite.

A RunSpec's discovery pod runs ``agent-health list --json``; when it ends,
:meth:`Discoveries.observe` (fed by pod watch events, or a fetched pod) reads the listing
from its termination message, else its log. The full listing (labels and titles, which
EvaluationRuns select on) is kept in memory and read again from the discovery pod after a
restart (:meth:`Discoveries.tests`). The operator never imports user code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from agent_health.cluster import errors, kube
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import discovery, kueue

LOG_LIMIT = 8 * 1024 * 1024
Key = tuple[str, str]  # namespace, pod name


@dataclasses.dataclass(frozen=True)
class Test:
    """One test as ``agent-health list --json`` describes it."""

    id: str
    title: str
    file: str = ""
    line: int = 0
    labels: tuple[str, ...] = ()
    content_hash: str = ""
    mode: str = "run"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A finished discovery: its tests, or why it failed."""

    tests: tuple[Test, ...] = ()
    error: str | None = None


def parse_listing(text: str, *, pod: str) -> tuple[Test, ...]:
    """The tests in ``list --json`` output; a clear :class:`errors.SpecError` otherwise."""
    try:
        items = json.loads(text)
        if not isinstance(items, list):
            raise TypeError(f"a JSON list was expected, got {type(items).__name__}")
        return tuple(
            Test(
                id=str(item["id"]),
                title=str(item.get("title") or item["id"]),
                file=str(item.get("file") or ""),
                line=int(item.get("line") or 0),
                labels=tuple(str(label) for label in item.get("labels") or ()),
                content_hash=str(item.get("content_hash") or ""),
                mode=str(item.get("mode") or "run"),
            )
            for item in items
        )
    except (ValueError, TypeError, KeyError) as err:
        raise errors.SpecError(
            f"discovery pod {pod}: its output is not `agent-health list --json` ({err})"
        ) from err


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == discovery.CONTAINER:
            return (container.get("state") or {}).get("terminated") or {}
    return {}


class Discoveries:
    """Finished discovery pods by (namespace, name), and the handlers waiting for them."""

    def __init__(self, api: kube.Client) -> None:
        self._api = api
        self._outcomes: dict[Key, Outcome] = {}
        self._ended: dict[Key, asyncio.Event] = {}

    async def observe(self, pod: Mapping[str, Any]) -> Outcome | None:
        """Read a discovery pod that has ended (a watch event, or a fetched pod)."""
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed") or kueue.preempted(pod) is not None:
            return None  # a pod Kueue preempted tells nothing: the next reconcile makes another
        if key in self._outcomes:
            return self._outcomes[key]
        terminated = _terminated(pod)
        message = str(terminated.get("message") or "")
        if phase == "Failed":
            reason = (pod.get("status") or {}).get("reason") or terminated.get("reason") or "Error"
            tail = message.strip()[-1500:] or "(no output)"
            outcome = Outcome(error=f"discovery pod {key[1]} failed ({reason}): {tail}")
        else:
            outcome = await self._read(key, message)
        self._outcomes[key] = outcome
        self._ended.setdefault(key, asyncio.Event()).set()
        return outcome

    async def _read(self, key: Key, message: str) -> Outcome:
        try:
            return Outcome(tests=parse_listing(message, pod=key[1]))
        except errors.SpecError:
            pass  # a listing longer than a termination message: read the log
        try:
            text = await self._api.log(*key, discovery.CONTAINER, limit=LOG_LIMIT)
            return Outcome(tests=parse_listing(text, pod=key[1]))
        except errors.SpecError as err:
            return Outcome(error=str(err))

    async def wait(self, key: Key, timeout: float) -> Outcome | None:
        """The pod's outcome once it ends, or ``None`` after ``timeout`` seconds."""
        if key in self._outcomes:
            return self._outcomes[key]
        ended = self._ended.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(ended.wait(), timeout)
        except TimeoutError:
            return None
        return self._outcomes.get(key)

    async def tests(self, spec: runspec.RunSpec) -> Outcome | None:
        """The listing of ``spec``'s current discovery (read from its pod after a restart)."""
        status = spec.status or runspec.Status()
        namespace = str(spec.metadata.get("namespace"))
        key = (namespace, discovery.discovery_name(spec, status.image_digests))
        if key in self._outcomes:
            return self._outcomes[key]
        try:
            pod = await self._api.get(kube.PODS, *key)
        except kube.ApiError as err:
            if err.status == 404:
                return None
            raise
        return await self.observe(pod)
