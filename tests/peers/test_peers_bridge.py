"""Real stdio MCP servers from PyPI (mcp-server-time, mcp-server-git) behind the recording
bridge and the gateway, called by the MCP SDK's own client: every call is on record."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from agent_health.ledger import records
from agent_health.peers import Bridge, PeerConfigError
from mcp import Client
from support.gateway_support import read_cell, through

TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def route(name: str, upstream: str) -> str:
    return f"principal=target,to=peer:{name},listen=127.0.0.1:0,upstream={upstream},protocol=mcp"


def calls(ledger: Path) -> list[records.McpRecord]:
    return [r for r in records.unfold(read_cell(ledger)) if isinstance(r, records.McpRecord)]


@pytest.fixture
async def time_bridge() -> AsyncIterator[Bridge]:
    async with Bridge(TIME) as bridge:
        yield bridge


@pytest.mark.slow
async def test_mcp_server_time_through_the_gateway_is_on_record_call_by_call(
    tmp_path: Path, time_bridge: Bridge
) -> None:
    assert time_bridge.url is not None
    origin = time_bridge.url.removesuffix("/mcp")
    async with (
        through(tmp_path, route("time", origin)) as (gw, _),
        Client(gw.url("target", "peer:time") + "/mcp") as client,
    ):
        listed = await client.list_tools()
        now = await client.call_tool("get_current_time", {"timezone": "Europe/Oslo"})
        bad = await client.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
        converted = await client.call_tool(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
    assert {t.name for t in listed.tools} == {"get_current_time", "convert_time"}
    assert now.is_error is False
    assert bad.is_error is True
    assert converted.is_error is False
    recorded = calls(tmp_path)
    assert [(c.method, c.name) for c in recorded] == [
        ("tools/list", None),
        ("tools/call", "get_current_time"),
        ("tools/call", "get_current_time"),
        ("tools/call", "convert_time"),
    ]
    assert all(c.server == "peer:time" and c.principal == "target" for c in recorded)
    assert all(c.problem is None for c in recorded)
    listing, oslo, mars, tokyo = recorded
    assert [t["name"] for t in (listing.result or {})["tools"]] == [
        "get_current_time",
        "convert_time",
    ]
    assert oslo.arguments == {"timezone": "Europe/Oslo"}
    assert oslo.is_error is False
    assert json.loads((oslo.result or {})["content"][0]["text"])["timezone"] == "Europe/Oslo"
    assert mars.is_error is True
    assert "Invalid timezone" in (mars.result or {})["content"][0]["text"]
    assert tokyo.arguments == {
        "source_timezone": "UTC",
        "time": "12:00",
        "target_timezone": "Asia/Tokyo",
    }


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    (repo / "README.md").write_text("hello, world\n")
    return repo


@pytest.mark.slow
async def test_mcp_server_git_on_a_temporary_repository_is_on_record(
    tmp_path: Path, repository: Path
) -> None:
    command = [sys.executable, "-m", "mcp_server_git", "--repository", str(repository)]
    ledger = tmp_path / "ledger"
    async with (
        Bridge(command) as bridge,
        through(ledger, route("git", bridge.url or "")) as (gw, _),
        Client(gw.url("target", "peer:git") + "/mcp") as client,
    ):
        status = await client.call_tool("git_status", {"repo_path": str(repository)})
        log = await client.call_tool("git_log", {"repo_path": str(repository)})
        diff = await client.call_tool("git_diff_unstaged", {"repo_path": str(repository)})
    assert "README.md" in status.content[0].text  # type: ignore[union-attr]
    assert "first commit" in log.content[0].text  # type: ignore[union-attr]
    assert "hello, world" in diff.content[0].text  # type: ignore[union-attr]
    # The SDK's client lists the tools itself (it checks results against their schemas).
    recorded = [c for c in calls(ledger) if c.method == "tools/call"]
    assert [c.name for c in recorded] == ["git_status", "git_log", "git_diff_unstaged"]
    assert all(c.arguments == {"repo_path": str(repository)} for c in recorded)
    assert all(c.is_error is False for c in recorded)
    assert "first commit" in (recorded[1].result or {})["content"][0]["text"]


@pytest.mark.slow
async def test_concurrent_clients_each_get_their_own_answers(
    tmp_path: Path, time_bridge: Bridge
) -> None:
    """The SDK's client speaks the stateless protocol: both share one process, and the
    bridge's renumbering keeps their answers apart even though both use the same ids."""
    assert time_bridge.url is not None
    origin = time_bridge.url.removesuffix("/mcp")
    async with through(tmp_path, route("time", origin)) as (gw, _):
        url = gw.url("target", "peer:time") + "/mcp"

        async def one(zone: str) -> str:
            async with Client(url) as client:
                result = await client.call_tool("get_current_time", {"timezone": zone})
                return str(result.structured_content["timezone"])  # type: ignore[index]

        assert await asyncio.gather(one("Europe/Oslo"), one("America/Lima")) == [
            "Europe/Oslo",
            "America/Lima",
        ]
    recorded = [c for c in calls(tmp_path) if c.method == "tools/call"]
    for call in recorded:
        assert (
            json.loads((call.result or {})["content"][0]["text"])["timezone"]
            == ((call.arguments or {})["timezone"])
        )


@pytest.mark.slow
async def test_each_initialized_session_is_its_own_process_until_deleted(
    time_bridge: Bridge,
) -> None:
    assert time_bridge.url is not None
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with aiohttp.ClientSession() as client:
        sessions = []
        for _ in range(2):
            async with client.post(time_bridge.url, json=init, headers=accept) as response:
                assert response.status == 200
                sessions.append(response.headers["Mcp-Session-Id"])
                await response.read()
        assert sessions[0] != sessions[1]
        gone = {"Mcp-Session-Id": sessions[0]}
        async with client.delete(time_bridge.url, headers=gone) as response:
            assert response.status == 200
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with client.post(time_bridge.url, json=listing, headers={**accept, **gone}) as r:
            assert r.status == 404
            assert "initialize again" in (await r.json())["error"]["message"]


async def test_a_server_that_dies_answers_errors_naming_its_last_words(tmp_path: Path) -> None:
    dying = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit('out of cheese')"]
    async with Bridge(dying) as bridge, through(tmp_path, route("x", bridge.url or "")) as (gw, c):
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
        async with c.post(gw.url("target", "peer:x") + "/mcp", json=call) as response:
            answer = await response.json()
    assert answer["id"] == 1
    assert "the server exited: out of cheese" in answer["error"]["message"]
    [record] = calls(tmp_path)
    assert record.error is not None
    assert "out of cheese" in record.error["message"]


async def test_a_command_that_cannot_start_is_a_json_rpc_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    async with Bridge(["/nonexistent/mcp-server"]) as bridge:
        assert bridge.url is not None
        async with aiohttp.ClientSession() as client:
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
            async with client.post(bridge.url, json=init) as response:
                assert response.status == 502
                body = await response.json()
    assert "cannot start the MCP server '/nonexistent/mcp-server'" in body["error"]["message"]
    with pytest.raises(PeerConfigError, match="needs the MCP server's command"):
        Bridge([])
