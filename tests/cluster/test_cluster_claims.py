"""Tool claims held to the gateway's record: by count per declared peer, and by the order of
the calls it recorded."""

from __future__ import annotations

from agent_health.cluster.api import runspec
from agent_health.connectors import protocol
from agent_health.engine.outcome import claims
from agent_health.sdk import check, results

TOOLS = {"logs": ("search_logs", "tail_logs"), "db": ("query",)}


def run(*tools: str) -> results.RunResult:
    steps = tuple(protocol.Step(type="tool_call", tool_name=t, tool_args={}) for t in tools)
    return results.RunResult(run_id="r", prompt="p", output="o", trajectory=steps)


def called(tool: str, passed: bool = True) -> results.Signal:
    return results.Signal(
        kind="deterministic", role="gate", name=f"to_have_called_tool({tool!r})", passed=passed,
        score=float(passed), evidence=check.evidence({"tool": tool}, {"matching_calls": 1}),
    )  # fmt: skip


def test_claims_are_counted_per_peer_and_unseen_ones_fail_their_matchers() -> None:
    checked = claims.check(
        [called("search_logs"), called("query"), called("read_file")],
        run("search_logs", "tail_logs", "query", "read_file"),
        ["logs"],  # the gateway saw one call to logs, none to db
        TOOLS,
    )
    logs, db, undeclared = checked.signals
    assert checked.unverified == 2  # one of logs' two claimed calls, db's one
    assert (logs.passed, logs.evidence["problem"]) == (False, claims.NOT_SEEN)  # type: ignore[index]
    assert (db.passed, db.error) == (False, claims.NOT_SEEN)
    assert undeclared.passed is True
    assert undeclared.evidence is not None
    assert undeclared.evidence["source"] == "agent"


def test_calls_the_trajectory_omits_are_recorded_as_an_observation() -> None:
    checked = claims.check([called("search_logs")], run("search_logs"), ["logs"] * 3, TOOLS)
    matcher, omitted = checked.signals
    assert matcher.passed is True
    assert matcher.evidence is not None
    assert matcher.evidence["source"] == "gateway"
    assert (omitted.role, omitted.passed) == ("observe", None)  # never gates
    assert omitted.evidence == {
        "source": "gateway", "problem": claims.OMITTED, "omitted_calls": 2,
        "claimed_calls_to_peer": 1, "gateway_calls_to_peer": 3,
    }  # fmt: skip
    assert checked.unverified == 0


def test_a_failed_matcher_stays_failed_and_a_peer_declares_its_tools() -> None:
    checked = claims.check([called("search_logs", passed=False)], run(), [], TOOLS)
    assert checked.signals[0].passed is False
    assert "problem" not in (checked.signals[0].evidence or {})
    peer = runspec.Peer(name="logs", image="ghcr.io/acme/logs:1", port=9000, tools=["search_logs"])
    assert peer.tools == ["search_logs"]
    assert runspec.Peer(name="x", image="ghcr.io/acme/x:1", port=1).tools == []


def in_order(*tools: str, passed: bool = True) -> results.Signal:
    return results.Signal(
        kind="deterministic", role="gate", name=f"to_have_called_tools_in_order({list(tools)!r})",
        passed=passed, score=float(passed), evidence=check.evidence(list(tools), list(tools)),
    )  # fmt: skip


def in_steps(*groups: list[str]) -> results.Signal:
    return results.Signal(
        kind="deterministic", role="gate", name=f"to_have_called_tools_in_steps({list(groups)!r})",
        passed=True, score=1.0, evidence=check.evidence(list(groups), []),
    )  # fmt: skip


def test_an_order_is_held_to_the_calls_the_gateway_recorded_one_call_per_tool() -> None:
    def holds(signal: results.Signal, calls: list[str]) -> bool | None:
        return claims.check([signal], run(), calls, TOOLS).signals[0].passed

    # Two tools of one peer need two calls to it: the gateway cannot tell them apart.
    assert holds(in_order("search_logs", "tail_logs", "query"), ["logs", "db"]) is False
    assert holds(in_order("search_logs", "tail_logs", "query"), ["logs", "logs", "db"]) is True
    assert holds(in_order("query", "search_logs"), ["logs", "db"]) is False
    assert holds(in_order("query", "search_logs"), ["logs", "db", "logs"]) is True
    # Undeclared tools stand on the agent's word; a list of only those is the agent's.
    assert holds(in_order("read_file", "query", "write_file"), ["db"]) is True
    only_undeclared = claims.check([in_order("read_file")], run(), [], TOOLS).signals[0]
    assert (only_undeclared.passed, (only_undeclared.evidence or {})["source"]) == (True, "agent")
    # A failed matcher stays failed, whatever the gateway saw.
    assert holds(in_order("query", passed=False), ["db"]) is False

    assert holds(in_steps(["search_logs", "tail_logs"], ["query"]), ["logs", "db", "logs"]) is False
    assert holds(in_steps(["search_logs", "tail_logs"], ["query"]), ["logs", "logs", "db"]) is True
    assert holds(in_steps(["query"], ["search_logs", "read_file"]), ["logs", "db"]) is False
    broken = claims.check([in_steps(["query"], ["search_logs"])], run(), ["logs", "db"], TOOLS)
    assert (broken.signals[0].evidence or {})["gateway_broken_at"] == {
        "step": 2, "tool": "search_logs"
    }  # fmt: skip
