"""An MCP server on loopback for the gateway's tests, honest or hostile by path.

Each path answers JSON-RPC over Streamable HTTP its own way: ``/mcp`` as a well-behaved server
(JSON answers, or SSE with ``?sse=1``; batches; 202 for notifications; a session id on
``initialize``), ``/huge`` with a result of ``?mb=N`` megabytes, ``/endless`` with the answer
followed by notifications until the caller leaves, ``/garbage`` with text that is not JSON,
``/collide`` answering every request of a batch with the first request's id.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

SESSION = "session-7f3a"
ENDLESS_SENT = web.AppKey("endless_sent", list[int])


def _result(message: dict[str, Any]) -> dict[str, Any]:
    method = message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "loopback", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "fail":
            return {"content": [{"type": "text", "text": "disk full"}], "isError": True}
        if name == "liar":  # a success that says it failed
            return {"content": [{"type": "text", "text": "all done, 3 rows"}], "isError": True}
        return {"content": [{"type": "text", "text": json.dumps(arguments)}]}
    if method == "resources/read":
        return {"contents": [{"uri": params.get("uri"), "text": "hello"}]}
    if method == "prompts/get":
        return {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
    return {}


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    name = (message.get("params") or {}).get("name")
    if message.get("method") == "tools/call" and name in ("missing", None):
        error = {"code": -32602, "message": f"Unknown tool: {name}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": _result(message)}


async def mcp(request: web.Request) -> web.StreamResponse:
    try:
        payload = json.loads(await request.read())
    except ValueError:
        error = {"code": -32700, "message": "Parse error"}
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": error}, status=400)
    messages = payload if isinstance(payload, list) else [payload]
    requests = [m for m in messages if isinstance(m, dict) and "id" in m and "method" in m]
    requests = [m for m in requests if m.get("jsonrpc") == "2.0"]
    headers = {}
    if any(m.get("method") == "initialize" for m in requests):
        headers["Mcp-Session-Id"] = SESSION
    if not requests:
        return web.Response(status=202, headers=headers)
    answers = [_answer(m) for m in requests]
    if request.query.get("sse"):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x"}}
        await response.write(b"event: message\r\ndata: " + json.dumps(note).encode() + b"\r\n\r\n")
        for answer in answers:
            # One event over several data lines (the JSON indented), some without the space.
            lines = json.dumps(answer, indent=1).splitlines()
            event = "id: 1\n" + "".join(
                f"data:{line}\n" if n % 2 else f"data: {line}\n" for n, line in enumerate(lines)
            )
            await response.write(event.encode() + b"\n")
        await response.write_eof()
        return response
    body = answers if isinstance(payload, list) else answers[0]
    return web.json_response(body, headers=headers)


async def huge(request: web.Request) -> web.StreamResponse:
    message = json.loads(await request.read())
    size = int(float(request.query.get("mb", "100")) * 1024 * 1024)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    head = f'{{"jsonrpc": "2.0", "id": {json.dumps(message["id"])}, "result": {{"content": '
    await response.write((head + '[{"type": "text", "text": "').encode())
    block = b"x" * (1024 * 1024)
    sent = 0
    while sent < size:
        piece = block[: size - sent]
        await response.write(piece)
        sent += len(piece)
    await response.write(b'"}], "isError": false}}')
    await response.write_eof()
    return response


async def endless(request: web.Request) -> web.StreamResponse:
    message = json.loads(await request.read())
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: " + json.dumps(_answer(message)).encode() + b"\n\n")
    sent = request.app[ENDLESS_SENT]
    note = b'data: {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}\n\n'
    try:
        while True:
            await response.write(note * 64)
            sent[0] += 64
            await asyncio.sleep(0)
    except (ConnectionError, asyncio.CancelledError):
        return response


async def garbage(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text="{not json at all", content_type="application/json")


async def collide(request: web.Request) -> web.Response:
    batch = json.loads(await request.read())
    first = batch[0]["id"]
    answers = [{**_answer(m), "id": first} for m in batch]
    return web.json_response(answers)


def app() -> web.Application:
    application = web.Application(client_max_size=8 * 1024 * 1024)
    application[ENDLESS_SENT] = [0]
    application.router.add_post("/mcp", mcp)
    application.router.add_post("/huge", huge)
    application.router.add_post("/endless", endless)
    application.router.add_post("/garbage", garbage)
    application.router.add_post("/collide", collide)
    return application


def call(id: int | str, name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


ACCEPT = {"Accept": "application/json, text/event-stream"}
