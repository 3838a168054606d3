"""Tool calls the agent claims, checked against what its gateway saw (cells only).

A RunSpec peer may declare the tools it serves (``peers[].tools``). The agent's trajectory is
its own word; the gateway's ledger records every call the target made to each peer. For a
declared tool, the grader holds the claim to the record:

* a tool matcher (``to_have_called_tool(NAME...)``) that passed on the trajectory fails when
  the gateway recorded fewer calls from the target to that tool's peer than the trajectory
  claims of that peer's tools: "claimed by the agent, not seen by the gateway";
* calls the gateway recorded that the trajectory leaves out are evidence too: an observe-role
  signal per peer says how many;
* token metrics come from the gateway's record of the target's model calls when there is one
  (:func:`tokens`);
* every signal says where its evidence came from: ``evidence.source`` is ``gateway`` for the
  checked ones and ``agent`` for the rest (taken on the agent's word).

One recorded exchange stands for one claimed call: the gateway sees requests, not tool names,
so a peer that serves several tools is checked by count, all its tools together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent_health.ledger import usage as ledger_usage
from agent_health.sdk import results

NOT_SEEN = "claimed by the agent, not seen by the gateway"
OMITTED = "recorded by the gateway, left out of the trajectory"
MATCHER = "to_have_called_tool("


@dataclass(frozen=True)
class Checked:
    """The signals with their sources (some failed by the record), and the claims unseen."""

    signals: list[results.Signal]
    unverified: int


def check(
    signals: Sequence[results.Signal],
    run: results.RunResult | None,
    calls: Mapping[str, int],
    peer_tools: Mapping[str, Sequence[str]],
) -> Checked:
    """Hold the tool claims of ``run`` to ``calls`` (target → ``peer:NAME`` exchanges the
    gateway recorded, by peer name) for the tools each peer declares."""
    served = {tool: peer for peer, tools in peer_tools.items() for tool in tools}
    claimed: Counter[str] = Counter()
    if run is not None:
        for step in run.trajectory:
            if step.type == "tool_call" and step.tool_name in served:
                claimed[served[step.tool_name]] += 1
    unseen = {peer: max(0, n - calls.get(peer, 0)) for peer, n in claimed.items()}
    checked = [_checked(s, served, claimed, calls) for s in signals]
    for peer in peer_tools:
        extra = calls.get(peer, 0) - claimed.get(peer, 0)
        if extra > 0:
            checked.append(_omitted(peer, extra, claimed.get(peer, 0), calls.get(peer, 0)))
    return Checked(checked, sum(unseen.values()))


def _checked(
    signal: results.Signal,
    served: Mapping[str, str],
    claimed: Mapping[str, int],
    calls: Mapping[str, int],
) -> results.Signal:
    evidence = dict(signal.evidence or {})
    tool = _tool_of(signal)
    peer = served.get(tool) if tool is not None else None
    if peer is None:
        evidence.setdefault("source", "agent")
        return signal.model_copy(update={"evidence": evidence})
    evidence |= {
        "source": "gateway",
        "peer": f"peer:{peer}",
        "claimed_calls_to_peer": claimed.get(peer, 0),
        "gateway_calls_to_peer": calls.get(peer, 0),
    }
    if signal.passed and calls.get(peer, 0) < max(claimed.get(peer, 0), 1):
        evidence["problem"] = NOT_SEEN
        return signal.model_copy(
            update={"passed": False, "score": 0.0, "evidence": evidence, "error": NOT_SEEN}
        )
    return signal.model_copy(update={"evidence": evidence})


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


def _tool_of(signal: results.Signal) -> str | None:
    """The tool a ``to_have_called_tool`` matcher checked, from its evidence."""
    if signal.kind != "deterministic" or not signal.name.startswith(MATCHER):
        return None
    for part in (signal.evidence or {}).values():
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
