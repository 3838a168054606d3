"""The HTTP connectors (REST, AG-UI, OpenAI-compatible) share one client seam and one
mapping of failures: each case runs against every one of them on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from agent_health import connectors
from agent_health.connectors import agui, errors, openai_chat, rest, wire
from aiohttp import web
from loopback import request, serving

KINDS = ["rest", "agui", "openai"]
CHAT = "/v1/chat/completions"


def path_for(kind: str) -> str:
    return CHAT if kind == "openai" else "/agent"


async def run(kind: str, url: str, **spec: Any) -> connectors.AgentReply:
    conn = connectors.create(connectors.ConnectorSpec(connector=kind, url=url, **spec))
    try:
        return await conn.run(request())
    finally:
        await conn.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_run_headers_on_every_request(kind: str) -> None:
    seen: dict[str, str] = {}

    async def handler(req: web.Request) -> web.StreamResponse:
        seen.update(req.headers)
        return web.json_response({"error": "stop here"}, status=418)

    async with serving(handler, path=path_for(kind)) as url:
        with pytest.raises(errors.AgentHTTPError):
            await run(kind, url, headers={"X-Team": "sre"})
    assert seen[wire.RUN_ID_HEADER] == "run-1"
    assert seen["traceparent"] == "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    assert seen["X-Team"] == "sre"


@pytest.mark.parametrize("kind", KINDS)
async def test_non_2xx_is_http_error_with_the_body(kind: str) -> None:
    async def handler(req: web.Request) -> web.StreamResponse:
        return web.Response(status=502, text="bad gateway: upstream down")

    async with serving(handler, path=path_for(kind)) as url:
        with pytest.raises(errors.AgentHTTPError, match="HTTP 502: bad gateway: upstream down"):
            await run(kind, url)


@pytest.mark.parametrize("kind", KINDS)
async def test_timeout(kind: str) -> None:
    async def handler(req: web.Request) -> web.StreamResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with serving(handler, path=path_for(kind)) as url:
        with pytest.raises(errors.AgentTimeout, match=r"did not answer within 0\.2 s"):
            await run(kind, url, timeout=0.2)


@pytest.mark.parametrize("kind", KINDS)
async def test_connection_refused(kind: str) -> None:
    with pytest.raises(errors.AgentUnreachable, match=r"cannot connect .*\(is it running\?\)"):
        await run(kind, "http://127.0.0.1:9" + path_for(kind))


async def test_rest_malformed_and_off_protocol_answers() -> None:
    async def text(req: web.Request) -> web.StreamResponse:
        return web.Response(text="hello")

    async with serving(text) as url:
        with pytest.raises(errors.AgentProtocolError, match="malformed JSON: hello"):
            await run("rest", url)

    async def bad_step(req: web.Request) -> web.StreamResponse:
        return web.json_response({"output": "x", "trajectory": [{"type": "dance"}]})

    async with serving(bad_step) as url:
        with pytest.raises(errors.AgentProtocolError, match=r"not REST protocol v1: trajectory\.0"):
            await run("rest", url)


@pytest.mark.parametrize("kind", KINDS)
async def test_client_seam_takes_a_transport(kind: str) -> None:
    """Every HTTP connector accepts an httpx transport, so a unit test may pass a function."""
    sent: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        sent.append(req)
        return httpx.Response(418, text="teapot")

    classes = {
        "rest": rest.RestConnector,
        "agui": agui.AguiConnector,
        "openai": openai_chat.OpenAIChatConnector,
    }
    spec = connectors.ConnectorSpec(connector=kind, url="http://agent.invalid/x")
    conn = classes[kind](spec, transport=httpx.MockTransport(handler))
    with pytest.raises(errors.AgentHTTPError, match="HTTP 418: teapot"):
        await conn.run(request())
    await conn.aclose()
    assert sent[0].headers[wire.RUN_ID_HEADER] == "run-1"
