"""``agent-health mcp bridge`` and ``agent-health mcp mock`` as a cell's peer container runs
them: their own process, serving only the gateway's calls when a token is mounted."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from mcp import Client

MOCKS = """
from agent_health.peers import MockServer

weather = MockServer("weather")
weather.tool("forecast", answer={"sky": "clear"})
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def started(*args: str, env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_health.cli", "mcp", *args[:1], "--listen",
        f"127.0.0.1:{port}", *args[1:], env={**os.environ, **env},
        stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    async with aiohttp.ClientSession() as client:
        while True:
            if proc.returncode is not None:
                assert proc.stderr is not None
                raise AssertionError((await proc.stderr.read()).decode())
            try:
                async with client.get(url):
                    return proc, url
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)


@pytest.fixture
async def stop() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs: list[asyncio.subprocess.Process] = []
    yield procs
    for proc in procs:
        proc.terminate()
        assert await proc.wait() == 0  # SIGTERM: a clean stop


@pytest.mark.slow
async def test_a_mock_in_a_cell_serves_only_calls_carrying_its_token(
    tmp_path: Path, stop: list[asyncio.subprocess.Process]
) -> None:
    (tmp_path / "mocks.py").write_text(MOCKS)
    token = tmp_path / "token"
    token.write_text("peer-weather-token\n")
    proc, url = await started(
        "mock", f"{tmp_path / 'mocks.py'}:weather", env={"AGENT_HEALTH_TOKEN_FILE": str(token)}
    )
    stop.append(proc)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "forecast"}}
    async with aiohttp.ClientSession() as client:
        async with client.post(url, json=call) as refused:
            assert refused.status == 403
        via = {"X-Agent-Health-Via-Gateway": "peer-weather-token"}
        async with client.post(url, json=call, headers=via) as answered:
            assert answered.status == 200
            body = await answered.json()
    assert body["result"]["structuredContent"] == {"sky": "clear"}


@pytest.mark.slow
async def test_the_bridge_command_serves_mcp_server_time(
    stop: list[asyncio.subprocess.Process],
) -> None:
    proc, url = await started("bridge", "--", sys.executable, "-m", "mcp_server_time", env={})
    stop.append(proc)
    async with Client(url) as client:
        result = await client.call_tool("get_current_time", {"timezone": "UTC"})
    assert result.structured_content["timezone"] == "UTC"  # type: ignore[index]


def test_a_mock_that_is_not_there_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "mocks.py").write_text(MOCKS)
    for target, said in (
        (f"{tmp_path}/mocks.py:rain", "rain is not defined, not a MockServer"),
        (f"{tmp_path}/none.py:weather", "no file"),
        ("weather", "is not FILE.py:NAME"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "agent_health.cli", "mcp", "mock", target],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2
        assert said in proc.stderr
        assert "Traceback" not in proc.stderr
