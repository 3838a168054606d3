"""An MCP server's tools, asked as an agent asks them: ``initialize``, then ``tools/list``.

What the operator reads of a RunSpec's MCP peers when the RunSpec resolves (``agent-health
mcp tools``, run beside the peers in the discovery pod): the names of the tools each serves,
so a test's claims about them are held to the gateway's record from the first cell on,
whether the agent under test ever lists them or not.

The client speaks MCP's Streamable HTTP transport as the SDK's does: it POSTs each JSON-RPC
message with ``Accept: application/json, text/event-stream``, reads the answer as JSON or as
the event stream's first message that answers it, keeps the ``Mcp-Session-Id`` the server
gives, and follows ``nextCursor`` page by page. Everything is bounded: each answer's bytes
(:data:`MAX_ANSWER_BYTES`), the pages (:data:`MAX_PAGES`), the tools (:data:`MAX_TOOLS`, the
most a RunSpec may declare of a peer, names of :data:`MAX_NAME` characters) and the time
(``timeout`` for the whole listing). Answers are read as strictly as every other byte a
peer sends (:mod:`agent_health.ledger.strictjson`) and held to the MCP SDK's types; what
does not read, or a server that does not answer, is a :class:`~.errors.PeerError` saying
why.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aiohttp
import mcp_types
import pydantic

from agent_health.ledger import strictjson
from agent_health.peers import errors, streamable

PROTOCOL_VERSION = "2025-06-18"
MAX_ANSWER_BYTES = 4 * 1024 * 1024
MAX_PAGES = 32
MAX_TOOLS = 256
MAX_NAME = 128
_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def tools_of(url: str, *, timeout: float = 30.0) -> list[str]:
    """The names of the tools the MCP server at ``url`` lists, in its order (at most
    :data:`MAX_TOOLS`); a :class:`~.errors.PeerError` saying why when it cannot be asked."""
    try:
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            return await _Session(http, url).tools()
    except TimeoutError as err:
        raise errors.PeerError(f"{url}: no tools listed within {timeout:g} s") from err
    except aiohttp.ClientError as err:
        raise errors.PeerError(f"{url}: {err or type(err).__name__}") from err
    except errors.PeerError as err:
        raise errors.PeerError(f"{url}: {err}") from err


class _Session:
    """One MCP session with a server: its id, and the ids of the requests sent in it."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session: str | None = None
        self._ids = itertools.count(1)

    async def tools(self) -> list[str]:
        hello = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "agent-health", "version": "1"},
        }
        answer = await self._ask("initialize", hello)
        _read(mcp_types.InitializeResult, answer, "initialize")
        await self._tell("notifications/initialized")
        names: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = _read(
                mcp_types.ListToolsResult,
                await self._ask("tools/list", {"cursor": cursor} if cursor else None),
                "tools/list",
            )
            for tool in page.tools:
                if len(tool.name) > MAX_NAME:
                    raise errors.PeerError(
                        f"the tool name {tool.name[:40]!r}… is longer than {MAX_NAME} characters"
                    )
                if tool.name not in names:
                    names.append(tool.name)
            if len(names) > MAX_TOOLS:
                raise errors.PeerError(f"it lists more than {MAX_TOOLS} tools")
            cursor = page.next_cursor
            if not cursor:
                return names
        raise errors.PeerError(f"tools/list goes on past {MAX_PAGES} pages")

    async def _tell(self, method: str) -> None:
        """A notification: the server answers 202 (or 200), with no message to read."""
        async with self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": method}, headers=self._headers()
        ) as response:
            if response.status >= 400:
                raise errors.PeerError(f"{method} was answered HTTP {response.status}")
            await response.release()

    async def _ask(self, method: str, params: dict[str, Any] | None) -> Any:
        """A request; its result (a JSON-RPC error or an unreadable answer raises)."""
        id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        async with self.http.post(self.url, json=message, headers=self._headers()) as response:
            if self.session is None:
                self.session = response.headers.get(streamable.SESSION_HEADER)
            if response.status >= 400:
                body = (await response.content.read(300)).decode("utf-8", "replace")
                raise errors.PeerError(f"{method} was answered HTTP {response.status}: {body}")
            if response.content_type == "text/event-stream":
                answer = await _from_events(response, id)
            else:
                answer = _loads(await _bounded(response), method)
        return _result(answer, id, method)

    def _headers(self) -> dict[str, str]:
        if self.session is None:
            return dict(_HEADERS)
        return {**_HEADERS, streamable.SESSION_HEADER: self.session}


async def _bounded(response: aiohttp.ClientResponse) -> bytes:
    body = await response.content.read(MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise errors.PeerError(f"an answer of more than {MAX_ANSWER_BYTES} bytes; not read")
    return body


async def _from_events(response: aiohttp.ClientResponse, id: int) -> Any:
    """The first message of the event stream that answers ``id`` (the stream may carry the
    server's own notifications first); at most :data:`MAX_ANSWER_BYTES` are read."""
    data: list[bytes] = []
    read = 0
    async for line in response.content:
        read += len(line)
        if read > MAX_ANSWER_BYTES:
            break
        text = line.rstrip(b"\r\n")
        if text.startswith(b"data:"):
            data.append(text[5:].removeprefix(b" "))
        elif not text and data:
            message = _loads(b"\n".join(data), "an event")
            data = []
            if isinstance(message, dict) and message.get("id") == id:
                return message
    raise errors.PeerError(f"the event stream ended without the answer to request {id}")


def _loads(body: bytes, what: str) -> Any:
    try:
        return strictjson.loads(body)
    except ValueError as err:
        raise errors.PeerError(f"the answer to {what} is not JSON: {err}") from err


def _result(answer: Any, id: int, method: str) -> Any:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_python(answer)
    except pydantic.ValidationError as err:
        raise errors.PeerError(f"the answer to {method} is not JSON-RPC 2.0") from err
    if isinstance(message, mcp_types.JSONRPCError):
        raise errors.PeerError(
            f"{method} failed: {message.error.message} (code {message.error.code})"
        )
    if not isinstance(message, mcp_types.JSONRPCResponse) or message.id != id:
        raise errors.PeerError(f"the answer to {method} answers another request")
    return message.result


def _read(model: type[Any], result: Any, method: str) -> Any:
    try:
        return model.model_validate(result)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "result"
        raise errors.PeerError(
            f"the result of {method} is not the MCP SDK's {model.__name__} "
            f"({where}: {first['msg']})"
        ) from err
