"""Shared pieces of the gateway tests: a real upstream on loopback and a recording gateway."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from agent_health import gateway
from agent_health.gateway import config
from agent_health.ledger import filestore, records
from aiohttp import web

KEY = b"g" * 32
CONTROLLER_TOKEN = "controller-token-8f2b9c7d1e"
PEER_TOKEN = "peer-tools-token-55aa31c0"
TOKENS = {"controller": CONTROLLER_TOKEN, "peer:tools": PEER_TOKEN}
CELL = "cell-1"
RUN_ID = "run-cell-1"

SSE_RELEASE = web.AppKey("sse_release", asyncio.Event)
SSE_DONE = web.AppKey("sse_done", asyncio.Event)
HANG = web.AppKey("hang", asyncio.Event)
HANG_ARRIVED = web.AppKey("hang_arrived", asyncio.Event)


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    response = web.json_response(
        {
            "method": request.method,
            "path": request.path,
            "query": request.raw_path.partition("?")[2],
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_len": len(body),
        }
    )
    response.headers["X-Upstream"] = "yes"
    response.headers.add("Set-Cookie", "a=1")
    response.headers.add("Set-Cookie", "b=2")
    response.headers["Proxy-Authenticate"] = "Basic"
    response.headers["Keep-Alive"] = "timeout=5"
    return response


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.Response(status=code, text=f"status {code}", headers={"X-Code": str(code)})


async def big(request: web.Request) -> web.StreamResponse:
    size = int(request.query["n"])
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    await response.prepare(request)
    block = bytes(range(256)) * 256  # 64 KiB
    sent = 0
    while sent < size:
        chunk = block[: min(len(block), size - sent)]
        await response.write(chunk)
        sent += len(chunk)
    await response.write_eof()
    return response


async def sse(request: web.Request) -> web.StreamResponse:
    """One event, then wait until the test releases the rest (usage in the last chunk)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'data: {"choices": [{"delta": {"content": "first"}}]}\n\n')
    await request.app[SSE_RELEASE].wait()
    await response.write(b'data: {"choices": [{"delta": {"content": "second"}}]}\n\n')
    await response.write(
        b'data: {"model": "m1", "usage": {"prompt_tokens": 11, "completion_tokens": 7}}\n\n'
    )
    await response.write(b"data: [DONE]\n\n")
    request.app[SSE_DONE].set()
    await response.write_eof()
    return response


def completion_body() -> bytes:
    return json.dumps(
        {"model": "m2", "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    ).encode()


async def completion(request: web.Request) -> web.Response:
    body = completion_body()
    headers = {"Content-Type": "application/json"}
    if request.query.get("gzip"):
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


async def hang(request: web.Request) -> web.Response:
    request.app[HANG_ARRIVED].set()
    await request.app[HANG].wait()
    return web.Response(text="released")


async def broken(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Length": "100000"})
    await response.prepare(request)
    await response.write(b"x" * 1000)
    assert request.transport is not None
    request.transport.close()
    return response


def upstream_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SSE_RELEASE] = asyncio.Event()
    app[SSE_DONE] = asyncio.Event()
    app[HANG] = asyncio.Event()
    app[HANG_ARRIVED] = asyncio.Event()
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/api/echo", echo)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/big", big)
    app.router.add_post("/upload", echo)
    app.router.add_get("/sse", sse)
    app.router.add_post("/v1/chat/completions", completion)
    app.router.add_get("/hang", hang)
    app.router.add_get("/broken", broken)
    return app


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free loopback port; yields its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def settings(*routes: str, **fields: Any) -> config.Settings:
    base: dict[str, Any] = {"cell": CELL, "run_id": RUN_ID, "admin": "127.0.0.1:0"}
    return config.build({"routes": [config.parse_route(r) for r in routes], **base, **fields})


@contextlib.asynccontextmanager
async def recording_gateway(
    ledger: Path, *routes: str, **fields: Any
) -> AsyncIterator[gateway.Gateway]:
    """A started gateway recording cell ``CELL`` into ``ledger`` (a directory)."""
    s = settings(*routes, **fields)
    record = gateway.Recorder(filestore.FileBackend(ledger), KEY, default_cell=s.cell)
    async with gateway.Gateway(s, tokens=config.Tokens(TOKENS), record=record) as gw:
        yield gw


def controller_route(upstream: str) -> str:
    return f"principal=controller,listen=127.0.0.1:0,upstream={upstream}"


def read_cell(ledger: Path, cell: str = CELL) -> list[records.Record]:
    path = ledger / f"{cell}.jsonl"
    return records.parse_lines(path.read_text().splitlines())


def exchanges(ledger: Path, cell: str = CELL) -> list[records.Exchange]:
    return [r for r in read_cell(ledger, cell) if isinstance(r, records.Exchange)]


@contextlib.asynccontextmanager
async def through(
    ledger: Path, *routes: str, **fields: Any
) -> AsyncIterator[tuple[gateway.Gateway, aiohttp.ClientSession]]:
    """A recording gateway and a client session to call it with."""
    async with (
        recording_gateway(ledger, *routes, **fields) as gw,
        aiohttp.ClientSession() as client,
    ):
        yield gw, client
