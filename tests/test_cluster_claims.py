"""Tool claims held to the gateway's record, by count per declared peer."""

from __future__ import annotations

from agent_health.cluster.api import runspec
from agent_health.cluster.grading import claims
from agent_health.connectors import protocol
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
        {"logs": 1},  # the gateway saw one call to logs, none to db
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
    checked = claims.check([called("search_logs")], run("search_logs"), {"logs": 3}, TOOLS)
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
    checked = claims.check([called("search_logs", passed=False)], run(), {}, TOOLS)
    assert checked.signals[0].passed is False
    assert "problem" not in (checked.signals[0].evidence or {})
    peer = runspec.Peer(name="logs", image="ghcr.io/acme/logs:1", port=9000, tools=["search_logs"])
    assert peer.tools == ["search_logs"]
    assert runspec.Peer(name="x", image="ghcr.io/acme/x:1", port=1).tools == []
