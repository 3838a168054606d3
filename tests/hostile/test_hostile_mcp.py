"""Hostile MCP traffic in a cell's ledger is graded as the agent's, never a traceback: the
grade reads what the gateway could and could not read of it, holds the agent's claims to
that, and a tool error the server claimed is the agent's tool error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent_health.cluster.grading import grading
from agent_health.engine.outcome import claims
from agent_health.ledger import chain, objects

KEY = b"m" * 48
CELL, RUN, TEST = "mcp-cell-r0", "run-mcp", "t.py::uses its tools"
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
BIG = 100 * 1024 * 1024 + 100


def at(seconds: float) -> str:
    return objects.stamp(T0 + timedelta(seconds=seconds))


def mcp(n: float, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "principal": "target",
        "evidence": "none",
        "server": "peer:tools",
        "run_id": RUN,
        "session": "s",
        "status": 200,
    }
    return objects.mcp_call(at=at(n), started_at=at(n), ended_at=at(n), **{**base, **fields})


def signal(name: str, expected: Any) -> dict[str, Any]:
    data = {
        "kind": "deterministic",
        "role": "gate",
        "name": name,
        "passed": True,
        "score": 1.0,
        "weight": 1.0,
        "evidence": {"expected": expected, "actual": {}},
    }
    return objects.signal(at=at(9), data=data)


def ledger(*middle: dict[str, Any], trajectory: list[dict[str, Any]]) -> list[str]:
    sealer = chain.Sealer(KEY)
    made = [
        objects.cell_meta(at=at(0), test_id=TEST, repeat=0, run_id=RUN),
        *middle,
        objects.run_result(at=at(8), run_id=RUN, prompt="p", output="done", trajectory=trajectory),
        signal("to_have_called_tool('dump')", {"tool": "dump", "args": None, "times": ">=1"}),
        signal("to_have_called_tool('search')", {"tool": "search", "args": None, "times": ">=1"}),
        signal("to_have_no_tool_errors()", []),
        objects.cell_end(at=at(10), status="passed", duration_ms=1.0),
    ]
    return [sealer.line_of(record) for record in made]


def step(kind: str, tool: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "tool_name": tool, **extra}


def test_hostile_mcp_records_grade_as_the_agents_failure_not_an_error() -> None:
    hostile = [
        # A request that was not JSON at all, one that was not JSON-RPC, an answer of 100 MB
        # the gateway passed unread, a success the server called an error, an answer that
        # never came.
        mcp(1, method="", problem="the request is not JSON: expected value"),
        mcp(2, method="tools/call", problem="not a JSON-RPC 2.0 message: jsonrpc: ..."),
        mcp(
            3,
            method="tools/call",
            id=1,
            name="dump",
            arguments={},
            result_bytes=104857700,
            problem="the answer (104857700 bytes) is larger than the gateway reads "
            "(--mcp-max-bytes 1048576): not read",
        ),
        mcp(
            4,
            method="tools/call",
            id=2,
            name="search",
            arguments={"q": "x"},
            result={"content": [{"type": "text", "text": "3 rows"}], "isError": True},
            result_bytes=90,
            is_error=True,
        ),
        mcp(
            5,
            method="tools/call",
            id=3,
            name="search",
            arguments={"q": "y"},
            problem="no answer to it came back in the exchange",
        ),
    ]
    trajectory = [
        step("tool_call", "dump", tool_args={}),
        step("tool_result", "dump", tool_output="(big)", status="ok"),
        step("tool_call", "search", tool_args={"q": "x"}),
        step("tool_result", "search", tool_output="3 rows", status="ok"),
        step("tool_call", "search", tool_args={"q": "y"}),
        step("tool_result", "search", tool_output="none", status="ok"),
    ]
    lines = ledger(*hostile, trajectory=trajectory)
    assert chain.verify(lines, KEY).ok
    expected = grading.ExpectedCell(test_id=TEST, repeat=0, run_id=RUN)
    graded = grading.grade_lines(CELL, lines, KEY, expected)
    # The claims stand on what the gateway read: both tools were called.
    assert graded.status == "failed", graded
    assert graded.cause is None
    assert not graded.infra
    by_name = {s.name: s for s in graded.result.signals}
    assert by_name["to_have_called_tool('dump')"].passed is True
    assert by_name["to_have_called_tool('search')"].passed is True
    # The server said the search failed: the agent reported it ok, the grade does not.
    errors = by_name["to_have_no_tool_errors()"]
    assert (errors.passed, errors.error) == (False, claims.ERRORED)
    assert graded.result.metrics["tool_errors"] == 1
    # Every hostile call is in the report, each saying what could not be read.
    shown = [(c["name"], c["problem"] is not None) for c in graded.result.mcp_calls]
    assert shown == [
        (None, True),
        (None, True),
        ("dump", True),
        ("search", False),
        ("search", True),
    ]


def test_a_claimed_mcp_call_whose_record_is_malformed_is_not_taken_as_made() -> None:
    # The only record of "search" is a request the gateway could not read as JSON-RPC: no
    # tool is named, so a claim of the peer's declared tool stands on nothing.
    lines = ledger(
        mcp(1, method="tools/call", problem="not a JSON-RPC 2.0 message: id: ..."),
        mcp(
            2,
            method="tools/call",
            id=1,
            name="dump",
            arguments={},
            result={"content": []},
            result_bytes=40,
            is_error=False,
        ),
        trajectory=[step("tool_call", "dump", tool_args={}), step("tool_call", "search")],
    )
    tools = {"tools": ("dump", "search")}  # the RunSpec's peers[].tools
    expected = grading.ExpectedCell(test_id=TEST, repeat=0, run_id=RUN, peer_tools=tools)
    graded = grading.grade_lines(CELL, lines, KEY, expected)
    assert graded.status == "failed"
    by_name = {s.name: s for s in graded.result.signals}
    assert by_name["to_have_called_tool('search')"].passed is False
    assert by_name["to_have_called_tool('search')"].error == claims.NOT_SEEN
