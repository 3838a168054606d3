"""The mock MCP server, driven by the MCP SDK's own client through the recording gateway."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from agent_health.ledger import records
from agent_health.peers import MockServer, PeerConfigError
from mcp import Client
from mcp.shared.exceptions import MCPError
from support.gateway_support import read_cell, through


def tickets() -> MockServer:
    server = MockServer("tickets")
    server.tool(
        "search",
        answer=[{"id": 7, "title": "db down"}],
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
    )
    server.tool("close_all", answer="closed", decoy=True)
    server.tool("page_oncall", error="pager service unavailable")
    server.tool("slow", answer="finally", delay=0.2)

    @server.tool(description="Open a ticket")
    def open_ticket(title: str, priority: int = 3) -> dict[str, object]:
        return {"id": 8, "title": title, "priority": priority}

    @server.tool
    async def crash() -> str:
        raise RuntimeError("backend exploded")

    return server


async def test_the_sdk_client_sees_the_declared_tools_and_their_answers(tmp_path: Path) -> None:
    running = await tickets().serve()
    assert running.url is not None
    route = (
        f"principal=target,to=peer:tickets,listen=127.0.0.1:0,"
        f"upstream={running.url.removesuffix('/mcp')},protocol=mcp"
    )
    async with (
        running,
        through(tmp_path, route) as (gw, _),
        Client(gw.url("target", "peer:tickets") + "/mcp") as client,
    ):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        found = await client.call_tool("search", {"q": "db"})
        opened = await client.call_tool("open_ticket", {"title": "db down"})
        failed = await client.call_tool("page_oncall", {})
        crashed = await client.call_tool("crash", {})
        invalid = await client.call_tool("search", {"q": 5})
        started = time.perf_counter()
        slow = await client.call_tool("slow", {})
        waited = time.perf_counter() - started
        decoy = await client.call_tool("close_all", {})
        with pytest.raises(MCPError, match="Unknown tool: 'drop_tables'"):
            await client.call_tool("drop_tables", {})
    assert set(listed) == {"search", "close_all", "page_oncall", "slow", "open_ticket", "crash"}
    assert listed["open_ticket"].input_schema == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "priority": {"type": "integer"}},
        "required": ["title"],
    }
    assert listed["open_ticket"].description == "Open a ticket"
    assert found.structured_content is None  # a list answers as text
    assert found.content[0].text == '[{"id": 7, "title": "db down"}]'  # type: ignore[union-attr]
    assert opened.structured_content == {"id": 8, "title": "db down", "priority": 3}
    assert failed.is_error is True
    assert crashed.is_error is True
    assert "backend exploded" in crashed.content[0].text  # type: ignore[union-attr]
    assert invalid.is_error is True
    assert "'q' is not of type string" in invalid.content[0].text  # type: ignore[union-attr]
    assert waited >= 0.2
    assert slow.content[0].text == "finally"  # type: ignore[union-attr]
    assert decoy.is_error is False  # a decoy answers like any tool
    outcomes = [(c.tool, c.outcome) for c in running.calls]
    assert outcomes == [
        ("search", "answered"),
        ("open_ticket", "answered"),
        ("page_oncall", "error"),
        ("crash", "error"),
        ("search", "invalid"),
        ("slow", "answered"),
        ("close_all", "decoy"),
        ("drop_tables", "unknown"),
    ]
    assert [c.tool for c in running.decoy_calls] == ["close_all"]
    assert [c.tool for c in running.unknown_calls] == ["drop_tables"]
    assert running.calls_of("open_ticket")[0].arguments == {"title": "db down"}
    recorded = [
        r
        for r in records.unfold(read_cell(tmp_path))
        if isinstance(r, records.McpRecord) and r.name != "slow"
    ]
    by_name = {r.name: r for r in recorded if r.method == "tools/call"}
    assert by_name["page_oncall"].is_error is True
    assert by_name["drop_tables"].error is not None
    assert by_name["drop_tables"].error["code"] == -32602
    assert by_name["close_all"].is_error is False


async def test_a_running_mock_hands_out_its_url_and_an_mcp_json_entry() -> None:
    async with await tickets().serve() as running:
        assert running.mcp_json() == {
            "mcpServers": {"tickets": {"type": "http", "url": running.url}}
        }
        assert running.entry()["url"].endswith("/mcp")


async def test_two_running_copies_keep_their_own_calls() -> None:
    server = tickets()
    async with await server.serve() as one, await server.serve() as two:
        async with Client(one.url or "") as client:
            await client.call_tool("search", {"q": "x"})
        assert len(one.calls) == 1
        assert two.calls == []
        await asyncio.sleep(0)


def test_declarations_that_cannot_serve_are_refused_saying_why() -> None:
    server = MockServer("x")
    server.tool("a", answer=1)
    with pytest.raises(PeerConfigError, match="tool 'a' twice"):
        server.tool("a", answer=2)
    with pytest.raises(PeerConfigError, match="input_schema must be a JSON schema of type object"):
        server.tool("b", answer=1, input_schema={"type": "string"})
    with pytest.raises(PeerConfigError, match="delay must be 0 or more"):
        server.tool("c", answer=1, delay=-1)
    with pytest.raises(PeerConfigError, match="use letters, digits"):
        MockServer("bad name")


async def test_a_runaway_agent_cannot_grow_the_mock_without_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent_health.peers import mock

    monkeypatch.setattr(mock, "MAX_CALLS", 3)
    async with await tickets().serve() as running, Client(running.url or "") as client:
        for _ in range(4):
            await client.call_tool("search", {"q": "x"})
        await client.call_tool("close_all", {})
    assert len(running.calls) == 3
    assert running.dropped == 2
    assert [c.tool for c in running.decoy_calls] == ["close_all"]  # kept apart: still seen
