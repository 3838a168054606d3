"""The example agent calls its log-server peer when told where it is, and, in a cell, through
the gateway: the cell's ledger then holds the target → ``peer:logs`` exchanges."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import log_server
import pytest
import triage_agent
from agent_health.engine.controller import cell
from agent_health.ledger import records
from aiohttp import web
from support import cell_support
from support.cell_support import CELL

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "01-quickstart" / "test_triage.py"
PEER_TOKEN = "peer-logs-token-3b9e1f07"
PAYMENT = "test_cell.py::payment RCA names the DB outage"


@contextlib.asynccontextmanager
async def counted_peer(token: str | None = None) -> AsyncIterator[tuple[str, list[str]]]:
    """The example log server on loopback (with ``token``: as in a cell, serving only calls
    the gateway forwarded); yields its URL and the paths it was asked for."""
    seen: list[str] = []

    @web.middleware
    async def count(request: web.Request, handler: web.Handler) -> web.StreamResponse:
        seen.append(request.path)
        return await handler(request)

    app = log_server.app(token=token)
    app.middlewares.insert(0, count)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


async def test_the_agent_process_calls_the_peer_named_by_the_cell_env() -> None:
    async with counted_peer() as (peer_url, seen):
        env = os.environ | {triage_agent.PEER_URL_ENV: peer_url}
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "examples" / "agents" / "triage_agent.py"), "--port", "0",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            assert f"tools at {peer_url}" in line, line
            url = line.split(" listening on ", 1)[1].split(",", 1)[0]
            async with httpx.AsyncClient(timeout=30) as client:
                answer = await client.post(url, json={"prompt": "Why is payment failing?"})
        finally:
            process.terminate()
            await process.wait()
    assert answer.status_code == 200, answer.text
    assert "db-primary" in answer.json()["output"]
    assert seen == ["/search_logs", "/service_status"]


async def test_without_a_peer_the_agent_serves_its_own_tools() -> None:
    runners, url = await triage_agent.start()
    try:
        assert len(runners) == 2  # the agent and its in-process tool service
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.post(url, json={"prompt": "Why is payment failing?"})
    finally:
        for runner in runners:
            await runner.cleanup()
    assert "db-primary" in answer.json()["output"]


async def test_in_a_cell_the_agents_tool_calls_are_the_targets_calls_to_its_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """controller → gateway → agent → gateway (target → peer:logs) → log server, as a cell
    pod wires them (the agent learns the gateway's peer listener from its env)."""
    cell_support.private_judge_cache(monkeypatch, tmp_path)
    # The agent's port must be in the gateway's routes before the agent knows the gateway's
    # peer listener: hold a listening socket for the agent, start the gateway, then the agent.
    held = socket.create_server(("127.0.0.1", 0))
    agent_port = held.getsockname()[1]
    # The peer's own token, as the cell mounts it into the peer and the gateway alone.
    (tmp_path / "peer-token").write_text(PEER_TOKEN)
    tokens = {"controller": str(tmp_path / "token"), "peer:logs": str(tmp_path / "peer-token")}
    async with counted_peer(PEER_TOKEN) as (peer_url, seen):
        routes = [
            {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
             "upstream": f"http://127.0.0.1:{agent_port}"},
            {"principal": "target", "to": "peer:logs", "listen": "127.0.0.1:0",
             "upstream": peer_url},
        ]  # fmt: skip
        proxy = await cell_support.cell_gateway(
            tmp_path, agent_port, "", routes=routes, token_files=tokens
        )
        agent = web.AppRunner(triage_agent.agent_app(proxy.url("target", "peer:logs")))
        try:
            await agent.setup()
            await web.SockSite(agent, held).start()
            settings = cell_support.cell_settings(
                tmp_path, proxy, QUICKSTART.read_text(), test_id=PAYMENT
            )
            code, result = await cell.run_cell(settings)
            # The target shares the loopback, knows the peer's port, and calls it directly:
            # refused, so every tool result it has went through the gateway and its ledger.
            async with httpx.AsyncClient() as client:
                direct = await client.get(f"{peer_url}/search_logs", params={"service": "db"})
                forged = await client.get(
                    f"{peer_url}/search_logs", headers={log_server.VIA_HEADER: "a-guess"}
                )
        finally:
            await agent.cleanup()
            await proxy.stop()
    assert code == 0
    assert result is not None
    assert result.status == "passed", result
    assert (direct.status_code, forged.status_code) == (403, 403)
    assert "through the cell's gateway" in direct.json()["error"]
    assert seen == ["/search_logs", "/service_status", "/search_logs", "/search_logs"]
    exchanges = [
        found
        for line in cell_support.ledger_lines(tmp_path)
        if isinstance(found := records.parse_line(line), records.Exchange)
    ]
    to_peer = [(e.principal, e.upstream, e.path.split("?")[0]) for e in exchanges]
    assert ("target", "peer:logs", "/search_logs") in to_peer
    assert ("target", "peer:logs", "/service_status") in to_peer
    assert all(e.status == 200 for e in exchanges), exchanges
    assert records.parse_line(cell_support.ledger_lines(tmp_path)[0]).run_id == CELL
