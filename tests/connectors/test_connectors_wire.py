"""The HTTP connectors (REST, AG-UI, OpenAI-compatible) share one client seam and one
mapping of failures: each case runs against every one of them on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import agui, errors, openai_chat, rest, transport, wire
from agent_health.ledger import observation, strictjson
from aiohttp import web
from support.loopback import event, request, serving

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
    """Every HTTP connector accepts a transport, so a unit test may pass a function."""
    sent: list[transport.Request] = []

    def handler(req: transport.Request) -> transport.MockResponse:
        sent.append(req)
        return transport.MockResponse(418, b"teapot")

    classes = {
        "rest": rest.RestConnector,
        "agui": agui.AguiConnector,
        "openai": openai_chat.OpenAIChatConnector,
    }
    spec = connectors.ConnectorSpec(connector=kind, url="http://agent.invalid/x")
    conn = classes[kind](spec, transport=transport.MockTransport(handler))
    with pytest.raises(errors.AgentHTTPError, match="HTTP 418: teapot"):
        await conn.run(request())
    await conn.aclose()
    assert sent[0].headers[wire.RUN_ID_HEADER] == "run-1"


def _answer(kind: str) -> web.Response:
    if kind == "openai":
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})
    if kind == "agui":
        frames = event("RUN_STARTED", threadId="t", runId="r") + event(
            "RUN_FINISHED", threadId="t", runId="r"
        )
        return web.Response(body=frames, content_type="text/event-stream")
    return web.json_response({"output": "ok"})


@pytest.mark.parametrize("kind", KINDS)
async def test_every_exchange_is_observed_with_sizes_and_hashes(kind: str) -> None:
    seen: list[observation.Observation] = []
    bodies: list[bytes] = []

    async def handler(req: web.Request) -> web.StreamResponse:
        bodies.append(await req.read())
        return _answer(kind)

    async with serving(handler, path=path_for(kind)) as url:
        spec = connectors.ConnectorSpec(connector=kind, url=url)
        conn = connectors.create(spec, observe=seen.append)
        try:
            await conn.run(request())
        finally:
            await conn.aclose()
    [seen_one] = seen
    answer = _answer(kind).body
    assert isinstance(answer, bytes)
    assert (seen_one.run_id, seen_one.method, seen_one.path) == ("run-1", "POST", path_for(kind))
    assert seen_one.status == 200
    assert seen_one.error is None
    assert seen_one.request_bytes == len(bodies[0])
    assert seen_one.request_sha256 == hashlib.sha256(bodies[0]).hexdigest()
    assert seen_one.response_sha256 == hashlib.sha256(answer).hexdigest()
    assert seen_one.body == answer
    assert seen_one.started_at <= seen_one.ended_at


@pytest.mark.parametrize("kind", KINDS)
async def test_a_cancelled_exchange_is_observed_at_once_as_cancelled(kind: str) -> None:
    """A test's deadline cancels agent.run(): the exchange is recorded then, not later."""
    seen: list[observation.Observation] = []
    arrived = asyncio.Event()

    async def handler(req: web.Request) -> web.StreamResponse:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with serving(handler, path=path_for(kind)) as url:
        spec = connectors.ConnectorSpec(connector=kind, url=url)
        conn = connectors.create(spec, observe=seen.append)
        call = asyncio.ensure_future(conn.run(request()))
        await asyncio.wait_for(arrived.wait(), 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert len(seen) == 1  # already there: nobody waited for the agent
        await conn.aclose()
    assert seen[0].status is None
    assert seen[0].error is not None
    assert seen[0].error.startswith("cancelled after ")


async def test_a_refused_connection_is_observed_with_its_reason() -> None:
    seen: list[observation.Observation] = []
    spec = connectors.ConnectorSpec(connector="rest", url="http://127.0.0.1:9/run")
    conn = connectors.create(spec, observe=seen.append)
    with pytest.raises(errors.AgentUnreachable):
        await conn.run(request())
    await conn.aclose()
    assert seen[0].status is None
    assert "cannot connect to agent at http://127.0.0.1:9/run" in (seen[0].error or "")


async def test_a_custom_connector_is_not_handed_the_observer() -> None:
    made: list[Any] = []

    def factory(spec: connectors.ConnectorSpec) -> Any:
        made.append(spec)
        return rest.RestConnector(spec)

    spec = connectors.ConnectorSpec(connector="mine", url="http://127.0.0.1:9/run")
    conn = connectors.create(spec, {"mine": factory}, observe=lambda _o: None)
    assert made == [spec]
    await conn.aclose()


JSON_EDGES = [
    '{"b": 1E-400, "c": -0.0, "d": 0.1, "e": 1e300, "f": "1e400"}',
    '{"a": 123456789012345678901234567890}',
    '{"a": "\\ud800"}',  # a lone surrogate: json takes it, pydantic-core does not
    '{"a": 1, "a": 2, "b": 3}',
    ' ["\\u00e9", "\\/", null, true] ',
]


@pytest.mark.parametrize("text", JSON_EDGES)
def test_json_is_read_as_json_reads_it(text: str) -> None:
    expected = repr(json.loads(text))  # repr: NaN is not equal to itself
    assert repr(wire.parse_json(text)) == expected
    assert repr(wire.parse_json(text.encode())) == expected
    assert repr(wire.parse_json(text.encode("utf-16"))) == expected  # json detects UTF-16


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": NaN}', "NaN: JSON has no NaN or Infinity"),
        ('{"a": [Infinity]}', "Infinity: JSON has no NaN or Infinity"),
        ('{"a": -Infinity}', "-Infinity: JSON has no NaN or Infinity"),
        ('{"a": 1e400}', "1e400 is too large for a 64-bit float"),
        ('{"a": "\\ud800", "b": NaN}', "NaN: JSON has no NaN or Infinity"),  # the json path
        ("[" * 201 + "1" + "]" * 201, "nested deeper than 200 levels"),
        ('{"a":' * 201 + "{}" + "}" * 201, "nested deeper than 200 levels"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 200 levels"),
    ],
)
def test_what_json_cannot_hold_is_refused_saying_why(text: str, why: str) -> None:
    """Python's json takes NaN, Infinity and 1e400 (as inf): no ledger line can hold them,
    and a NaN compares false with every threshold. Past 200 levels is refused too."""
    for given in (text, text.encode()):
        with pytest.raises(ValueError, match=re.escape(why)) as raised:
            wire.parse_json(given)
        assert why in wire.why_not(raised.value)


def test_a_reply_may_nest_200_levels() -> None:
    """200 containers that hold something (an empty one at the bottom is no level)."""
    for text in (
        "[" * 201 + "]" * 201,
        "[" * 200 + "1" + "]" * 200,
        '{"a":' * 200 + "{}" + "}" * 200,
    ):
        assert strictjson.too_deep(wire.parse_json(text), 199)
        assert not strictjson.too_deep(wire.parse_json(text), 200)


@pytest.mark.parametrize("text", ['{"a": 1', '{"a": "\x01"}', "[1,]", '{"a": 1}x', "\ufeff{}"])
def test_what_json_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - json's own error type, whatever its words
        json.loads(text)
    with pytest.raises(ValueError):  # noqa: PT011
        wire.parse_json(text)
