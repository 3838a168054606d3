"""Real HTTP servers on 127.0.0.1 for connector tests: one handler per test, scripted."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agent_health.connectors.protocol import AgentRequest
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serving(handler: Handler, path: str = "/agent") -> AsyncIterator[str]:
    """Serve ``handler`` for POST ``path`` on a free loopback port; yield its URL."""
    app = web.Application()
    app.router.add_post(path, handler)
    # Cancel handlers whose client went away (a timed-out connector), so cleanup is quick.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


async def open_sse(request: web.Request) -> web.StreamResponse:
    """Start a ``text/event-stream`` answer."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    return response


def event(kind: str, **fields: Any) -> bytes:
    """One AG-UI event as an SSE frame."""
    return f"data: {json.dumps({'type': kind, **fields})}\n\n".encode()


def sse_handler(*frames: bytes, end: bool = True) -> Handler:
    """A handler that streams ``frames`` and ends the body cleanly (``end``) or not at all."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = await open_sse(request)
        for frame in frames:
            await response.write(frame)
        if end:
            await response.write_eof()
        return response

    return handler


def request(prompt: str = "Diagnose the payment service", **fields: Any) -> AgentRequest:
    """An AgentRequest as ``agent.run()`` builds it."""
    values: dict[str, Any] = {
        "prompt": prompt,
        "run_id": "run-1",
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }
    return AgentRequest.model_validate({**values, **fields})


def run_started() -> bytes:
    return event("RUN_STARTED", threadId="run-1", runId="run-1")


def run_finished(**fields: Any) -> bytes:
    return event("RUN_FINISHED", threadId="run-1", runId="run-1", **fields)


def half_a_run(said: str = "It cannot reach db-pri") -> list[bytes]:
    """Some of an AG-UI run: a message, a tool call and its result, then a message (saying
    ``said``) and a second call that are still open when the agent stops sending."""
    return [
        run_started(),
        event("TEXT_MESSAGE_START", messageId="m1", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m1", delta="Checking the logs."),
        event("TEXT_MESSAGE_END", messageId="m1"),
        event("TOOL_CALL_START", toolCallId="c1", toolCallName="search_logs"),
        event("TOOL_CALL_ARGS", toolCallId="c1", delta='{"service": "payment"}'),
        event("TOOL_CALL_END", toolCallId="c1"),
        event("TOOL_CALL_RESULT", messageId="r1", toolCallId="c1", content='{"lines": 3}'),
        event("TEXT_MESSAGE_START", messageId="m2", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m2", delta=said),
        event("TOOL_CALL_START", toolCallId="c2", toolCallName="service_status"),
        event("TOOL_CALL_ARGS", toolCallId="c2", delta='{"name": "db-'),
    ]


def stalling_sse(frames: list[bytes]) -> Handler:
    """A handler that streams ``frames`` and then sends nothing, never ending the run."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = await open_sse(request)
        for frame in frames:
            await response.write(frame)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return handler
