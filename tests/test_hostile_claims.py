"""A target that claims a tool call it never made: its trajectory says ``search_logs`` but it
never calls the peer that serves it. The RunSpec declares the peer's tools, the gateway
records the target's calls to it, and the grade holds the claim to the record."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_health.cluster.grading import claims, grading
from agent_health.engine import cell
from agent_health.ledger import backends
from cell_support import CELL, KEY, TEST_ID, cell_gateway, cell_settings
from hostile_support import free_port, hostile_target

SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    expect(result.output).to_contain("db-primary")
"""
TOOLS = {"logs": ("search_logs",)}


async def run_and_grade(
    tmp_path: Path, attacks: str, tools: dict[str, tuple[str, ...]]
) -> grading.CellGrade:
    port = free_port()
    upstream = f"http://127.0.0.1:{port}"
    routes = [
        {"principal": "controller", "to": "target", "listen": "127.0.0.1:0", "upstream": upstream},
        # The peer's upstream is the target's own sink: what matters is the recorded call.
        {"principal": "target", "to": "peer:logs", "listen": "127.0.0.1:0", "upstream": upstream},
    ]
    proxy = await cell_gateway(tmp_path, port, "http://127.0.0.1:9", routes=routes)
    targets = {"peer": proxy.url("target", "peer:logs")}
    try:
        async with hostile_target(port, tmp_path / "r.jsonl", targets, answer="good",
                                  attacks=attacks):  # fmt: skip
            settings = cell_settings(tmp_path, proxy, SUITE)
            code, result = await cell.run_cell(settings)
    finally:
        await proxy.stop()
    assert code == 0  # the controller saw a pass: the agent's own word
    assert result is not None
    assert result.status == "passed"
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL, peer_tools=tools)
    try:
        return await grading.grade_cell(backend, CELL, KEY, expected)
    finally:
        await backend.close()


def matcher(graded: grading.CellGrade) -> dict[str, object]:
    [found] = [s for s in graded.result.signals if s.name.startswith("to_have_called_tool")]
    return {"passed": found.passed, **(found.evidence or {})}


@pytest.mark.slow
async def test_a_claimed_tool_call_the_gateway_never_saw_fails_the_matcher(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "", TOOLS)
    assert graded.status == "failed"
    assert graded.unverified_claims == 1
    seen = matcher(graded)
    assert seen["passed"] is False
    assert (seen["source"], seen["problem"]) == ("gateway", claims.NOT_SEEN)
    assert (seen["claimed_calls_to_peer"], seen["gateway_calls_to_peer"]) == (1, 0)
    others = [s for s in graded.result.signals if not s.name.startswith("to_have_called_tool")]
    assert {(s.evidence or {}).get("source") for s in others} == {"agent"}


@pytest.mark.slow
async def test_a_claimed_call_the_gateway_recorded_passes_with_the_gateway_as_its_source(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "call-peer", TOOLS)
    assert graded.status == "passed", graded.error
    assert graded.unverified_claims == 0
    seen = matcher(graded)
    assert (seen["passed"], seen["source"], seen["gateway_calls_to_peer"]) == (True, "gateway", 1)


@pytest.mark.slow
async def test_without_declared_tools_the_claim_stands_on_the_agents_word(
    tmp_path: Path,
) -> None:
    graded = await run_and_grade(tmp_path, "", {})  # as before peers[].tools existed
    assert graded.status == "passed"
    assert matcher(graded)["source"] == "agent"
