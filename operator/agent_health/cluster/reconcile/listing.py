"""Discovery pods and what they list: the tests of a RunSpec's suite, its MCP peers' tools.

A RunSpec's discovery pod runs ``agent-health list --json`` (and, beside its MCP peers,
``agent-health mcp tools``); when it ends, :meth:`Discoveries.observe` (fed by pod watch
events, or a fetched pod) reads each listing from its container's termination message, else
its log. A peer that could not list its tools fails the discovery, naming the peer and why.
The full listing (labels and titles, which EvaluationRuns select on) is kept in memory and
read again from the discovery pod after a restart (:meth:`Discoveries.tests`). The operator
never imports user code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_health.cluster import errors, kube
from agent_health.cluster.api import runspec
from agent_health.cluster.cells import discovery, kueue
from agent_health.ledger import strictjson

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
    """A finished discovery: its tests and its MCP peers' tools, or why it failed."""

    tests: tuple[Test, ...] = ()
    error: str | None = None
    mcp_tools: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Each MCP peer → the tools it listed."""


def parse_tools(text: str, *, pod: str, peers: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each peer's tools in ``agent-health mcp tools`` output; a clear
    :class:`errors.SpecError` naming the first peer that listed none, or output that is not
    that command's."""
    try:
        found = strictjson.loads(text)["peers"]
        listed = {name: found[name] for name in peers}
    except (ValueError, TypeError, KeyError) as err:
        raise errors.SpecError(
            f"discovery pod {pod}: its {discovery.TOOLS} output is not `agent-health mcp tools` "
            f"({type(err).__name__}: {err})"
        ) from err
    tools: dict[str, tuple[str, ...]] = {}
    for name, answer in listed.items():
        names = answer.get("tools") if isinstance(answer, dict) else None
        if not isinstance(names, list) or not all(
            isinstance(n, str) and 0 < len(n) <= 128 for n in names
        ):
            why = answer.get("error") if isinstance(answer, dict) else None
            raise errors.SpecError(
                f"MCP peer {name} did not list its tools (tools/list) when the RunSpec "
                f"resolved: {str(why or answer)[:1000]}"
            )
        tools[name] = tuple(names[: runspec.MAX_PEER_TOOLS])
    return tools


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


def _terminated(pod: Mapping[str, Any], name: str = discovery.CONTAINER) -> Mapping[str, Any]:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == name:
            return (container.get("state") or {}).get("terminated") or {}
    return {}


def _failing(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The container that failed a failed discovery pod, and how it ended: the first that
    exited non-zero (the listing's own first), else the listing."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != discovery.CONTAINER)
    for status in ordered:
        ended = (status.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode") not in (None, 0):
            return str(status.get("name")), ended
    return discovery.CONTAINER, _terminated(pod)


def _peers_listed(pod: Mapping[str, Any]) -> list[str]:
    """The MCP peers the pod's tools container asks (none without one)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == discovery.TOOLS:
            args = container.get("args") or []
            return [str(a).partition("=")[0] for a in args[2:]]
    return []


def _unstarted(pod: Mapping[str, Any]) -> str:
    """Which peers of a failed pod never started, and why (its sidecars' states)."""
    said = []
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("started") or status.get("ready"):
            continue
        state = status.get("state") or {}
        waiting, ended = state.get("waiting") or {}, state.get("terminated") or {}
        why = waiting.get("reason") or ended.get("reason") or "not started"
        detail = waiting.get("message") or ended.get("message") or ""
        said.append(f"{status.get('name')}: {why}" + (f" ({str(detail)[-300:]})" if detail else ""))
    return "; MCP peers that did not start: " + "; ".join(said) if said else ""


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
            failing, ended = _failing(pod)
            if failing != discovery.CONTAINER:  # the listing ended well; another did not
                message = str(ended.get("message") or "")
            reason = (pod.get("status") or {}).get("reason") or ended.get("reason") or "Error"
            tail = message.strip()[-1500:] or "(no output)"
            which = f"its {failing} container " if failing != discovery.CONTAINER else ""
            error = f"discovery pod {key[1]} {which}failed ({reason}): {tail}{_unstarted(pod)}"
            outcome = Outcome(error=error)
        else:
            outcome = await self._read(key, message)
            peers = _peers_listed(pod)
            if outcome.error is None and peers:
                outcome = await self._read_tools(key, pod, peers, outcome)
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

    async def _read_tools(
        self, key: Key, pod: Mapping[str, Any], peers: list[str], tests: Outcome
    ) -> Outcome:
        message = str(_terminated(pod, discovery.TOOLS).get("message") or "")
        try:
            return dataclasses.replace(
                tests, mcp_tools=parse_tools(message, pod=key[1], peers=peers)
            )
        except errors.SpecError:
            pass  # no listing in the termination message: read the log
        try:
            text = await self._api.log(*key, discovery.TOOLS, limit=LOG_LIMIT)
            return dataclasses.replace(tests, mcp_tools=parse_tools(text, pod=key[1], peers=peers))
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
