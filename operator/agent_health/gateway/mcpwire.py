"""What the gateway reads of the Model Context Protocol on a route to an MCP peer.

A peer declared ``protocol: mcp`` speaks MCP's Streamable HTTP transport: the client POSTs
one JSON-RPC 2.0 message, or a batch (a JSON array), and the server answers with
``application/json`` (one message or an array) or a ``text/event-stream`` whose events each
carry one message; notifications and responses alone get ``202 Accepted``; the session, when
the server keeps one, travels in the ``Mcp-Session-Id`` header. :class:`Reader` follows one
such exchange as its bytes stream through the proxy, matches each answer to its request by
id, and hands the recorder one ``mcp`` record (:class:`~agent_health.ledger.records.McpRecord`,
built as its JSON object: :func:`~agent_health.ledger.objects.mcp_call`) per
``tools/call``, ``tools/list``, ``resources/read`` or ``prompts/get`` — as soon as its answer
is read, so a call answered on a stream that then never ends is on record all the same.

Every message is read as strictly as every other byte an agent sends
(:func:`~agent_health.ledger.strictjson.loads`: no NaN, no overflow, bounded nesting) and
held to the MCP SDK's types (``mcp-types``: the JSON-RPC envelopes, ``CallToolRequestParams``,
``CallToolResult``...). Nothing is guessed and nothing raises into the proxy: what does not
read is recorded with ``problem`` saying why. Memory is bounded per exchange whatever the
traffic: at most :attr:`Limits.read_bytes` of one message is held (a longer one passes
through unread, its size counted), at most :attr:`Limits.max_calls` requests of one batch
are followed, and a record keeps a result or arguments only up to :attr:`Limits.keep_bytes`
of JSON (``result_cut`` past it; ``isError`` is still read).

Ids are matched within the exchange that carried the request, so two exchanges that reuse an
id never steal each other's answers; a batch that repeats an id gets its answers in order,
each record saying the id was used twice.

One concept: one MCP exchange followed as it streams, from the request's messages to the
record of each call; the SDK's types it reads with, the event-stream framing and the
matching of answers to requests are its parts, and none is read anywhere else.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import mcp_types
import pydantic

from agent_health.ledger import encoding, objects, records, strictjson

SESSION_HEADER = "Mcp-Session-Id"
METHODS = frozenset(records.MCP_METHODS)
MAX_DEPTH = strictjson.FAST_DEPTH  # as deep as an agent's reply may nest
_LINE_END = re.compile(rb"\r\n|\r|\n")
_PARAMS: dict[str, type[pydantic.BaseModel]] = {
    "tools/call": mcp_types.CallToolRequestParams,
    "resources/read": mcp_types.ReadResourceRequestParams,
    "prompts/get": mcp_types.GetPromptRequestParams,
    "tools/list": mcp_types.PaginatedRequestParams,
}
_RESULTS: dict[str, type[pydantic.BaseModel]] = {
    "tools/call": mcp_types.CallToolResult,
    "resources/read": mcp_types.ReadResourceResult,
    "prompts/get": mcp_types.GetPromptResult,
    "tools/list": mcp_types.ListToolsResult,
}


class _ToolCall(mcp_types.JSONRPCRequest):
    params: mcp_types.CallToolRequestParams  # type: ignore[assignment]


class _ResourceRead(mcp_types.JSONRPCRequest):
    params: mcp_types.ReadResourceRequestParams  # type: ignore[assignment]


class _PromptGet(mcp_types.JSONRPCRequest):
    params: mcp_types.GetPromptRequestParams  # type: ignore[assignment]


class _ToolList(mcp_types.JSONRPCRequest):
    params: mcp_types.PaginatedRequestParams | None = None  # type: ignore[assignment]


# The SDK's content blocks, tried in order and read by the first that takes the block (the
# text one, nearly always): a union accepts what any of its members accepts, in whatever order
# it tries them, so this reads the very blocks the SDK's own (smart) union reads, which tries
# every member on every block at twice the cost per call.
_Block = Annotated[mcp_types.ContentBlock, pydantic.Field(union_mode="left_to_right")]


class _ToolResult(mcp_types.CallToolResult):
    content: list[_Block]  # the SDK's blocks, read in order


class _ToolAnswer(mcp_types.JSONRPCResponse):
    result: _ToolResult  # type: ignore[assignment]


class _ResourceAnswer(mcp_types.JSONRPCResponse):
    result: mcp_types.ReadResourceResult  # type: ignore[assignment]


class _PromptAnswer(mcp_types.JSONRPCResponse):
    result: mcp_types.GetPromptResult  # type: ignore[assignment]


class _ListAnswer(mcp_types.JSONRPCResponse):
    result: mcp_types.ListToolsResult  # type: ignore[assignment]


# The SDK's envelope and the method's own types in one model: a call costs one validation
# each way on the usual path (a gateway proxies every call; two each way cost a third more
# CPU per call than the proxying). A message that fails it is read again piece by piece,
# envelope first, to say what is wrong.
_CALLS: dict[str, type[mcp_types.JSONRPCRequest]] = {
    "tools/call": _ToolCall,
    "resources/read": _ResourceRead,
    "prompts/get": _PromptGet,
    "tools/list": _ToolList,
}
_ANSWERS: dict[str, type[mcp_types.JSONRPCResponse]] = {
    "tools/call": _ToolAnswer,
    "resources/read": _ResourceAnswer,
    "prompts/get": _PromptAnswer,
    "tools/list": _ListAnswer,
}


@dataclass(frozen=True)
class Limits:
    """How much of an MCP exchange the gateway reads and keeps."""

    read_bytes: int = 1024 * 1024
    """The most bytes of one message read: a request body, a JSON answer, one event."""
    keep_bytes: int = 64 * 1024
    """The most bytes of JSON of a result (or of arguments) a record keeps."""
    max_calls: int = 256
    """The most requests of one exchange recorded; a larger batch's rest is counted."""


class Caller(NamedTuple):
    """Who made the exchange, as the proxy established it (a named tuple: the proxy makes
    one per exchange on an MCP route, at two thirds of a frozen dataclass's cost)."""

    principal: str
    evidence: str
    server: str
    run_id: str | None


@dataclass(slots=True)
class _Call:
    """A recorded request waiting for its answer."""

    id: int | str
    method: str
    name: str | None
    arguments: dict[str, Any] | None
    cut: bool  # the arguments are too large to keep
    problem: str | None


def _id_key(value: int | str) -> tuple[bool, int | str]:
    return (isinstance(value, int), value)  # 1 and "1" are different ids


def _first_error(err: pydantic.ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _json_size(value: Any) -> int:
    return len(encoding.canonical({"v": value})) - 6


def _within(value: dict[str, Any], carried: int, keep: int) -> bool:
    """Whether ``value`` is at most ``keep`` bytes of JSON: at once when the message that
    carried it (``carried`` bytes) is no larger, else measured."""
    return carried <= keep or _json_size(value) <= keep


def _name_of(params: Any) -> str | None:
    """The tool, resource or prompt a request's params (read as the SDK's type) name."""
    return getattr(params, "name", None) or getattr(params, "uri", None)


# The shape nearly every client gives a tools/call request, and nearly every server its
# answer, read without the SDK's models: a tool call costs a model per message and per
# content block, and a gateway reads every call. Each shape is a strict part of what the
# SDK's types read (no alias, no optional member but these, no coercion), so whatever it
# takes the SDK takes, to the same name and isError; anything else is read by the SDK's
# types as before (tests/gateway/test_gateway_mcp.py holds the two to each other).
_PLAIN_PARAMS = frozenset({"name", "arguments"})
_PLAIN_RESULT = frozenset({"content", "structuredContent", "isError"})
_PLAIN_BLOCK = frozenset({"type", "text"})


def _plain_call(message: dict[str, Any]) -> str | None:
    """The tool a tools/call request in the plain shape names (``None`` for another shape,
    or another request): ``{"jsonrpc": "2.0", "id", "method", "params": {"name",
    "arguments"?}}``, the id an integer or a string, the arguments an object."""
    params = message.get("params")
    if (
        message.get("method") != "tools/call"
        or message.get("jsonrpc") != "2.0"
        or type(params) is not dict
        or not params.keys() <= _PLAIN_PARAMS
        or type(message.get("id")) not in (int, str)
    ):
        return None
    name, arguments = params.get("name"), params.get("arguments")
    if type(name) is not str or not (arguments is None or type(arguments) is dict):
        return None
    return name


def _plain_result(message: dict[str, Any]) -> bool | None:
    """The ``isError`` of a tools/call answer in the plain shape (``None`` for another
    shape): ``{"jsonrpc": "2.0", "id", "result": {"content": [{"type": "text", "text"}...],
    "structuredContent"?, "isError"?}}``, ``isError`` a boolean when given."""
    result = message.get("result")
    if (
        message.get("jsonrpc") != "2.0"
        or type(result) is not dict
        or not result.keys() <= _PLAIN_RESULT
        or type(message.get("id")) not in (int, str)
    ):
        return None
    content, is_error = result.get("content"), result.get("isError", False)
    if type(content) is not list or type(is_error) is not bool:
        return None
    for block in content:
        if (
            type(block) is not dict
            or block.keys() != _PLAIN_BLOCK
            or block["type"] != "text"
            or type(block["text"]) is not str
        ):
            return None
    return is_error


_FIELD, _DATA, _SKIP = 0, 1, 2  # where an event-stream line is: its field name, data, other
_MAX_FIELD = 16


class _Body:
    """Bytes of one message, held up to a limit; past it only counted. The chunks are kept
    as they came and joined once, when read (a message in one chunk, the usual case, is
    never copied)."""

    __slots__ = ("limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.limit = limit

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size <= self.limit:
            self.parts.append(chunk)

    @property
    def whole(self) -> bool:
        return self.size <= self.limit

    def data(self) -> bytes:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


class Reader:
    """One exchange on an MCP route, read as it passes (see the module docstring).

    The proxy calls :meth:`request` with each request chunk and :meth:`request_end` once it
    has sent them all, :meth:`answer` once the response's head is in, :meth:`response` with
    each response chunk and :meth:`finish` exactly once at the end; ``emit`` gets each
    record as soon as it is complete. Nothing here raises on what the traffic holds.
    """

    # One per exchange the gateway proxies on an MCP route: no __dict__ to make and collect.
    __slots__ = (
        "_body",
        "_calls",
        "_clock",
        "_cr",
        "_data_lines",
        "_field",
        "_pending",
        "_request",
        "_skip_space",
        "_stamp",
        "_started",
        "_stream",
        "_where",
        "caller",
        "emit",
        "limits",
        "session",
        "status",
        "uncounted",
        "unmatched",
    )

    def __init__(
        self,
        caller: Caller,
        limits: Limits,
        emit: Callable[[objects.Object], None],
        *,
        session: str | None = None,
        started: float | None = None,
        clock: objects.Clock | None = None,
    ) -> None:
        self.caller = caller
        self._clock = clock or objects.Clock()  # the proxy's: a second's text made once
        self.limits = limits
        self.emit = emit
        self.session = session
        self._started = time.time() if started is None else started  # epoch seconds
        self._stamp: str | None = None  # made when the first record is
        self.status: int | None = None
        self.unmatched = 0
        """Answers whose id matched no request of this exchange."""
        self.uncounted = 0
        """Requests of a batch past :attr:`Limits.max_calls`: not recorded."""
        self._request: _Body | None = _Body(limits.read_bytes)  # None once read
        self._pending: dict[tuple[bool, int | str], deque[_Call]] = {}
        self._calls = 0
        self._stream = False
        self._body = _Body(limits.read_bytes)  # a JSON answer, or the current event's data
        self._where = _FIELD  # in the current event-stream line
        self._field = bytearray()
        self._skip_space = False  # a data value's first space is not part of it
        self._data_lines = 0
        self._cr = False  # the last chunk ended in CR: a LF next ends no second line

    # -- the request ----------------------------------------------------------------------

    def request(self, chunk: bytes) -> None:
        if self._request is not None:
            self._request.feed(chunk)

    def request_end(self) -> None:
        """The whole request body has passed: read its messages (once)."""
        body, self._request = self._request, None
        if body is None or body.size == 0:
            return
        if not body.whole:
            self._unread(
                f"the request ({body.size} bytes) is larger than the gateway reads "
                f"(--mcp-max-bytes {self.limits.read_bytes}): not read"
            )
            return
        try:
            payload = strictjson.loads(body.data(), max_depth=MAX_DEPTH)
        except ValueError as err:
            self._unread(f"the request is not JSON: {err}")
            return
        if isinstance(payload, dict):  # one message, not a batch: the usual case
            self._read_request(payload, body.size)
            return
        messages = payload if isinstance(payload, list) else [payload]
        if not messages:
            self._unread("the request is an empty batch")
        for message in messages:
            self._read_request(message, body.size)

    def _read_request(self, message: Any, carried: int) -> None:
        if isinstance(message, dict) and "id" in message:
            named = _plain_call(message)
            if named is not None:  # an empty name is no name, as the SDK's params read it
                self._add_call(message["id"], "tools/call", named or None, message, carried)
                return
            model = _CALLS.get(message.get("method"))  # type: ignore[arg-type]
            if model is not None:
                try:
                    request = model.model_validate(message)
                except pydantic.ValidationError:
                    pass  # read again below, to say what is wrong
                else:
                    name = _name_of(request.params)
                    self._add_call(request.id, request.method, name, message, carried)
                    return
            elif message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str):
                return  # a request we do not record (initialize, ping, ...): not read further
        elif (
            isinstance(message, dict)
            and message.get("jsonrpc") == "2.0"
            and isinstance(message.get("method"), str)
            and "params" not in message
        ):
            return  # a notification without parameters
        try:
            envelope = mcp_types.jsonrpc_message_adapter.validate_python(message)
        except pydantic.ValidationError as err:
            answering = isinstance(message, dict) and "method" not in message
            if answering and ("result" in message or "error" in message):
                return  # the client's answer to a server's request: not a call
            method = message.get("method") if isinstance(message, dict) else None
            self._unread(
                f"not a JSON-RPC 2.0 message: {_first_error(err)}",
                method=method[:128] if isinstance(method, str) else "",
            )
            return
        if isinstance(envelope, mcp_types.JSONRPCNotification) and "id" in message:
            # An id of another type (a float, a bool, an object) is no id: read as a
            # notification it would slip past unrecorded.
            self._unread(
                f"id {message['id']!r} is neither a string nor an integer",
                method=envelope.method[:128],
            )
            return
        if not isinstance(envelope, mcp_types.JSONRPCRequest) or envelope.method not in METHODS:
            return
        params = envelope.params or {}
        try:
            read = _PARAMS[envelope.method].model_validate(params)
        except pydantic.ValidationError as err:
            self._add_call(envelope.id, envelope.method, None, message, carried, err)
        else:
            self._add_call(envelope.id, envelope.method, _name_of(read), message, carried)

    def _add_call(
        self,
        id: int | str,
        method: str,
        name: str | None,
        message: dict[str, Any],
        carried: int,
        refused: pydantic.ValidationError | None = None,
    ) -> None:
        """A request to record, waiting for its answer (``name``: the tool, resource or
        prompt its params name, read as the SDK's type reads them; ``refused``: why they do
        not read)."""
        if self._calls >= self.limits.max_calls:
            self.uncounted += 1
            return
        self._calls += 1
        params = message.get("params") or {}
        problem: str | None = None
        if refused is not None:
            problem = f"params: {_first_error(refused)}"
            named = params.get("name", params.get("uri"))
            name = named if isinstance(named, str) else None
        arguments = params.get("arguments")
        cut = False
        if not isinstance(arguments, dict):
            arguments = None
        elif not _within(arguments, carried, self.limits.keep_bytes):
            arguments, cut = None, True
        key = _id_key(id)
        waiting = self._pending.get(key)
        if waiting is None:
            waiting = self._pending[key] = deque()
        elif waiting:
            problem = problem or f"id {id!r} is used twice in one request"
            for earlier in waiting:
                earlier.problem = earlier.problem or problem
        waiting.append(_Call(id, method, name, arguments, cut, problem))

    def _unread(self, problem: str, *, method: str = "") -> None:
        """A request that does not read: on record as such (never a call of a tool)."""
        if self._calls >= self.limits.max_calls:
            self.uncounted += 1
            return
        self._calls += 1
        self._emit(method=method, problem=problem)

    # -- the response ---------------------------------------------------------------------

    def answer(self, status: int, content_type: str | None, session: str | None) -> None:
        """The response's head: its status, media type and session header (the request's
        messages are read first, if they were not yet)."""
        self.request_end()
        self.status = status
        self.session = self.session or session or None
        media = (content_type or "").split(";", 1)[0].strip().lower()
        self._stream = media == "text/event-stream"

    def response(self, chunk: bytes) -> None:
        if not self._pending or not chunk:
            return  # nothing waits for an answer: the bytes pass unread
        if self._stream:
            self._events(chunk)
        else:
            self._body.feed(chunk)

    def _events(self, chunk: bytes) -> None:
        """Server-sent events, line by line (LF, CRLF or CR ends), each event's data one
        message; no line is held, only the current event's data (bounded)."""
        i, n = 0, len(chunk)
        if self._cr and chunk[:1] == b"\n":
            i = 1  # the CR that ended the last chunk and this LF are one line end
        self._cr = False
        while i < n and self._pending:
            end = _LINE_END.search(chunk, i)
            self._piece(chunk[i : n if end is None else end.start()])
            if end is None:
                return
            self._cr = end.group() == b"\r" and end.end() == n
            self._line_end()
            i = end.end()

    def _piece(self, data: bytes) -> None:
        """Part of the current line."""
        if self._where == _FIELD:
            colon = data.find(b":")
            if len(self._field) < _MAX_FIELD:
                self._field += data[: colon if colon >= 0 else _MAX_FIELD][:_MAX_FIELD]
            if colon < 0:
                return
            self._where = _DATA if self._field == b"data" else _SKIP
            if self._where == _DATA:
                self._data_line()
            data = data[colon + 1 :]
        if self._where == _DATA and data:
            if self._skip_space:
                self._skip_space = False
                data = data[1:] if data[:1] == b" " else data
            self._body.feed(data)

    def _data_line(self) -> None:
        if self._data_lines:
            self._body.feed(b"\n")
        self._data_lines += 1
        self._skip_space = True

    def _line_end(self) -> None:
        if self._where == _FIELD:
            if not self._field:
                self._dispatch()  # a blank line ends the event
            elif self._field == b"data":
                self._data_line()  # "data" alone: an empty data line
        self._where, self._field = _FIELD, bytearray()

    def _dispatch(self) -> None:
        if self._data_lines:
            self._read_answer(self._body)
        self._body = _Body(self.limits.read_bytes)
        self._data_lines = 0

    def _read_answer(self, body: _Body) -> None:
        if not body.whole:
            self._answer_unread(
                f"the answer ({body.size} bytes) is larger than the gateway reads "
                f"(--mcp-max-bytes {self.limits.read_bytes}): not read",
                body.size,
            )
            return
        try:
            payload = strictjson.loads(body.data(), max_depth=MAX_DEPTH)
        except ValueError as err:
            self._answer_unread(f"the answer is not JSON: {err}", body.size)
            return
        if isinstance(payload, list):
            for message in payload:
                self._read_response(message, body.size)
        else:
            self._read_response(payload, body.size)

    def _answer_unread(self, problem: str, size: int) -> None:
        """An answer that cannot be read: its id is unknown, so it is the one pending call's
        when there is exactly one (a single request, the usual case), else nobody's."""
        call = self._only()
        if call is not None:
            self._complete(call, problem=problem, result_bytes=size)

    def _only(self) -> _Call | None:
        calls = [call for waiting in self._pending.values() for call in waiting]
        if len(calls) != 1:
            self.unmatched += 1
            return None
        self._pending.clear()
        return calls[0]

    def _read_response(self, message: Any, size: int) -> None:
        if isinstance(message, dict) and "result" in message:
            id = message.get("id")
            key = _id_key(id) if isinstance(id, int | str) else None
            waiting = self._pending.get(key) if key is not None else None
            if waiting:
                is_error = _plain_result(message) if waiting[0].method == "tools/call" else None
                if is_error is not None and key is not None:  # the usual answer, taken at once
                    first = waiting.popleft()
                    if not waiting:
                        del self._pending[key]
                    answered = message["result"]
                    cut = not _within(answered, size, self.limits.keep_bytes)
                    self._record(first, None if cut else answered, size, cut, is_error, None, None)
                    return
                try:
                    read = _ANSWERS[waiting[0].method].model_validate(message)
                except pydantic.ValidationError:
                    pass  # read again below, to say what is wrong
                else:
                    call = self._take(read.id)
                    if call is not None:
                        result = message["result"]
                        cut = not _within(result, size, self.limits.keep_bytes)
                        self._complete(
                            call,
                            result=None if cut else result,
                            result_bytes=size,
                            result_cut=cut,
                            is_error=getattr(read.result, "is_error", None),
                        )
                    return
        try:
            envelope = mcp_types.jsonrpc_message_adapter.validate_python(message)
        except pydantic.ValidationError as err:
            if isinstance(message, dict) and ("result" in message or "error" in message):
                wanted = message.get("id")
                call = self._take(wanted) if isinstance(wanted, int | str) else self._only()
                if call is not None:
                    problem = f"the answer is not a JSON-RPC 2.0 message: {_first_error(err)}"
                    self._complete(call, problem=problem, result_bytes=size)
            return  # a server's own request or notification: not an answer
        if isinstance(envelope, mcp_types.JSONRPCError):
            call = self._take(envelope.id) if envelope.id is not None else self._only()
            if call is not None:
                error = envelope.error.model_dump(mode="json", exclude_none=True)
                self._complete(call, error=error, result_bytes=size)
        elif isinstance(envelope, mcp_types.JSONRPCResponse):
            call = self._take(envelope.id)
            if call is not None:
                self._complete_result(call, envelope.result, size)

    def _take(self, id: int | str) -> _Call | None:
        key = _id_key(id)
        waiting = self._pending.get(key)
        if not waiting:
            self.unmatched += 1
            return None
        call = waiting.popleft()
        if not waiting:
            del self._pending[key]
        return call

    def _complete_result(self, call: _Call, result: dict[str, Any], size: int) -> None:
        """An answer whose result did not fit its method's type (the fast path failed)."""
        problem: str | None = None
        is_error: bool | None = None
        try:
            read = _RESULTS[call.method].model_validate(result)
        except pydantic.ValidationError as err:
            problem = f"result: {_first_error(err)}"
            flag = result.get("isError")
            is_error = flag if isinstance(flag, bool) else None
        else:
            if isinstance(read, mcp_types.CallToolResult):
                is_error = read.is_error
        self._answered(call, result, size, is_error, problem)

    def _answered(
        self,
        call: _Call,
        result: dict[str, Any],
        size: int,
        is_error: bool | None,
        problem: str | None,
    ) -> None:
        cut = not _within(result, size, self.limits.keep_bytes)
        self._complete(
            call,
            result=None if cut else result,
            result_cut=cut,
            result_bytes=size,
            is_error=is_error,
            problem=problem,
        )

    def _complete(
        self,
        call: _Call,
        *,
        result: dict[str, Any] | None = None,
        result_bytes: int = 0,
        result_cut: bool = False,
        is_error: bool | None = None,
        error: dict[str, Any] | None = None,
        problem: str | None = None,
    ) -> None:
        """Hand the recorder ``call``'s record, with what answered it."""
        self._record(call, result, result_bytes, result_cut, is_error, error, problem)

    def _record(
        self,
        call: _Call,
        result: dict[str, Any] | None,
        result_bytes: int,
        result_cut: bool,
        is_error: bool | None,
        error: dict[str, Any] | None,
        problem: str | None,
    ) -> None:
        """:meth:`_complete` by position: a call answered in the usual shape comes here
        straight, without binding seven members by name."""
        caller, now = self.caller, self._clock.now()
        self.emit(
            objects.mcp_record(  # in the record's order
                call.arguments,
                call.cut,
                now,  # ended_at
                error,
                caller.evidence,
                call.id,
                is_error,
                call.method,
                call.name,
                caller.principal,
                call.problem or problem,
                result,
                result_bytes,
                result_cut,
                caller.run_id,
                caller.server,
                self.session,
                self.started_at,
                self.status,
                now,  # time
            )
        )

    def finish(self, error: str | None) -> None:
        """The exchange is over (``error``: why it failed, if it did): a JSON answer is read
        now, and every request still unanswered is recorded as such."""
        self.request_end()
        if self._pending and not self._stream and self._body.size:
            self._read_answer(self._body)
        elif self._pending and self._stream and self._data_lines:
            self._dispatch()  # a last event the stream did not end with a blank line
        if error is not None:
            why = f"no answer: {error}"
        elif self.status is not None and self.status >= 400:
            why = f"the server answered HTTP {self.status} without a JSON-RPC answer"
        else:
            why = "no answer to it came back in the exchange"
        for waiting in self._pending.values():
            for call in waiting:
                self._complete(call, problem=why)
        self._pending.clear()

    @property
    def started_at(self) -> str:
        if self._stamp is None:
            self._stamp = self._clock.epoch(self._started)
        return self._stamp

    def _emit(self, *, method: str, problem: str) -> None:
        """Hand the recorder the record of a request that did not read (no call of it)."""
        caller, now = self.caller, self._clock.now()
        self.emit(
            objects.mcp_call(
                at=now,
                principal=caller.principal,
                evidence=caller.evidence,
                server=caller.server,
                run_id=caller.run_id,
                session=self.session,
                method=method,
                problem=problem,
                status=self.status,
                started_at=self.started_at,
                ended_at=now,
            )
        )
