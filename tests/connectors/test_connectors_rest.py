"""The REST protocol v1 connector against real loopback servers, including every failure."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from agent_health.connectors import base, errors, rest, transport
from agent_health.connectors.protocol import AgentReply, AgentRequest, ContextItem
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/run", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/run"

    yield start
    for runner in runners:
        await runner.cleanup()


def _request(**kw: Any) -> AgentRequest:
    return AgentRequest(
        prompt="hi",
        context=(ContextItem(description="log", value="x"),),
        run_id="run-1",
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        **kw,
    )


async def _run(url: str, **kw: Any) -> Any:
    connector = rest.RestConnector(base.ConnectorSpec(url=url, **kw))
    try:
        return await connector.run(_request())
    finally:
        await connector.aclose()


async def test_sends_protocol_v1_and_reads_the_answer(serve: Any) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["body"] = await request.json()
        seen["headers"] = dict(request.headers)
        return web.json_response(
            {
                "output": "done",
                "trajectory": [{"type": "tool_call", "tool_name": "ls", "tool_args": {}}],
                "token_usage": {"prompt": 3, "completion": 4, "total": 7},
                "model": "m1",
            }
        )

    reply = await _run(await serve(handler))
    assert seen["body"] == {
        "prompt": "hi",
        "context": [{"description": "log", "value": "x"}],
        "run_id": "run-1",
        "env": {},
    }
    assert seen["headers"]["X-Agent-Health-Run-Id"] == "run-1"
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", seen["headers"]["traceparent"])
    assert reply.output == "done"
    assert reply.trajectory[0].tool_name == "ls"
    assert reply.token_usage.total == 7
    assert reply.model_extra == {"model": "m1"}


async def test_connection_refused() -> None:
    with pytest.raises(
        errors.AgentUnreachable, match=r"cannot connect to agent at .*is it running"
    ):
        await _run("http://127.0.0.1:9/run")


async def test_timeout(serve: Any) -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"output": "late"})

    url = await serve(slow)
    try:
        with pytest.raises(errors.AgentTimeout, match=r"did not answer within 0.2 s"):
            await _run(url, timeout=0.2)
    finally:
        release.set()


async def test_non_2xx(serve: Any) -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "model overloaded"}, status=503)

    with pytest.raises(errors.AgentHTTPError, match=r"HTTP 503: .*model overloaded") as info:
        await _run(await serve(broken))
    assert info.value.status == 503


async def test_malformed_json(serve: Any) -> None:
    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html>oops</html>", content_type="text/html")

    with pytest.raises(errors.AgentProtocolError, match=r"malformed JSON: <html>oops"):
        await _run(await serve(garbage))


async def test_wrong_shape(serve: Any) -> None:
    async def wrong(request: web.Request) -> web.Response:
        return web.json_response({"output": "x", "trajectory": [{"type": "dance"}]})

    with pytest.raises(errors.AgentProtocolError, match=r"not REST protocol v1: trajectory.0.type"):
        await _run(await serve(wrong))


def test_agent_url_forms() -> None:
    assert base.ConnectorSpec.parse("rest+http://h/run").url == "http://h/run"
    assert base.ConnectorSpec.parse("http://h/run").connector == "rest"
    assert base.ConnectorSpec.parse("cmd:python agent.py").command == ("python", "agent.py")
    with pytest.raises(errors.ConnectorConfigError, match="cannot read agent"):
        base.ConnectorSpec.parse("nonsense")
    with pytest.raises(errors.ConnectorConfigError, match="unknown connector 'grpc'"):
        base.create(base.ConnectorSpec(connector="grpc", url="http://x"))


REPLIES = [
    {"output": "pong"},
    {
        "output": "caf\u00e9 \u2713",
        "trajectory": [
            {"type": "thinking", "content": "hm"},
            {"type": "tool_call", "tool_name": "q", "tool_args": {"a": [1, 2.5]}, "id": "c1"},
            {"type": "tool_result", "tool_output": {"rows": 3}, "status": "ok", "latency_ms": 4},
        ],
        "token_usage": {"prompt": 3, "completion": 2.0},
        "response": {"anything": None},
    },
    {"output": "x", "token_usage": {"total": 5}, "trajectory": []},
    {"output": "\ud800 lone surrogate"},  # json reads it, pydantic-core's parser does not
]


@pytest.mark.parametrize("reply", REPLIES)
async def test_an_answer_reads_as_the_protocol_models_read_it(reply: dict[str, Any]) -> None:
    """The answer is parsed and validated in one pass: the same reply as validating what
    json.loads reads, fields the agent left out and extra fields included."""
    body = json.dumps(reply).encode()

    def answer(req: transport.Request) -> transport.MockResponse:
        return transport.MockResponse(200, body, {"content-type": "application/json"})

    spec = base.ConnectorSpec(url="http://agent.invalid/run")
    connector = rest.RestConnector(spec, transport=transport.MockTransport(answer))
    got = await connector.run(_request())
    expected = AgentReply.model_validate(json.loads(body))
    assert got == expected
    assert got.model_fields_set == expected.model_fields_set
    assert got.model_extra == expected.model_extra
    assert got.unreported == expected.unreported


@pytest.mark.parametrize(
    "fields", [{}, {"files": [{"path": "a.txt", "content": "x"}]}, {"provisioned": {"k": [1]}}]
)
def test_the_request_body_is_the_wire_json(fields: dict[str, Any]) -> None:
    request = _request(env={"A": "é"}, timeout_s=3, **fields)
    assert request.wire_bytes() == request.wire_json().encode()
    assert json.loads(request.wire_bytes()) == request.wire()
