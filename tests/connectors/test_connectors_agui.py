"""The AG-UI connector against real SSE servers on loopback: the example agent and
scripted streams for every error path."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import agui, errors, transport
from aiohttp import web
from support.loopback import (
    event,
    open_sse,
    request,
    run_finished,
    run_started,
    serving,
    sse_handler,
)


def connector(url: str, **spec: Any) -> agui.AguiConnector:
    return agui.AguiConnector(connectors.ConnectorSpec(connector="agui", url=url, **spec))


async def run(url: str, **spec: Any) -> connectors.AgentReply:
    conn = connector(url, **spec)
    try:
        return await conn.run(request())
    finally:
        await conn.aclose()


async def test_example_agent_over_agui(triage_url: str) -> None:
    url = triage_url.removesuffix("/run") + "/agui"
    reply = await run(url)
    assert "db-primary" in reply.output
    types = [s.type for s in reply.trajectory]
    assert types == [
        "thinking",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    calls = [s for s in reply.trajectory if s.type == "tool_call"]
    assert [(c.tool_name, c.tool_args) for c in calls] == [
        ("search_logs", {"service": "payment", "level": "error"}),
        ("service_status", {"name": "db-primary"}),
    ]
    result = reply.trajectory[2]
    assert result.status == "ok"
    assert result.tool_output["lines"][0]["message"] == "Connection refused to db-primary:5432"
    assert reply.trajectory[-1].content == reply.output
    assert reply.token_usage.total == reply.token_usage.prompt + reply.token_usage.completion > 0
    assert reply.model_extra is not None
    assert reply.model_extra["events"][0]["type"] == "RUN_STARTED"
    assert reply.model_extra["events"][-1]["type"] == "RUN_FINISHED"


async def test_posts_run_agent_input_with_run_headers() -> None:
    seen: dict[str, Any] = {}

    async def handler(req: web.Request) -> web.StreamResponse:
        seen["headers"] = dict(req.headers)
        seen["body"] = await req.json()
        return await sse_handler(run_started(), run_finished(result="done"))(req)

    async with serving(handler) as url:
        conn = connector(url, options={"state": {"tier": "gold"}})
        reply = await conn.run(
            request(context=[{"description": "Error log", "value": "refused"}], env={"A": "1"})
        )
        await conn.aclose()
    assert reply.output == "done"
    assert seen["headers"]["X-Agent-Health-Run-Id"] == "run-1"
    assert seen["headers"]["traceparent"].startswith("00-aaaa")
    assert seen["headers"]["Accept"] == "text/event-stream"
    body = seen["body"]
    assert (body["threadId"], body["runId"]) == ("run-1", "run-1")
    assert body["messages"][0]["role"] == "user"
    assert body["messages"][0]["content"] == "Diagnose the payment service"
    assert body["context"] == [{"description": "Error log", "value": "refused"}]
    assert body["forwardedProps"] == {"env": {"A": "1"}}
    assert body["state"] == {"tier": "gold"}


async def test_run_error_is_agent_run_failed(triage_url: str) -> None:
    url = triage_url.removesuffix("/run") + "/agui"
    conn = connector(url)
    with pytest.raises(errors.AgentRunFailed, match=r"RUN_ERROR \[SIMULATED\]: simulated failure"):
        await conn.run(request(env={"FAIL": "run_error"}))
    await conn.aclose()


async def test_stream_that_ends_without_run_finished() -> None:
    frames = (run_started(), event("TEXT_MESSAGE_START", messageId="m1", role="assistant"))
    async with serving(sse_handler(*frames)) as url:
        with pytest.raises(
            errors.AgentStreamIncomplete, match="after 2 events without RUN_FINISHED"
        ):
            await run(url)


async def test_stream_cut_mid_body() -> None:
    async def handler(req: web.Request) -> web.StreamResponse:
        response = await open_sse(req)
        await response.write(run_started())
        await response.write(b'data: {"type": "TEXT_MESSAGE_ST')
        await asyncio.sleep(0.05)  # let the bytes leave before the connection drops
        assert req.transport is not None
        req.transport.abort()  # the connection drops before the chunked body is complete
        return response

    async with serving(handler) as url:
        with pytest.raises(errors.AgentStreamIncomplete, match="cut its AG-UI stream"):
            await run(url)


async def test_malformed_event_json() -> None:
    frames = (run_started(), b"data: {not json}\n\n", run_finished())
    async with serving(sse_handler(*frames)) as url:
        with pytest.raises(errors.AgentProtocolError, match=r"event #2 that is not JSON: '\{not"):
            await run(url)


async def test_event_of_a_known_type_with_a_bad_shape() -> None:
    frames = (run_started(), event("TOOL_CALL_START", toolCallId="c1"), run_finished())
    async with serving(sse_handler(*frames)) as url:
        with pytest.raises(
            errors.AgentProtocolError, match=r"malformed TOOL_CALL_START event.*toolCallName"
        ):
            await run(url)


async def test_answer_that_is_not_an_event_stream() -> None:
    async def handler(req: web.Request) -> web.StreamResponse:
        return web.json_response({"output": "I am a REST agent"})

    async with serving(handler) as url:
        with pytest.raises(
            errors.AgentProtocolError, match=r"'application/json; charset=utf-8'.*text/event-stream"
        ):
            await run(url)


async def test_events_are_consumed_as_they_arrive() -> None:
    """The server holds the rest of the stream until the client has folded the first
    message; a client that buffered the whole body would see it only after the pause."""
    log: list[str] = []
    gate = asyncio.Event()

    async def handler(req: web.Request) -> web.StreamResponse:
        response = await open_sse(req)
        await response.write(run_started())
        await response.write(event("TEXT_MESSAGE_START", messageId="m1", role="assistant"))
        log.append("server: paused")
        try:
            await asyncio.wait_for(gate.wait(), 10)  # liveness only; the assertion is the order
        except TimeoutError:
            log.append("server: gate never opened")
        log.append("server: resumed")
        await response.write(event("TEXT_MESSAGE_CONTENT", messageId="m1", delta="streamed"))
        await response.write(event("TEXT_MESSAGE_END", messageId="m1"))
        await response.write(run_finished())
        await response.write_eof()
        return response

    def on_event(ev: Mapping[str, Any]) -> None:
        log.append(f"client: {ev['type']}")
        if ev["type"] == "TEXT_MESSAGE_START":
            gate.set()

    async with serving(handler) as url:
        conn = connector(url)
        conn.on_event = on_event
        reply = await conn.run(request())
        await conn.aclose()
    assert "server: gate never opened" not in log
    assert log.index("server: paused") < log.index("server: resumed")
    assert log.index("client: TEXT_MESSAGE_START") < log.index("server: resumed")
    assert log.index("server: resumed") < log.index("client: TEXT_MESSAGE_CONTENT")
    assert log[-1] == "client: RUN_FINISHED"
    assert reply.output == "streamed"


async def test_async_callback_is_awaited() -> None:
    seen: list[str] = []

    async def on_event(ev: Mapping[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(ev["type"])

    async with serving(sse_handler(run_started(), run_finished())) as url:
        conn = agui.AguiConnector(
            connectors.ConnectorSpec(connector="agui", url=url), on_event=on_event
        )
        await conn.run(request())
        await conn.aclose()
    assert seen == ["RUN_STARTED", "RUN_FINISHED"]


async def test_fold_orders_steps_by_start_and_reads_chunks_and_thinking() -> None:
    frames = (
        run_started(),
        event("THINKING_START"),
        event("THINKING_TEXT_MESSAGE_START"),
        event("THINKING_TEXT_MESSAGE_CONTENT", delta="legacy "),
        event("THINKING_TEXT_MESSAGE_CONTENT", delta="thought"),
        event("THINKING_TEXT_MESSAGE_END"),
        event("THINKING_END"),
        event("REASONING_MESSAGE_CHUNK", messageId="r1", delta="new thought"),
        event("TEXT_MESSAGE_START", messageId="m1", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m1", delta="Let me "),
        event("TOOL_CALL_START", toolCallId="c1", toolCallName="search_logs"),
        event("TOOL_CALL_ARGS", toolCallId="c1", delta='{"service": '),
        event("TOOL_CALL_ARGS", toolCallId="c1", delta='"auth"}'),
        event("TOOL_CALL_END", toolCallId="c1"),
        event("TEXT_MESSAGE_CONTENT", messageId="m1", delta="look."),
        event("TEXT_MESSAGE_END", messageId="m1"),
        event(
            "TOOL_CALL_RESULT",
            messageId="t1",
            toolCallId="c1",
            content='{"error": "down"}',
            metadata={"status": "error"},
        ),
        event("TOOL_CALL_CHUNK", toolCallId="c2", toolCallName="service_status", delta='{"na'),
        event("TOOL_CALL_CHUNK", toolCallId="c2", delta='me": "idp"}'),
        event("STATE_SNAPSHOT", snapshot={"k": 1}),
        event("SOMETHING_FROM_THE_FUTURE", anything=True),
        event("TEXT_MESSAGE_CHUNK", messageId="m2", delta="The cert "),
        event("TEXT_MESSAGE_CHUNK", messageId="m2", delta="expired."),
        event("CUSTOM", name="token_usage", value={"prompt": 7, "completion": 5}),
        run_finished(),
        event("TEXT_MESSAGE_START", messageId="late"),  # after RUN_FINISHED: not read
    )
    async with serving(sse_handler(*frames)) as url:
        reply = await run(url)
    steps = [s.model_dump(exclude_none=True) for s in reply.trajectory]
    assert steps == [
        {"type": "thinking", "content": "legacy thought"},
        {"type": "thinking", "content": "new thought"},
        {"type": "assistant", "content": "Let me look."},
        {
            "type": "tool_call",
            "tool_name": "search_logs",
            "tool_args": {"service": "auth"},
            "tool_call_id": "c1",
        },
        {
            "type": "tool_result",
            "tool_name": "search_logs",
            "tool_output": {"error": "down"},
            "status": "error",
            "latency_ms": steps[4]["latency_ms"],
            "tool_call_id": "c1",
        },
        {
            "type": "tool_call",
            "tool_name": "service_status",
            "tool_args": {"name": "idp"},
            "tool_call_id": "c2",
        },
        {"type": "assistant", "content": "The cert expired."},
    ]
    assert steps[4]["latency_ms"] >= 0
    assert reply.output == "The cert expired."  # the last assistant message
    assert (reply.token_usage.prompt, reply.token_usage.total) == (7, 12)
    assert reply.model_extra is not None
    kinds = [e["type"] for e in reply.model_extra["events"]]
    assert "SOMETHING_FROM_THE_FUTURE" in kinds
    assert kinds[-1] == "RUN_FINISHED"


async def test_usage_and_output_from_run_finished() -> None:
    usage = [
        {"model": "a", "inputTokens": 10, "outputTokens": 4},
        {"model": "b", "inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
    ]
    frames = (
        run_started(),
        event("TEXT_MESSAGE_START", messageId="m", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m", delta="thinking out loud"),
        event("TEXT_MESSAGE_END", messageId="m"),
        run_finished(result={"output": "the answer"}, usage=usage),
    )
    async with serving(sse_handler(*frames)) as url:
        reply = await run(url)
    assert reply.output == "the answer"
    assert reply.token_usage.model_dump() == {"prompt": 11, "completion": 6, "total": 17}
    # Each entry names its model: the tokens are split between them, to be priced apart.
    assert [u.model_dump() for u in reply.usage_by_model] == [
        {"prompt": 10, "completion": 4, "total": 14, "model": "a"},
        {"prompt": 1, "completion": 2, "total": 3, "model": "b"},
    ]
    assert reply.extra_fields()["usage_by_model"][0] == {
        "model": "a",
        "prompt": 10,
        "completion": 4,
        "total": 14,
    }


async def test_the_model_a_run_names_is_read_from_its_usage_its_result_or_a_custom_event() -> None:
    one_model = [{"model": "m", "inputTokens": 3}, {"model": "m", "inputTokens": 4}]
    streams = {
        "usage": (run_started(), run_finished(usage=one_model)),
        "result": (run_started(), run_finished(result={"output": "x", "model": "r"})),
        "custom": (
            run_started(),
            event("CUSTOM", name="usage", value={"model": "c", "inputTokens": 1}),
            run_finished(),
        ),
    }
    found = {}
    for name, frames in streams.items():
        async with serving(sse_handler(*frames)) as url:
            reply = await run(url)
        found[name] = (reply.model_extra or {}).get("model"), reply.usage_by_model
    assert found == {"usage": ("m", ()), "result": ("r", ()), "custom": ("c", ())}


async def test_no_usage_reported_is_unknown_not_zeros() -> None:
    async with serving(sse_handler(run_started(), run_finished())) as url:
        reply = await run(url)
    assert reply.token_usage.model_dump() == {"prompt": None, "completion": None, "total": None}
    assert reply.unreported == {"token_usage"}  # the events are its trajectory: reported
    assert reply.output == ""


async def test_http_errors_map_like_rest() -> None:
    async def crash(req: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "boom"}, status=503)

    async with serving(crash) as url:
        with pytest.raises(
            errors.AgentHTTPError, match=re.escape('HTTP 503: {"error": "boom"}')
        ) as info:
            await run(url)
    assert info.value.status == 503

    async def stall(req: web.Request) -> web.StreamResponse:
        response = await open_sse(req)
        await response.write(run_started())
        await asyncio.Event().wait()
        return response

    async with serving(stall) as url:
        with pytest.raises(errors.AgentTimeout, match=r"did not answer within 0\.2 s"):
            await run(url, timeout=0.2)

    with pytest.raises(errors.AgentUnreachable, match="cannot connect"):
        await run("http://127.0.0.1:9/agui")


def test_needs_a_url() -> None:
    with pytest.raises(errors.ConnectorConfigError, match="agui connector needs a url"):
        connectors.create(connectors.ConnectorSpec(connector="agui"))


async def test_raw_events_are_json_round_trippable() -> None:
    async with serving(sse_handler(run_started(), run_finished(result={"x": [1]}))) as url:
        reply = await run(url)
    assert json.loads(reply.model_dump_json())["events"][1]["result"] == {"x": [1]}


def test_the_posted_body_is_the_run_agent_input_in_wire_form() -> None:
    """run() posts body(): RunAgentInput's wire form, built without the models' serializer."""
    spec = connectors.ConnectorSpec(
        connector="agui",
        url="http://agent.invalid/agui",
        options={
            "state": {"step": 1},
            "tools": [{"name": "search", "description": "d", "parameters": {"type": "object"}}],
            "forwarded_props": {"team": "sre"},
        },
    )
    conn = agui.AguiConnector(spec)
    for item in (request(), request(prompt='quotes " and é', env={"A": "1"})):
        assert json.loads(conn.body(item)) == json.loads(
            conn.run_input(item).model_dump_json(by_alias=True)
        )
    bare = agui.AguiConnector(connectors.ConnectorSpec(connector="agui", url="http://x.invalid"))
    assert json.loads(bare.body(request())) == json.loads(
        bare.run_input(request()).model_dump_json(by_alias=True)
    )


# -- the event stream's edges, each split at every byte ------------------------------------

EDGES = (
    "\ufeff: a comment before anything\r\n"
    "retry: 1000\r\n"
    "\r\n"
    'data: {"type": "RUN_STARTED", "threadId": "run-1", "runId": "run-1"}\r\n'
    "\r\n"
    "data:\n"
    "\n"  # an empty keep-alive event: skipped, not an event
    "event: message\n"
    "id: 1\n"
    'data: {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}\n'
    "\n"
    ": a comment between events\n"
    'data: {"type": "TEXT_MESSAGE_CONTENT",\r'
    'data:  "messageId": "m",\r'
    'data:  "delta": "caf\u00e9 \u2713 "}\r'  # one event in three data lines, CR line ends
    "\r"
    'data: {"type": "SOMETHING_FROM_THE_FUTURE", "x": [1]}\n'
    "\n"
    'data: {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "done"}\n'
    "\n"
    'data: {"type": "TEXT_MESSAGE_END", "messageId": "m"}\n'
    "\n"
    'data: {"type": "RUN_FINISHED", "threadId": "run-1", "runId": "run-1"}\n'
    "\n"
).encode()


def chunked(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


async def run_through(chunks: list[bytes], **kwargs: Any) -> connectors.AgentReply:
    """Run the connector against a transport that answers ``chunks`` as the body's reads."""

    def answer(req: transport.Request) -> transport.MockResponse:
        return transport.MockResponse(200, chunks, {"content-type": "text/event-stream"})

    spec = connectors.ConnectorSpec(connector="agui", url="http://agent.invalid/agui")
    conn = agui.AguiConnector(spec, transport=transport.MockTransport(answer), **kwargs)
    try:
        return await conn.run(request())
    finally:
        await conn.aclose()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(EDGES)])
async def test_a_stream_split_anywhere_folds_the_same(size: int) -> None:
    """CRLF, CR and LF line ends, comments, a byte order mark, an empty event, an event in
    three ``data`` lines, an unknown type and UTF-8 split inside a character, in every
    chunking."""
    reply = await run_through(chunked(EDGES, size))
    assert reply.output == "café ✓ done"
    assert [s.model_dump(exclude_none=True) for s in reply.trajectory] == [
        {"type": "assistant", "content": "café ✓ done"}
    ]
    assert reply.model_extra is not None
    assert [e["type"] for e in reply.model_extra["events"]] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "SOMETHING_FROM_THE_FUTURE",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]


async def test_an_event_split_across_writes_on_a_real_connection() -> None:
    pieces = [EDGES[i : i + 50] for i in range(0, len(EDGES), 50)]

    async def handler(req: web.Request) -> web.StreamResponse:
        response = await open_sse(req)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0)  # a write per piece, so reads end mid-event
        await response.write_eof()
        return response

    async with serving(handler) as url:
        reply = await run(url)
    assert reply.output == "café ✓ done"


async def test_run_error_mid_stream_after_content() -> None:
    seen: list[str] = []
    frames = [
        run_started(),
        event("TEXT_MESSAGE_START", messageId="m", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m", delta="half an ans"),
        event("RUN_ERROR", message="model overloaded", code="529"),
        run_finished(),
    ]
    with pytest.raises(errors.AgentRunFailed, match=r"RUN_ERROR \[529\]: model overloaded"):
        await run_through(chunked(b"".join(frames), 5), on_event=lambda e: seen.append(e["type"]))
    assert seen == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]


async def test_a_last_event_without_its_blank_line_is_not_dispatched() -> None:
    """The stream ends inside RUN_FINISHED's event (no blank line after it): per the SSE
    rules the event never happened, so the run did not finish."""
    stream = run_started() + run_finished().rstrip(b"\n") + b"\n"
    with pytest.raises(errors.AgentStreamIncomplete, match="after 1 events without RUN_FINISHED"):
        await run_through(chunked(stream, 9))


async def test_a_malformed_event_split_across_chunks_names_its_number() -> None:
    stream = run_started() + b'data: {"type": "TOOL_CALL_START",\ndata: "toolCallId": 3}\n\n'
    with pytest.raises(
        errors.AgentProtocolError, match=r"malformed TOOL_CALL_START event \(#2\): toolCallId"
    ):
        await run_through(chunked(stream, 4))
