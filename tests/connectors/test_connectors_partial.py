"""A call that times out keeps what the agent had sent (``AgentTimeout.partial``): the body so
far for REST and OpenAI-compatible agents, the folded events for AG-UI, the stdout so far for
a command. Real servers and commands on loopback, each stopping halfway."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import errors, partial
from aiohttp import web
from support import loopback
from support.loopback import request, serving

CHAT = "/v1/chat/completions"


def stalling(*pieces: bytes, content_type: str = "application/json") -> Any:
    """A handler that answers 200, sends ``pieces`` one write each, then sends nothing."""

    async def handler(req: web.Request) -> web.StreamResponse:
        await req.read()
        response = web.StreamResponse(headers={"content-type": content_type})
        await response.prepare(req)
        for piece in pieces:
            await response.write(piece)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return handler


async def timed_out(spec: connectors.ConnectorSpec, observed: bool = False) -> partial.Partial:
    """Run ``spec``'s connector to its timeout; what the error kept."""
    seen: list[Any] = []
    conn = connectors.create(spec, observe=seen.append if observed else None)
    try:
        with pytest.raises(errors.AgentTimeout, match=r"within 1 s") as info:
            await conn.run(request())
    finally:
        await conn.aclose()
    if observed:
        assert [o.error for o in seen] == ["no complete answer within 1 s"]
    assert info.value.partial is not None
    return info.value.partial


@pytest.mark.parametrize("observed", [False, True], ids=["plain", "observed"])
@pytest.mark.parametrize("kind", ["rest", "openai"])
async def test_an_http_agent_that_stops_halfway_keeps_the_body_so_far(
    kind: str, observed: bool
) -> None:
    pieces = [b'{"output": "The payment service ', b"cannot reach db-pri", b"\xc3"]
    path = CHAT if kind == "openai" else "/agent"
    async with serving(stalling(*pieces), path=path) as url:
        spec = connectors.ConnectorSpec(connector=kind, url=url, timeout=1)
        kept = await timed_out(spec, observed)
    # A UTF-8 sequence the agent stopped in the middle of is what came: shown as U+FFFD.
    assert kept == partial.Partial(
        source="body",
        bytes=sum(map(len, pieces)),
        text='{"output": "The payment service cannot reach db-pri\ufffd',
    )


async def test_a_long_body_keeps_its_first_64_kib() -> None:
    # An "é" straddles the cap: cut by agent-health, not by the agent, it is left out.
    head = b"x" * (partial.KEEP_BYTES - 1) + "é".encode()
    pieces = [head[:1000], head[1000:], b"y" * 5000]
    async with serving(stalling(*pieces)) as url:
        kept = await timed_out(connectors.ConnectorSpec(connector="rest", url=url, timeout=1))
    assert (kept.bytes, kept.truncated) == (partial.KEEP_BYTES + 1 + 5000, True)
    assert kept.text == "x" * (partial.KEEP_BYTES - 1)


@pytest.mark.parametrize("observed", [False, True], ids=["plain", "observed"])
async def test_an_agui_agent_that_stalls_keeps_the_events_folded_so_far(observed: bool) -> None:
    frames = loopback.half_a_run()
    async with serving(loopback.stalling_sse(frames)) as url:
        spec = connectors.ConnectorSpec(connector="agui", url=url, timeout=1)
        kept = await timed_out(spec, observed)
    assert (kept.source, kept.events, kept.bytes) == ("events", len(frames), sum(map(len, frames)))
    assert kept.text == "Checking the logs.\nIt cannot reach db-pri"
    assert not kept.truncated
    steps = [(s.type, s.tool_name, s.content, s.tool_args) for s in kept.trajectory]
    assert steps == [
        ("assistant", None, "Checking the logs.", None),
        ("tool_call", "search_logs", None, {"service": "payment"}),
        ("tool_result", "search_logs", None, None),
        ("assistant", None, "It cannot reach db-pri", None),  # open: as it stood
        ("tool_call", "service_status", None, {"_raw": '{"name": "db-'}),
    ]
    assert kept.trajectory[2].tool_output == {"lines": 3}


async def test_a_command_that_stalls_keeps_its_stdout_so_far(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        textwrap.dedent(
            """
            import sys, time
            print('{"type": "tool_call", "tool_name": "search_logs"}', flush=True)
            sys.stdout.write("\\x1b[2Kdb-pri")
            sys.stdout.flush()
            time.sleep(600)
            """
        )
    )
    # More time than the HTTP cases: the interpreter must start and print first.
    spec = connectors.ConnectorSpec(
        connector="subprocess", command=(sys.executable, str(agent)), timeout=3
    )
    conn = connectors.create(spec)
    try:
        with pytest.raises(errors.AgentTimeout, match=r"within 3 s") as info:
            await conn.run(request())
    finally:
        await conn.aclose()
    text = '{"type": "tool_call", "tool_name": "search_logs"}\n\x1b[2Kdb-pri'
    assert info.value.partial == partial.Partial(
        source="stdout", bytes=len(text.encode()), text=text
    )
