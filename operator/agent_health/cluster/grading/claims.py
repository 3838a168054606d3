"""Tool calls the agent claims, checked against what its gateway saw (cells only).

A RunSpec peer may declare the tools it serves (``peers[].tools``). The agent's trajectory is
its own word; the gateway's ledger records every call the target made to each peer, in
order. For a declared tool, the grader holds the claim to the record (:class:`Sightings`
decides, in one place, which recorded calls could have been a given tool; every check below
asks it):

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

The gateway sees requests, not tool names: a call to a peer could have been any tool it
serves, so a peer that serves several tools is checked by count and order of calls, all its
tools together. A check never turns a failed signal into a passed one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results

NOT_SEEN = "claimed by the agent, not seen by the gateway"
NOT_IN_ORDER = "the gateway saw no calls in the claimed order"
NOT_IN_STEPS = "the gateway saw no calls in the claimed steps"
OMITTED = "recorded by the gateway, left out of the trajectory"
MATCHER = "to_have_called_tool("
IN_ORDER = "to_have_called_tools_in_order("
IN_STEPS = "to_have_called_tools_in_steps("
SHOWN_CALLS = 50
"""The gateway's calls an order check shows in its evidence (the first ones)."""


@dataclass(frozen=True)
class Checked:
    """The signals with their sources (some failed by the record), and the claims unseen."""

    signals: list[results.Signal]
    unverified: int


class Sightings:
    """What the gateway saw the target call, in the order it recorded the calls, and which of
    those calls could have been a given tool: the one place that decides it."""

    def __init__(self, calls: Sequence[str], peer_tools: Mapping[str, Sequence[str]]) -> None:
        """``calls``: the declared peer each recorded target → ``peer:NAME`` call reached, in
        order; ``peer_tools``: peer name → the tools it serves."""
        self.calls = list(calls)
        self.peer_tools = peer_tools
        self._served = {tool: peer for peer, tools in peer_tools.items() for tool in tools}

    def checked(self, tool: str | None) -> bool:
        """Whether the gateway's record can speak for ``tool``: a declared peer serves it."""
        return tool is not None and tool in self._served

    def peer(self, tool: str) -> str:
        """The declared peer that serves ``tool`` (a :meth:`checked` one)."""
        return self._served[tool]

    def could_be(self, call: int, tool: str) -> bool:
        """Whether the gateway's ``call`` (its position) could have been ``tool``: a call to
        the peer that serves it (the gateway does not see which of its tools)."""
        return self.calls[call] == self._served.get(tool)

    def seen(self, tool: str) -> int:
        """How many recorded calls could have been ``tool``."""
        return sum(self.could_be(n, tool) for n in range(len(self.calls)))

    def share(self, tool: str, other: str | None) -> bool:
        """Whether a recorded call that could have been ``tool`` could have been ``other``
        instead (claims of the two compete for the same calls)."""
        return self.checked(other) and self._served[other or ""] == self._served.get(tool)

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
        shown = [f"peer:{peer}" for peer in self.calls[:SHOWN_CALLS]]
        return {"gateway_calls": shown, "gateway_call_count": len(self.calls)}


def check(
    signals: Sequence[results.Signal],
    run: results.RunResult | None,
    calls: Sequence[str],
    peer_tools: Mapping[str, Sequence[str]],
) -> Checked:
    """Hold the tool claims of ``run`` to ``calls`` (the declared peer each target →
    ``peer:NAME`` exchange the gateway recorded reached, in order) for the tools each peer
    declares."""
    seen = Sightings(calls, peer_tools)
    claimed_tools = [
        step.tool_name
        for step in (run.trajectory if run is not None else ())
        if step.type == "tool_call" and seen.checked(step.tool_name)
    ]
    checked = [_checked(s, seen, claimed_tools) for s in signals]
    claimed = Counter(seen.peer(tool) for tool in claimed_tools if tool is not None)
    recorded = Counter(calls)
    for peer in peer_tools:
        extra = recorded[peer] - claimed[peer]
        if extra > 0:
            checked.append(_omitted(peer, extra, claimed[peer], recorded[peer]))
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
    claims = sum(seen.share(tool, other) for other in claimed_tools)
    recorded = seen.seen(tool)
    evidence |= {
        "source": "gateway",
        "peer": f"peer:{seen.peer(tool)}",
        "claimed_calls_to_peer": claims,
        "gateway_calls_to_peer": recorded,
    }
    if signal.passed and recorded < max(claims, 1):
        return _failed(signal, evidence, NOT_SEEN)
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


def _omitted(peer: str, extra: int, claimed: int, seen: int) -> results.Signal:
    return results.Signal(
        kind="deterministic",
        role="observe",
        name=f"calls to peer:{peer} the trajectory omits",
        passed=None,
        evidence={
            "source": "gateway",
            "problem": OMITTED,
            "omitted_calls": extra,
            "claimed_calls_to_peer": claimed,
            "gateway_calls_to_peer": seen,
        },
    )


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
