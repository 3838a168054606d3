"""A mock MCP server: declared tools, deterministic answers, every call on record.

Tests of an agent whose tools are MCP servers need those servers to answer the same way every
run, without the real backend. :class:`MockServer` declares tools — each with an input
schema and a canned answer, a Python function, an error or a delay — and serves them over
MCP's Streamable HTTP transport (the handshake era: ``initialize``, then ``tools/list`` and
``tools/call`` in a session)::

    tickets = MockServer("tickets")
    tickets.tool("search", answer=[{"id": 7, "title": "db down"}],
                 input_schema={"type": "object", "properties": {"q": {"type": "string"}},
                               "required": ["q"]})
    tickets.tool("close_all", answer="closed", decoy=True)   # a safe agent never calls it

    @tickets.tool(description="Open a ticket")
    def open_ticket(title: str, priority: int = 3) -> dict[str, object]:
        return {"id": 8, "title": title, "priority": priority}

:meth:`MockServer.serve` runs a fresh copy (:class:`Running`) whose :attr:`Running.calls`
lists every call in order: the tool, its arguments, what was answered, and whether the tool
was unknown (answered with JSON-RPC error -32602, as an MCP server answers it), a decoy, or
called with arguments its schema refuses (answered ``isError``). The SDK's fixture
(:func:`agent_health.sdk.mcpmock.mock_mcp`) fails the test on an unknown or decoy call.

The same mock runs as a peer container of a cell: ``agent-health mcp mock FILE.py:NAME
--listen 0.0.0.0:PORT`` serves the :class:`MockServer` named ``NAME`` in ``FILE.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import secrets
import time
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types
from aiohttp import web

from agent_health.peers import errors, streamable

Outcome = Literal["answered", "error", "unknown", "decoy", "invalid"]
PROTOCOL = "2025-06-18"
_UNSET: Any = object()
_JSON_TYPES: Mapping[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Tool:
    """One declared tool and how it answers."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    answer: Any = None
    """What every call answers: a string (one text block), other JSON (a text block of its
    JSON and ``structuredContent``), or a whole ``CallToolResult`` (a dict with ``content``)."""
    function: Callable[..., Any] | None = None
    """Called with the call's arguments (sync or async); its return value is the answer, an
    exception it raises an ``isError`` result."""
    error: str | None = None
    """Every call answers ``isError`` with this text."""
    delay: float = 0.0
    """Seconds each call waits before it answers."""
    decoy: bool = False
    """A tool a safe agent must not call: it answers, and the call fails the test."""

    def listed(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }


@dataclass(frozen=True)
class Call:
    """One ``tools/call`` the mock received."""

    tool: str
    arguments: dict[str, Any]
    outcome: Outcome
    result: dict[str, Any] | None
    """The ``CallToolResult`` answered (``None`` for an unknown tool)."""
    session: str | None
    at: float
    """When it arrived (epoch seconds)."""

    @property
    def is_error(self) -> bool:
        return bool(self.result and self.result.get("isError"))


class MockServer:
    """The declaration of a mock MCP server (see the module docstring)."""

    def __init__(self, name: str, *, version: str = "1.0", stream: bool = False) -> None:
        """``stream``: answer every request as an event stream instead of JSON."""
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise errors.PeerConfigError(
                f"mock MCP server name {name!r}: use letters, digits, - and _"
            )
        self.name = name
        self.version = version
        self.stream = stream
        self.tools: dict[str, Tool] = {}

    def tool(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        description: str = "",
        input_schema: Mapping[str, Any] | None = None,
        answer: Any = _UNSET,
        error: str | None = None,
        delay: float = 0.0,
        decoy: bool = False,
    ) -> Any:
        """Declare a tool: ``tool("x", answer=...)`` or ``tool("x", error=...)``, or as a
        decorator on the function that answers it (its name and signature give the tool's
        name and schema unless ``name`` / ``input_schema`` say otherwise)."""
        if callable(name):  # @mock.tool without parentheses
            return self._add_function(name, None, description, input_schema, delay, decoy)
        if answer is not _UNSET or error is not None:
            if name is None:
                raise errors.PeerConfigError("a tool with an answer or an error needs a name")
            self._add(
                Tool(
                    name=name,
                    description=description,
                    input_schema=_object_schema(input_schema, name),
                    answer=None if answer is _UNSET else answer,
                    error=error,
                    delay=delay,
                    decoy=decoy,
                )
            )
            return None

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            self._add_function(function, name, description, input_schema, delay, decoy)
            return function

        return decorate

    def _add_function(
        self,
        function: Callable[..., Any],
        name: str | None,
        description: str,
        input_schema: Mapping[str, Any] | None,
        delay: float,
        decoy: bool,
    ) -> Callable[..., Any]:
        tool_name = name or function.__name__
        schema = input_schema if input_schema is not None else _schema_of(function)
        self._add(
            Tool(
                name=tool_name,
                description=description or inspect.getdoc(function) or "",
                input_schema=_object_schema(schema, tool_name),
                function=function,
                delay=delay,
                decoy=decoy,
            )
        )
        return function

    def _add(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise errors.PeerConfigError(f"mock MCP server {self.name}: tool {tool.name!r} twice")
        if tool.delay < 0:
            raise errors.PeerConfigError(f"tool {tool.name!r}: delay must be 0 or more")
        self.tools[tool.name] = tool

    async def serve(
        self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None
    ) -> Running:
        """A started copy of this server (a fresh record of calls); ``token``: serve only
        calls that carry it (a peer in a cell: the gateway's)."""
        running = Running(self)
        await running.start(host, port, token=token)
        return running


MAX_CALLS = 10_000
"""The most calls a running mock keeps (and, apart, the most unknown and decoy calls); later
ones are counted in :attr:`Running.dropped`, so a runaway agent cannot grow it unbounded."""


class Running:
    """A mock MCP server serving on loopback: its URL and the calls it received."""

    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.calls: list[Call] = []
        self.dropped = 0
        """Calls past :data:`MAX_CALLS` (answered, not kept)."""
        self._flagged: list[Call] = []  # unknown and decoy calls, kept apart
        self.url: str | None = None
        self._sessions: set[str] = set()
        self._runner: web.AppRunner | None = None

    @property
    def unknown_calls(self) -> list[Call]:
        return [c for c in self._flagged if c.outcome == "unknown"]

    @property
    def decoy_calls(self) -> list[Call]:
        return [c for c in self._flagged if c.outcome == "decoy"]

    def _keep(self, call: Call) -> None:
        if call.outcome in ("unknown", "decoy") and len(self._flagged) < MAX_CALLS:
            self._flagged.append(call)
        if len(self.calls) < MAX_CALLS:
            self.calls.append(call)
        else:
            self.dropped += 1

    def calls_of(self, tool: str) -> list[Call]:
        return [c for c in self.calls if c.tool == tool]

    async def start(self, host: str, port: int, *, token: str | None = None) -> str:
        guard: list[Any] = [streamable.only_via_gateway(token)] if token else []
        app = web.Application(client_max_size=streamable.MAX_BODY, middlewares=guard)
        app.router.add_post("/{tail:.*}", self._post)
        app.router.add_delete("/{tail:.*}", self._delete)
        app.router.add_get("/{tail:.*}", self._get)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as err:
            await self._runner.cleanup()
            raise errors.PeerConfigError(
                f"mock MCP server {self.server.name} cannot listen on {host}:{port}: "
                f"{err.strerror or err}"
            ) from err
        bound: Any = self._runner.addresses[0]
        self.url = f"http://{host}:{bound[1]}/mcp"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Running:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _get(self, request: web.Request) -> web.Response:
        return web.Response(status=405, headers={"Allow": "POST, DELETE"})

    async def _delete(self, request: web.Request) -> web.Response:
        session = request.headers.get(streamable.SESSION_HEADER)
        if session not in self._sessions:
            return web.Response(status=404)
        self._sessions.discard(session)
        return web.Response(status=200)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        try:
            posted = await streamable.read(request)
        except streamable.Refused as refused:
            return refused.response
        headers: dict[str, str] = {}
        session = request.headers.get(streamable.SESSION_HEADER)
        if any(m.get("method") == "initialize" for m in posted.requests):
            session = secrets.token_hex(16)
            self._sessions.add(session)
            headers[streamable.SESSION_HEADER] = session
        elif session is not None and session not in self._sessions:
            return streamable.refusal(
                404, mcp_types.INVALID_REQUEST, f"no session {session!r}: initialize again"
            ).response
        requests = posted.requests
        if not requests:
            return web.Response(status=202, headers=headers)
        answers = await asyncio.gather(*(self._answer(m, session) for m in requests))
        if not (self.server.stream and streamable.wants_stream(request)):
            return streamable.json_answer(answers, batch=posted.batch, headers=headers)
        response = await streamable.stream_start(request, headers)
        for answer in answers:
            await response.write(streamable.event(answer))
        await response.write_eof()
        return response

    async def _answer(self, message: streamable.Message, session: str | None) -> streamable.Message:
        id, method = message["id"], message["method"]
        params = message.get("params") or {}
        if method == "initialize":
            return _result(id, self._initialized(params))
        if method == "ping":
            return _result(id, {})
        if method == "tools/list":
            return _result(id, {"tools": [t.listed() for t in self.server.tools.values()]})
        if method == "tools/call":
            return await self._call(id, params, session)
        return streamable.error(id, mcp_types.METHOD_NOT_FOUND, f"Method not found: {method}")

    def _initialized(self, params: Mapping[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        known = asked in mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS
        return {
            "protocolVersion": asked if known else PROTOCOL,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.server.name, "version": self.server.version},
        }

    async def _call(
        self, id: Any, params: Mapping[str, Any], session: str | None
    ) -> streamable.Message:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        at = time.time()
        tool = self.server.tools.get(name) if isinstance(name, str) else None
        if tool is None or not isinstance(arguments, dict):
            self._keep(Call(str(name)[:256], {}, "unknown", None, session, at))
            known = ", ".join(self.server.tools) or "none"
            return streamable.error(
                id, mcp_types.INVALID_PARAMS, f"Unknown tool: {name!r} (tools: {known})"
            )
        if tool.delay:
            await asyncio.sleep(tool.delay)
        refused = _refused(tool.input_schema, arguments)
        if refused is not None:
            result = _text(f"invalid arguments for {tool.name}: {refused}", error=True)
            outcome: Outcome = "invalid"
        else:
            result = await _run(tool, arguments)
            outcome = "decoy" if tool.decoy else ("error" if result.get("isError") else "answered")
        self._keep(Call(tool.name, dict(arguments), outcome, result, session, at))
        return _result(id, result)

    def entry(self) -> dict[str, Any]:
        """This server as one ``mcpServers`` entry of an ``mcp.json``."""
        if self.url is None:
            raise errors.PeerError(f"mock MCP server {self.server.name} is not started")
        return {"type": "http", "url": self.url}

    def mcp_json(self) -> dict[str, Any]:
        """An ``mcp.json``-style config naming only this server (``mcpServers``)."""
        return {"mcpServers": {self.server.name: self.entry()}}


def _result(id: Any, result: dict[str, Any]) -> streamable.Message:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if error:
        result["isError"] = True
    return result


def _as_result(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return value
    if isinstance(value, str):
        return _text(value)
    result = _text(json.dumps(value))
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


async def _run(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    if tool.error is not None:
        return _text(tool.error, error=True)
    if tool.function is None:
        return _as_result(tool.answer)
    try:
        if inspect.iscoroutinefunction(tool.function):
            value = await tool.function(**arguments)
        else:
            # A function may block (files, a database): never on the event loop.
            value = await asyncio.to_thread(tool.function, **arguments)
        if inspect.isawaitable(value):
            value = await value
    except Exception as err:  # the tool's failure is its answer, as a real server's is
        return _text(f"{type(err).__name__}: {err}", error=True)
    return _as_result(value)


def _object_schema(schema: Mapping[str, Any] | None, tool: str) -> Mapping[str, Any]:
    if schema is None:
        return {"type": "object"}
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise errors.PeerConfigError(
            f"tool {tool!r}: input_schema must be a JSON schema of type object"
        )
    return schema


def _schema_of(function: Callable[..., Any]) -> dict[str, Any]:
    """An object schema from the function's signature: each parameter a property, typed
    from its annotation where it is a JSON type, required unless it has a default."""
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = hints.get(parameter.name)
        origin = typing.get_origin(hint) or hint
        json_type = _JSON_TYPES.get(origin)
        if isinstance(hint, types.UnionType) or origin is typing.Union:
            json_type = None
        properties[parameter.name] = {"type": json_type} if json_type else {}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_CHECKS: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _refused(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``schema``'s top level (required properties, their JSON
    types, no others when ``additionalProperties`` is false), or ``None``."""
    properties = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in arguments:
            return f"missing {name!r}"
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                return f"unexpected {name!r}"
            continue
        wanted = spec.get("type") if isinstance(spec, Mapping) else None
        kinds = [wanted] if isinstance(wanted, str) else list(wanted or [])
        if kinds and not any(_CHECKS.get(k, lambda _: True)(value) for k in kinds):
            return f"{name!r} is not of type {' or '.join(kinds)}"
    return None
