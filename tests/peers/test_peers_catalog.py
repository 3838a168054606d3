"""An MCP server's tools asked as an agent asks them (``agent-health mcp tools``): what the
operator reads of a RunSpec's MCP peers when it resolves — real servers, and servers that
page, stream, fail or flood, each said plainly."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from agent_health.peers import Bridge, MockServer, PeerError, catalog
from aiohttp import web

Answer = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def _serve(answer: Answer) -> AsyncIterator[str]:
    """An MCP server on loopback that answers ``initialize`` (with a session) and hands
    every other request to ``answer``."""

    async def post(request: web.Request) -> web.StreamResponse:
        message = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        if message["method"] == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "loopback", "version": "1"}}  # fmt: skip
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result},
                                     headers={"Mcp-Session-Id": "s-1"})  # fmt: skip
        assert request.headers["Mcp-Session-Id"] == "s-1"  # the session it was given
        return await answer(request, message)

    app = web.Application()
    app.router.add_post("/mcp", post)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/mcp"
    finally:
        await runner.cleanup()


def _page(message: dict[str, Any], names: list[str], cursor: str | None) -> dict[str, Any]:
    tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
    result: dict[str, Any] = {"tools": tools}
    if cursor:
        result["nextCursor"] = cursor
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


async def test_a_mock_and_mcp_server_time_behind_the_bridge_list_their_tools() -> None:
    tickets = MockServer("tickets")
    tickets.tool("search", answer=[])
    tickets.tool("close_all", answer="closed", decoy=True)  # a decoy is listed as any tool
    command = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
    bridge = Bridge(command)
    time_url = await bridge.start("127.0.0.1", 0)
    try:
        async with await tickets.serve() as running:
            assert running.url is not None
            assert await catalog.tools_of(running.url) == ["search", "close_all"]
            assert await catalog.tools_of(time_url) == ["get_current_time", "convert_time"]
            assert running.calls == []  # listing calls no tool
    finally:
        await bridge.stop()


async def _paged_events(request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
    """Two pages, each the second event of a stream (a notification comes first)."""
    cursor = (message.get("params") or {}).get("cursor")
    page = _page(message, ["b", "c"], None) if cursor else _page(message, ["a", "b"], "p2")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}}
    await response.write(f"data: {json.dumps(note)}\n\n".encode())
    await response.write(f"event: message\ndata: {json.dumps(page)}\n\n".encode())
    await response.write_eof()
    return response


async def test_pages_and_event_streams_are_followed() -> None:
    async with _serve(_paged_events) as url:
        assert await catalog.tools_of(url) == ["a", "b", "c"]


async def _error(request: web.Request, message: dict[str, Any]) -> web.Response:
    error = {"code": -32601, "message": "Method not found"}
    return web.json_response({"jsonrpc": "2.0", "id": message["id"], "error": error})


async def _flood(request: web.Request, message: dict[str, Any]) -> web.Response:
    return web.json_response(_page(message, [f"t{n}" for n in range(300)], None))


async def _endless(request: web.Request, message: dict[str, Any]) -> web.Response:
    return web.json_response(_page(message, ["again"], "more"))  # a cursor for ever


async def _not_json(request: web.Request, message: dict[str, Any]) -> web.Response:
    return web.Response(text="{ not json", content_type="application/json")


async def _not_tools(request: web.Request, message: dict[str, Any]) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {"tool": []}})


async def _long_name(request: web.Request, message: dict[str, Any]) -> web.Response:
    return web.json_response(_page(message, ["x" * 200], None))


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_error, r"tools/list failed: Method not found \(code -32601\)"),
        (_flood, r"it lists more than 256 tools"),
        (_endless, r"tools/list goes on past 32 pages"),
        (_not_json, r"the answer to tools/list is not JSON"),
        (
            _not_tools,
            r"the result of tools/list is not the MCP SDK's ListToolsResult"
            r" \(tools: Field required\)",
        ),
        (_long_name, r"the tool name 'x{40}'… is longer than 128 characters"),
    ],
)
async def test_a_server_that_cannot_list_its_tools_is_said_so(answer: Answer, said: str) -> None:
    async with _serve(answer) as url:
        with pytest.raises(PeerError, match=f"^{url}: {said}"):
            await catalog.tools_of(url)


def test_the_command_prints_each_servers_tools_or_why_not_as_json() -> None:
    """``agent-health mcp tools``: one JSON object, every server asked, exit 0."""
    command = [sys.executable, "-m", "agent_health.cli", "mcp", "tools"]
    proc = subprocess.run(
        [*command, "nowhere=http://127.0.0.1:9/mcp"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    [answer] = json.loads(proc.stdout)["peers"].values()
    assert answer["error"].startswith("http://127.0.0.1:9/mcp: ")
    bad = subprocess.run([*command, "oops"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: 'oops' is not NAME=URL (an http:// or https:// URL)"
