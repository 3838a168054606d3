"""Tool calls the agent claims, checked against what its gateway saw: a cell's (the operator
grades with it) and a local run's in-process one (the engine does, after the body).

A RunSpec peer may declare the tools it serves (``peers[].tools``); an MCP peer's tools are
also those the gateway saw it list or be called for. The agent's trajectory is its own word;
the gateway's ledger records every call the target made to each peer, in order: for a plain
peer a request (which could have been any of its tools), for an MCP peer each ``tools/call``
with the tool's name, arguments and ``isError`` (:class:`Sighting`). For a declared tool, the
grader holds the claim to the record (:class:`Sightings` decides, in one place, which
recorded calls could have been a given tool; every check below asks it):

* ``to_have_called_tool(NAME...)`` that passed on the trajectory fails when the gateway
  recorded fewer calls that could have been NAME than the trajectory claims of the tools
  those calls could have been (and at least one): "claimed by the agent, not seen by the
  gateway";
* ``to_have_called_tools_in_order([...])`` that passed fails unless the gateway's calls, in
  the order it recorded them, hold the declared tools of the list in that order, each call
  standing for one tool;
* ``to_have_called_tools_in_steps([[...], ...])`` that passed fails unless the gateway's
  calls hold each step's declared tools, each on a call of its own, after the calls that met
  the step before;
* calls the gateway recorded that the trajectory leaves out are evidence too: an observe-role
  signal per peer says how many;
* token metrics come from the gateway's record of the target's model calls when there is one
  (:func:`tokens`);
* every signal says where its evidence came from: ``evidence.source`` is ``gateway`` for the
  checked ones and ``agent`` for the rest (taken on the agent's word). The tools of a list
  that no peer declares stand on the agent's word; the rest of the list is checked.

* ``to_have_called_tool(NAME, args, server=...)`` on an MCP tool is held to the calls the
  gateway read by name: of that server when the matcher names one, with arguments that
  include ``args`` (JSON values);
* ``not_to_have_called_tool(NAME)`` that passed fails when the gateway read an MCP call of
  NAME (with the plain-JSON ``args`` asked about): a call the agent left out of its
  trajectory is still a call;
* ``to_have_no_tool_errors()`` that passed fails when the gateway saw an MCP tool answer
  ``isError``, and :func:`as_seen` marks those results failed in the trajectory
  the report, the metrics (``ignored_tool_errors``) and insights read, with each MCP call's
  server, and the MCP calls the agent left out added, ``"source": "gateway"``.

A plain peer's calls are requests, not tool names: such a call could have been any tool the
peer serves, so a peer that serves several tools is checked by count and order of calls, all
its tools together. A check never turns a failed signal into a passed one.

One concept: the agent's tool claims against the gateway's record — reading the record
into sightings, the one decision of which call could have been which tool, each matcher's
check on it, and the run as the gateway saw it — for both graders alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent_health.connectors import protocol
from agent_health.ledger import objects
from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results

NOT_SEEN = "claimed by the agent, not seen by the gateway"
NOT_IN_ORDER = "the gateway saw no calls in the claimed order"
NOT_IN_STEPS = "the gateway saw no calls in the claimed steps"
OMITTED = "recorded by the gateway, left out of the trajectory"
MATCHER = "to_have_called_tool("
IN_ORDER = "to_have_called_tools_in_order("
IN_STEPS = "to_have_called_tools_in_steps("
NO_ERRORS = "to_have_no_tool_errors("
NOT_CALLED = "not_to_have_called_tool("
CALLED_UNREPORTED = "the gateway saw the agent call it"
ERRORED = "the gateway saw the MCP server answer isError"
NOT_SEEN_AS_CALLED = "the gateway saw no such call: not of this server, or not with these arguments"
SHOWN_CALLS = 50
"""The gateway's calls an order check shows in its evidence (the first ones)."""


@dataclass(frozen=True)
class PeerCalls:
    """What a run's gateway has on record of one run id's calls to peers, as JSON objects
    (``exchange`` and ``mcp`` records): the local run's in-process gateway's, or a cell
    gateway's, asked on its admin listener."""

    records: list[dict[str, Any]]
    whole: bool = True
    """False when the gateway kept fewer than its ledger holds (a cell gateway keeps a bounded
    copy readable): the claims are then left to the grader, who reads the ledger."""


@dataclass(frozen=True)
class Checked:
    """The signals with their sources (some failed by the record), and the claims unseen."""

    signals: list[results.Signal]
    unverified: int


@dataclass(frozen=True)
class Sighting:
    """One call the gateway recorded from the target to a peer."""

    peer: str
    """The peer's name (``NAME`` of ``peer:NAME``)."""
    tool: str | None = None
    """The MCP tool it called, as the gateway read it; ``None``: a plain peer's request,
    which could have been any tool the peer serves."""
    arguments: Mapping[str, Any] | None = None
    is_error: bool | None = None
    """The MCP result's ``isError`` (``None``: no result read)."""


class Sightings:
    """What the gateway saw the target call, in the order it recorded the calls, and which of
    those calls could have been a given tool: the one place that decides it."""

    def __init__(
        self, calls: Sequence[str | Sighting], peer_tools: Mapping[str, Sequence[str]]
    ) -> None:
        """``calls``: each recorded target → ``peer:NAME`` call, in order (a peer's name
        alone: a plain peer's request); ``peer_tools``: peer name → the tools it serves."""
        self.calls = [c if isinstance(c, Sighting) else Sighting(c) for c in calls]
        self.peer_tools = peer_tools
        self._served: dict[str, set[str]] = {}
        for peer, tools in peer_tools.items():
            for tool in tools:
                self._served.setdefault(tool, set()).add(peer)

    def checked(self, tool: str | None) -> bool:
        """Whether the gateway's record can speak for ``tool``: a declared peer serves it."""
        return tool is not None and tool in self._served

    def peer(self, tool: str) -> str:
        """The peer that serves ``tool`` (a :meth:`checked` one; several: comma-separated)."""
        return ",".join(sorted(self._served[tool]))

    def could_be(self, call: int, tool: str, server: str | None = None) -> bool:
        """Whether the gateway's ``call`` (its position) could have been ``tool`` (of
        ``server``, when given): an MCP call of that very tool, or a plain peer's call to
        the peer that serves it (the gateway does not see which of its tools)."""
        seen = self.calls[call]
        if server is not None and seen.peer != server:
            return False
        if seen.peer not in self._served.get(tool, ()):
            return False
        return seen.tool is None or seen.tool == tool

    def seen(self, tool: str, server: str | None = None) -> int:
        """How many recorded calls could have been ``tool``."""
        return sum(self.could_be(n, tool, server) for n in range(len(self.calls)))

    def with_arguments(self, tool: str, server: str | None, args: Mapping[str, Any]) -> int:
        """How many recorded MCP calls of ``tool`` carried arguments that include ``args``."""
        count = 0
        for n, call in enumerate(self.calls):
            given = call.arguments
            if given is not None and self.could_be(n, tool, server) and _includes(given, args):
                count += 1
        return count

    def share(self, tool: str, other: str | None) -> bool:
        """Whether a recorded call that could have been ``tool`` could have been ``other``
        instead (claims of the two compete for the same calls)."""
        if not self.checked(other) or other is None:
            return False
        if other == tool:
            return True
        # An MCP call names its tool: it answers only claims of that tool. A plain peer's
        # call answers a claim of any tool the peer serves.
        plain = {c.peer for c in self.calls if c.tool is None}
        return bool(self._served[other] & self._served.get(tool, set()) & plain)

    def errors(self) -> list[Sighting]:
        """The MCP calls whose result said ``isError``."""
        return [c for c in self.calls if c.is_error]

    def in_order(self, tools: Sequence[str]) -> bool:
        """Whether the recorded calls hold ``tools`` in this order, one call each (others may
        come between)."""
        at = 0
        for tool in tools:
            while at < len(self.calls) and not self.could_be(at, tool):
                at += 1
            if at == len(self.calls):
                return False
            at += 1
        return True

    def in_steps(self, groups: Sequence[Sequence[str]]) -> tuple[int, str] | None:
        """(step index, tool) of the first tool of ``groups`` with no recorded call of its own
        after the calls that met the step before, or ``None`` when every step is met. Each
        tool takes the earliest free call that could have been it: finishing a step as early
        as possible leaves the most calls to the next."""
        start = 0
        for index, group in enumerate(groups):
            taken: set[int] = set()
            for tool in group:
                free = (
                    n
                    for n in range(start, len(self.calls))
                    if n not in taken and self.could_be(n, tool)
                )
                call = next(free, None)
                if call is None:
                    return index, tool
                taken.add(call)
            start = max(taken) + 1
        return None

    def shown(self) -> dict[str, Any]:
        """The recorded calls, for a signal's evidence (bounded)."""
        shown = [
            f"peer:{c.peer}" if c.tool is None else f"peer:{c.peer}/{c.tool}"
            for c in self.calls[:SHOWN_CALLS]
        ]
        return {"gateway_calls": shown, "gateway_call_count": len(self.calls)}


def from_objects(
    recorded: Sequence[Mapping[str, Any]], mcp: Collection[str] = ()
) -> tuple[list[Sighting], dict[str, set[str]]]:
    """The target's calls to peers among ``recorded`` (``exchange`` and ``mcp`` records as
    their JSON objects: a cell's or a local run's) in the order they started, and the tools
    each MCP peer showed (listed, or was called for). A peer with ``mcp`` records, or named
    in ``mcp`` (a RunSpec's ``protocol: mcp`` peers), is an MCP server: its calls are its
    ``tools/call`` records (its other exchanges — initialize, tools/list, notifications —
    are no tool's); a plain peer's calls are its exchanges. An exchange that carries its MCP
    calls (version 5) reads as those calls and the exchange (``objects.unfold``)."""
    mine = [r for r in objects.unfold(recorded) if r.get("principal") == "target"]
    shown: dict[str, set[str]] = {}
    for record in mine:
        if record.get("kind") != "mcp":
            continue
        tools = shown.setdefault(str(record.get("server", "")).removeprefix("peer:"), set())
        name, result = record.get("name"), record.get("result")
        if record.get("method") == "tools/call" and isinstance(name, str) and name:
            tools.add(name)
        elif record.get("method") == "tools/list" and isinstance(result, dict):
            listed = result.get("tools")
            for tool in listed if isinstance(listed, list) else ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    tools.add(tool["name"])
    calls: list[tuple[datetime, int, Sighting]] = []
    for n, record in enumerate(mine):
        kind, name = record.get("kind"), record.get("name")
        if kind == "exchange":
            peer = str(record.get("upstream", ""))
            if not peer.startswith("peer:") or record.get("status") is None:
                continue  # not a peer's, or it never reached one
            if peer.removeprefix("peer:") in shown or peer.removeprefix("peer:") in mcp:
                continue  # an MCP peer's: its calls are its mcp records
            sighting = Sighting(peer.removeprefix("peer:"))
        elif kind == "mcp" and record.get("method") == "tools/call" and isinstance(name, str):
            args = record.get("arguments")
            sighting = Sighting(
                str(record.get("server", "")).removeprefix("peer:"),
                name,
                args if isinstance(args, dict) else None,
                record.get("is_error") if isinstance(record.get("is_error"), bool) else None,
            )
        else:
            continue
        calls.append((_started(record), n, sighting))
    # Recorded as they ended (an MCP call when its answer came): ordered by when they began.
    calls.sort(key=lambda c: (c[0], c[1]))
    return [sighting for _, _, sighting in calls], shown


def _started(record: Mapping[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(record.get("started_at")))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


REPORTED_CALLS = 200
"""The most MCP calls a test's report lists (the ledger cell has them all)."""


def reported(recorded: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The target's MCP calls among ``recorded`` as a report shows them (``mcp_calls``):
    server, method, tool, arguments, ``isError``, error and what could not be read; their
    results stay in the ledger cell."""
    fields = ("server", "method", "name", "arguments", "is_error", "error", "problem")
    calls = [
        {name: record.get(name) for name in fields}
        for record in objects.unfold(recorded)
        if record.get("kind") == "mcp" and record.get("principal") == "target"
    ]
    return tuple(calls[:REPORTED_CALLS])


def served(
    declared: Mapping[str, Sequence[str]], shown: Mapping[str, set[str]]
) -> dict[str, list[str]]:
    """Each peer's tools: those it declares (a RunSpec's ``peers[].tools``) and those an MCP
    peer showed the gateway (listed, or was called for)."""
    out = {peer: list(tools) for peer, tools in declared.items()}
    for peer, tools in shown.items():
        out[peer] = sorted({*out.get(peer, ()), *tools})
    return out


def _includes(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """Whether ``actual`` holds every key of ``expected`` with an equal value (nested
    mappings as subsets, as the matcher's ``args`` are)."""
    for key, want in expected.items():
        if key not in actual:
            return False
        got = actual[key]
        if isinstance(want, Mapping) and isinstance(got, Mapping):
            if not _includes(got, want):
                return False
        elif got != want:
            return False
    return True


def check(
    signals: Sequence[results.Signal],
    run: results.RunResult | None,
    calls: Sequence[str | Sighting],
    peer_tools: Mapping[str, Sequence[str]],
) -> Checked:
    """Hold the tool claims of ``run`` to ``calls`` (each target → ``peer:NAME`` call the
    gateway recorded, in order) for the tools each peer serves."""
    seen = Sightings(calls, peer_tools)
    # Checked signals may be checked again (a cell's controller checks, then the operator):
    # the observations of calls left out are made afresh, not added twice.
    signals = [s for s in signals if not _omission(s)]
    claimed_tools = [
        step.tool_name
        for step in (run.trajectory if run is not None else ())
        if step.type == "tool_call" and seen.checked(step.tool_name)
    ]
    checked = [_checked(s, seen, claimed_tools) for s in signals]
    claimed = Counter(seen.peer(tool) for tool in claimed_tools if tool is not None)
    recorded = Counter(c.peer for c in seen.calls)
    by_tool = Counter(claimed_tools)
    for peer in peer_tools:
        extra = recorded[peer] - claimed[peer]
        if extra > 0:
            read = Counter(c.tool for c in seen.calls if c.peer == peer and c.tool is not None)
            tools = {t: n - by_tool[t] for t, n in sorted(read.items()) if n > by_tool[t]}
            checked.append(_omitted(peer, extra, claimed[peer], recorded[peer], tools))
    unseen = {peer: max(0, n - recorded[peer]) for peer, n in claimed.items()}
    return Checked(checked, sum(unseen.values()))


def _checked(
    signal: results.Signal, seen: Sightings, claimed_tools: Sequence[str | None]
) -> results.Signal:
    evidence = dict(signal.evidence or {})
    if signal.kind == "deterministic":
        if signal.name.startswith(MATCHER):
            return _called(signal, evidence, seen, claimed_tools)
        if signal.name.startswith((IN_ORDER, IN_STEPS)):
            return _ordered(signal, evidence, seen)
        if signal.name.startswith(NO_ERRORS) and seen.errors():
            return _errored(signal, evidence, seen)
        if signal.name.startswith(NOT_CALLED):
            return _not_called(signal, evidence, seen)
    evidence.setdefault("source", "agent")
    return signal.model_copy(update={"evidence": evidence})


def _called(
    signal: results.Signal,
    evidence: dict[str, Any],
    seen: Sightings,
    claimed_tools: Sequence[str | None],
) -> results.Signal:
    """``to_have_called_tool``: as many recorded calls as the claims they could answer."""
    tool = _tool_of(evidence)
    if tool is None or not seen.checked(tool):
        evidence.setdefault("source", "agent")
        return signal.model_copy(update={"evidence": evidence})
    server = _server_of(evidence)
    claims = sum(seen.share(tool, other) for other in claimed_tools)
    recorded = seen.seen(tool, server)
    evidence |= {
        "source": "gateway",
        "peer": f"peer:{server}" if server else f"peer:{seen.peer(tool)}",
        "claimed_calls_to_peer": claims,
        "gateway_calls_to_peer": recorded,
    }
    if not signal.passed:
        return signal.model_copy(update={"evidence": evidence})
    if recorded < max(claims, 1) and (server is None or seen.seen(tool) < max(claims, 1)):
        return _failed(signal, evidence, NOT_SEEN)
    if recorded == 0:  # seen, but of another server than the matcher names
        return _failed(signal, evidence, NOT_SEEN_AS_CALLED)
    args = _args_of(evidence)
    if args is not None and any(c.tool is not None for c in seen.calls):
        matching = seen.with_arguments(tool, server, args)
        evidence["gateway_calls_with_args"] = matching
        if not matching:
            return _failed(signal, evidence, NOT_SEEN_AS_CALLED)
    return signal.model_copy(update={"evidence": evidence})


def _not_called(
    signal: results.Signal, evidence: dict[str, Any], seen: Sightings
) -> results.Signal:
    """``not_to_have_called_tool``: no MCP call of the tool the gateway read (with the
    plain-JSON ``args``, when given) — a call the agent made and left out of its trajectory
    fails it as one it reported does."""
    tool = _tool_of(evidence)
    named = [c for c in seen.calls if c.tool is not None and c.tool == tool]
    if tool is None or not seen.checked(tool):
        evidence.setdefault("source", "agent")
        return signal.model_copy(update={"evidence": evidence})
    args = _args_of(evidence)
    if args is not None:
        named = [c for c in named if c.arguments is not None and _includes(c.arguments, args)]
    evidence |= {
        "source": "gateway",
        "gateway_calls_of_tool": [
            {"server": f"peer:{c.peer}", "arguments": dict(c.arguments or {})}
            for c in named[:SHOWN_CALLS]
        ],
    }
    if signal.passed and named:
        return _failed(signal, evidence, CALLED_UNREPORTED)
    return signal.model_copy(update={"evidence": evidence})


def _errored(signal: results.Signal, evidence: dict[str, Any], seen: Sightings) -> results.Signal:
    """``to_have_no_tool_errors``: no MCP tool the gateway saw answered ``isError``."""
    failures = [
        {"server": f"peer:{c.peer}", "tool": c.tool, "arguments": dict(c.arguments or {})}
        for c in seen.errors()
    ]
    evidence |= {"source": "gateway", "gateway_tool_errors": failures[:SHOWN_CALLS]}
    if signal.passed:
        return _failed(signal, evidence, ERRORED)
    return signal.model_copy(update={"evidence": evidence})


def _ordered(signal: results.Signal, evidence: dict[str, Any], seen: Sightings) -> results.Signal:
    """``to_have_called_tools_in_order`` / ``..._in_steps``: the declared tools of the list,
    in the gateway's order of calls."""
    in_steps = signal.name.startswith(IN_STEPS)
    wanted = evidence.get("expected")
    groups = _groups(wanted, in_steps)
    if groups is None:  # not the evidence the matcher writes: nothing to hold it to
        evidence.setdefault("source", "agent")
        return signal.model_copy(update={"evidence": evidence})
    checked = [[tool for tool in group if seen.checked(tool)] for group in groups]
    checked = [group for group in checked if group]
    if not checked:
        evidence.setdefault("source", "agent")
        return signal.model_copy(update={"evidence": evidence})
    evidence |= {"source": "gateway", "checked_tools": checked if in_steps else checked[0]}
    evidence |= seen.shown()
    if not signal.passed:
        return signal.model_copy(update={"evidence": evidence})
    if in_steps:
        broken = seen.in_steps(checked)
        if broken is not None:
            evidence["gateway_broken_at"] = {"step": broken[0] + 1, "tool": broken[1]}
            return _failed(signal, evidence, NOT_IN_STEPS)
    elif not seen.in_order(checked[0]):
        return _failed(signal, evidence, NOT_IN_ORDER)
    return signal.model_copy(update={"evidence": evidence})


def _groups(wanted: Any, in_steps: bool) -> list[list[str]] | None:
    """The matcher's expected tools as steps (a list of tools is one step), if well formed."""
    if not isinstance(wanted, list):
        return None
    groups = wanted if in_steps else [wanted]
    if not all(isinstance(g, list) and all(isinstance(t, str) for t in g) for g in groups):
        return None
    return [list(group) for group in groups]


def _failed(signal: results.Signal, evidence: dict[str, Any], problem: str) -> results.Signal:
    evidence["problem"] = problem
    return signal.model_copy(
        update={"passed": False, "score": 0.0, "evidence": evidence, "error": problem}
    )


def _omitted(
    peer: str, extra: int, claimed: int, seen: int, tools: Mapping[str, int]
) -> results.Signal:
    """An observation of calls the gateway saw that the trajectory leaves out (for an MCP
    peer, which of its tools: ``omitted_tools``, tool → calls)."""
    evidence: dict[str, Any] = {
        "source": "gateway",
        "problem": OMITTED,
        "omitted_calls": extra,
        "claimed_calls_to_peer": claimed,
        "gateway_calls_to_peer": seen,
    }
    if tools:
        evidence["omitted_tools"] = dict(tools)
    return results.Signal(
        kind="deterministic",
        role="observe",
        name=f"calls to peer:{peer} the trajectory omits",
        passed=None,
        evidence=evidence,
    )


def _omission(signal: results.Signal) -> bool:
    """Whether ``signal`` is an observation :func:`check` made of calls left out."""
    evidence = signal.evidence or {}
    return (
        signal.kind == "deterministic"
        and signal.role == "observe"
        and evidence.get("source") == "gateway"
        and evidence.get("problem") == OMITTED
    )


def _server_of(evidence: Mapping[str, Any]) -> str | None:
    """The MCP server a ``to_have_called_tool(..., server=)`` named (``NAME``), if any."""
    for part in evidence.values():
        if isinstance(part, dict) and isinstance(part.get("server"), str):
            return str(part["server"]).removeprefix("peer:")
    return None


def _args_of(evidence: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``args`` a ``to_have_called_tool`` matcher asked for, when they are plain JSON
    (a regex or a function the gateway's record cannot be held to is left out)."""
    for part in evidence.values():
        if isinstance(part, dict) and "tool" in part:
            args = part.get("args")
            return args if isinstance(args, dict) and _plain(args) else None
    return None


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def as_seen(
    run: results.RunResult | None, calls: Sequence[str | Sighting]
) -> results.RunResult | None:
    """``run`` as the gateway saw it: each tool step of an MCP call says the ``server`` that
    answered it (the n-th call of a tool for the n-th MCP call of it the gateway read); each
    result the server answered ``isError`` is marked failed (``"source": "gateway"``), so the
    metrics (``ignored_tool_errors``) and insights count the errors the agent did not report;
    and each MCP call the gateway read that the trajectory leaves out is added at its end,
    ``"source": "gateway"`` — the trajectory says where each step came from."""
    if run is None:
        return None
    read: dict[str, list[Sighting]] = {}
    for call in calls:
        if isinstance(call, Sighting) and call.tool is not None:
            read.setdefault(call.tool, []).append(call)
    if not read:
        return run
    steps: list[protocol.Step] = []
    answered: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    for step in run.trajectory:
        name = step.tool_name or ""
        seen = read.get(name, [])
        if step.type == "tool_call" and name in read:
            n = reported[name]
            reported[name] += 1
            if n < len(seen) and step.server is None:
                step = _with(step, server=f"peer:{seen[n].peer}")
        elif step.type == "tool_result" and name in read:
            n = answered[name]
            answered[name] += 1
            if n < len(seen):
                extra: dict[str, Any] = {}
                if step.server is None:
                    extra["server"] = f"peer:{seen[n].peer}"
                if seen[n].is_error and not step.failed:
                    extra |= {"status": "error", "source": "gateway"}
                step = _with(step, **extra) if extra else step
        steps.append(step)
    for name, seen in read.items():
        for call in seen[reported[name] :]:  # made, and left out of the trajectory
            server = f"peer:{call.peer}"
            steps.append(_gateway_step("tool_call", name, server, tool_args=call.arguments))
            if call.is_error is not None:
                status = "error" if call.is_error else "ok"
                steps.append(_gateway_step("tool_result", name, server, status=status))
    return run.model_copy(update={"trajectory_steps": tuple(steps)})


def _with(step: protocol.Step, **fields: Any) -> protocol.Step:
    return protocol.Step.model_validate({**_plain_step(step), **fields})


def _gateway_step(kind: str, tool: str, server: str, **fields: Any) -> protocol.Step:
    given = {k: v for k, v in fields.items() if v is not None}
    return protocol.Step.model_validate(
        {"type": kind, "tool_name": tool, "server": server, "source": "gateway", **given}
    )


def _plain_step(step: protocol.Step) -> dict[str, Any]:
    return step.model_dump(mode="json")


def _tool_of(evidence: Mapping[str, Any]) -> str | None:
    """The tool a ``to_have_called_tool`` matcher checked, from its evidence."""
    for part in evidence.values():
        if isinstance(part, dict) and isinstance(part.get("tool"), str):
            return str(part["tool"])
    return None


def tokens(usage: Mapping[str, ledger_usage.TokenUsage]) -> dict[str, int]:
    """Token metrics from the gateway's record of the target's model calls (its model is a
    declared peer), to replace what the agent says it used; empty when there is none."""
    model = usage.get("target")
    if model is None:
        return {}
    return {
        "input_tokens": model.input_tokens,
        "output_tokens": model.output_tokens,
        "total_tokens": model.total_tokens,
    }
