"""The connectors' HTTP seam: a :class:`Transport` sends a :class:`Request` and yields a
:class:`Response`; :class:`AiohttpTransport` is the real one, :class:`MockTransport` lets a
unit test pass a function instead of a server (as httpx's ``MockTransport`` does).

Failures of the real transport arrive as connector errors (:mod:`.errors`) where they
happen: before an answer (refused, reset) and while its body is read (a stream cut short).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_health.connectors import errors, partial


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request as a connector sends it."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes


class Response(Protocol):
    """The answer a :class:`Transport` yields: status and headers first, the body on demand."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Looked up case-insensitively."""
        ...

    async def read(self) -> bytes: ...

    def iter_chunks(self) -> AsyncIterator[bytes]: ...


class Transport(Protocol):
    """Sends a request; the response is open for the duration of the context."""

    def send(self, request: Request) -> contextlib.AbstractAsyncContextManager[Response]: ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """The default transport: one aiohttp session per connector, made in the running loop.

    Connections are pooled without a limit (the engine's ``-j`` bounds the calls in
    flight); no cookie jar, so one test's cookies never reach another's call.
    """

    def __init__(self, uds: str | None = None) -> None:
        # aiohttp is loaded when a connector that sends HTTP is made, not by importing the
        # connectors: a run makes its connector before the first test starts, so no test's
        # duration (nor a session's) includes the import (about 0.2 s, CA bundle included).
        import aiohttp  # noqa: F401

        self._session: Any = None
        self._uds = uds
        """A Unix socket every connection goes to (a cell's gateway); None: TCP."""

    def _open(self) -> Any:
        import aiohttp

        connector = (
            aiohttp.UnixConnector(path=self._uds, limit=0)
            if self._uds
            else aiohttp.TCPConnector(limit=0)
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),  # Http.exchange bounds the whole call
        )
        return self._session

    def send(self, request: Request) -> _AiohttpExchange:
        return _AiohttpExchange(self._session or self._open(), request.url, request)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _AiohttpExchange(contextlib.AbstractAsyncContextManager[Response]):
    """One request through the session: the response is open inside the ``async with``.

    A class rather than an ``asynccontextmanager`` generator: it is entered once per agent
    call, and the generator machinery cost more than the rest of this module per call.
    """

    __slots__ = ("_context", "_request", "_session", "_url")

    def __init__(self, session: Any, url: str, request: Request) -> None:
        self._session = session
        self._url = url
        self._request = request
        self._context: Any = None

    async def __aenter__(self) -> Response:
        request = self._request
        self._context = self._session.request(
            request.method, self._url, data=request.body, headers=request.headers
        )
        try:
            response = await self._context.__aenter__()
        except Exception as err:
            _reraise(err, self._url)
            raise
        return _AiohttpResponse(response, self._url)

    async def __aexit__(self, kind: Any, err: BaseException | None, tb: Any) -> None:
        try:
            await self._context.__aexit__(kind, err, tb)
        except Exception as failure:
            _reraise(failure, self._url)
            raise
        if isinstance(err, Exception):
            _reraise(err, self._url)  # what the body of the ``async with`` raised


def _reraise(err: Exception, url: str) -> None:
    """Raise ``err`` as a connector error when it is a transport failure (before the answer,
    or while its body is read); return when it is anything else."""
    import aiohttp

    if isinstance(err, aiohttp.ClientConnectorError):
        raise errors.AgentUnreachable(
            f"cannot connect to agent at {url}: {reason(err.os_error)} (is it running?)"
        ) from err
    if isinstance(err, aiohttp.ClientError | OSError):
        raise errors.AgentUnreachable(f"request to agent at {url} failed: {reason(err)}") from err


class _AiohttpResponse:
    """An aiohttp response whose body failures arrive as connector errors where they happen
    (an AG-UI stream cut mid-event is told apart from one that never started)."""

    __slots__ = ("_response", "_url", "headers", "status")

    def __init__(self, response: Any, url: str) -> None:
        self._response = response
        self._url = url
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        try:
            data: bytes = await self._response.read()
        except Exception as err:
            _reraise(err, self._url)
            raise
        return data

    def iter_chunks(self) -> AsyncIterator[bytes]:
        return _Chunks(self._response.content, self._url)


class _Chunks:
    """The body as it arrives, each read taking all that is buffered (aiohttp's ``readany``).

    An iterator class, not an async generator: a generator left unfinished (an AG-UI stream
    read up to RUN_FINISHED) is finalised through the event loop's thread-safe wake-up, a
    system call per agent call.
    """

    __slots__ = ("_content", "_url")

    def __init__(self, content: Any, url: str) -> None:
        self._content = content
        self._url = url

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk: bytes = await self._content.readany()
        except Exception as err:
            _reraise(err, self._url)
            raise
        if not chunk:
            raise StopAsyncIteration
        return chunk


@dataclass
class MockResponse:
    """What a :class:`MockTransport` handler answers: a status, headers, a body in chunks."""

    status: int = 200
    body: bytes | Sequence[bytes] = b""
    headers: dict[str, str] = field(default_factory=dict)


class MockTransport:
    """Answers every request with ``handler(request)`` (sync or async): a unit test passes a
    function instead of a server, as with httpx's ``MockTransport``."""

    def __init__(
        self, handler: Callable[[Request], MockResponse | Awaitable[MockResponse]]
    ) -> None:
        self._handler = handler

    @contextlib.asynccontextmanager
    async def send(self, request: Request) -> AsyncIterator[Response]:
        answer = self._handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        assert isinstance(answer, MockResponse)
        yield _MockResponse(answer)

    async def aclose(self) -> None:
        return None


class _MockResponse:
    def __init__(self, answer: MockResponse) -> None:
        self.status = answer.status
        self.headers = _Headers(answer.headers)
        chunks = [answer.body] if isinstance(answer.body, bytes) else list(answer.body)
        self._chunks = [c for c in chunks if c]

    async def read(self) -> bytes:
        return b"".join(self._chunks)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class _Headers(dict[str, str]):
    """Headers looked up case-insensitively, like aiohttp's."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__({k.lower(): v for k, v in headers.items()})

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


def reason(err: BaseException) -> str:
    """An exception's message, or its type name when it has none."""
    return str(err) or type(err).__name__


class Received:
    """One answer's body, read as it arrives: the whole of it for :meth:`read`, and what had
    come for :meth:`partial` when the call times out before the end (``Response.read``
    keeps nothing of a body it did not finish)."""

    __slots__ = ("_chunks",)

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    async def read(self, response: Response) -> tuple[int, bytes]:
        """The reader of a one-answer call (``wire.Http.call``): the status and the body."""
        chunks = self._chunks
        async for chunk in response.iter_chunks():
            chunks.append(chunk)
        return response.status, chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def partial(self) -> partial.Partial:
        """What had arrived, as :func:`~.partial.of_bytes` keeps it."""
        kept = bytearray()
        size = 0
        for chunk in self._chunks:
            size += len(chunk)
            if len(kept) < partial.KEEP_BYTES:
                kept += chunk
        return partial.of_bytes(kept, "body", size)
