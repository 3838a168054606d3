"""The server side of MCP's Streamable HTTP transport, as the bridge and the mock speak it.

What both need of the transport and nothing more: read a POST's JSON-RPC message or batch
(as strictly as every reader of agent bytes: :mod:`agent_health.ledger.strictjson`, held to
the MCP SDK's envelopes), answer it as ``application/json`` or as a ``text/event-stream``
(what the client's ``Accept`` prefers), ``202 Accepted`` when it held no request, and refuse
what is not MCP with a JSON-RPC error and the right status.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types
import pydantic
from aiohttp import web

from agent_health.ledger import strictjson

SESSION_HEADER = "Mcp-Session-Id"
VIA_HEADER = "X-Agent-Health-Via-Gateway"
"""What the cell's gateway sends a peer with every call it forwards: that peer's own token
(the gateway's ``config.VIA_HEADER``; this package imports only the ledger)."""
TOKEN_FILE_ENV, TOKEN_ENV = "AGENT_HEALTH_TOKEN_FILE", "AGENT_HEALTH_TOKEN"
MAX_BODY = 4 * 1024 * 1024
"""The largest POST body a server of ours reads."""
Message = dict[str, Any]


@dataclass(frozen=True)
class Posted:
    """What one POST carried: its messages, and whether they came as a batch."""

    messages: list[Message]
    batch: bool

    @property
    def requests(self) -> list[Message]:
        return [m for m in self.messages if "id" in m and "method" in m]


class Refused(Exception):
    """A POST that is not MCP: answered with :attr:`response`."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.text)
        self.response = response


def error(id: Any, code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}


def refusal(status: int, code: int, message: str) -> Refused:
    return Refused(web.json_response(error(None, code, message), status=status))


async def read(request: web.Request) -> Posted:
    """The POST's messages; raises :class:`Refused` for a body that is not JSON-RPC 2.0."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise refusal(413, mcp_types.INVALID_REQUEST, f"body over {MAX_BODY} bytes")
    body = await request.content.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise refusal(413, mcp_types.INVALID_REQUEST, f"body over {MAX_BODY} bytes")
    try:
        payload = strictjson.loads(body, max_depth=strictjson.FAST_DEPTH)
    except ValueError as err:
        raise refusal(400, mcp_types.PARSE_ERROR, f"Parse error: {err}") from None
    batch = isinstance(payload, list)
    items = payload if batch else [payload]
    if not items:
        raise refusal(400, mcp_types.INVALID_REQUEST, "an empty batch")
    for item in items:
        try:
            mcp_types.jsonrpc_message_adapter.validate_python(item)
        except pydantic.ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise refusal(
                400,
                mcp_types.INVALID_REQUEST,
                f"not a JSON-RPC 2.0 message: {where}: {first['msg']}",
            ) from None
    return Posted(items, batch)


def wants_stream(request: web.Request) -> bool:
    """Whether the client takes an event stream (the transport asks it to accept both)."""
    return "text/event-stream" in request.headers.get("Accept", "")


def event(message: Message) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def json_answer(
    answers: Sequence[Message], *, batch: bool, headers: dict[str, str] | None = None
) -> web.Response:
    body: Any = list(answers) if batch else answers[0]
    return web.json_response(body, headers=headers)


async def stream_start(request: web.Request, headers: dict[str, str]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
    )
    await response.prepare(request)
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def cell_token(environ: Mapping[str, str] | None = None) -> str | None:
    """This container's token in a cell (the file ``$AGENT_HEALTH_TOKEN_FILE``, else
    ``$AGENT_HEALTH_TOKEN`` in a pooled cell), else ``None`` (not in a cell)."""
    from agent_health.peers import errors  # only a peer started in a cell gets here

    env = os.environ if environ is None else environ
    path = env.get(TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as err:
            raise errors.PeerConfigError(
                f"${TOKEN_FILE_ENV} names {path}, which cannot be read: {err.strerror or err}"
            ) from err
        if not token:
            raise errors.PeerConfigError(f"${TOKEN_FILE_ENV} names {path}, which is empty")
        return token
    if TOKEN_ENV in env:
        if not env[TOKEN_ENV].strip():
            raise errors.PeerConfigError(f"${TOKEN_ENV} is set but empty")
        return env[TOKEN_ENV].strip()
    return None


def only_via_gateway(token: str) -> Middleware:
    """An aiohttp middleware serving only calls that carry ``token`` in :data:`VIA_HEADER`:
    in a cell the target shares the pod's loopback, and a call it made to the peer's own
    port would leave nothing in the ledger."""
    wanted = token.encode("utf-8")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get(VIA_HEADER, "").encode("utf-8")
        if not hmac.compare_digest(given, wanted):
            return web.json_response(
                error(None, mcp_types.INVALID_REQUEST, "only calls through the cell's gateway"),
                status=403,
            )
        return await handler(request)

    return guard
