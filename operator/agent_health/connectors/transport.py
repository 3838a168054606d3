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

from agent_health.connectors import errors


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

    @contextlib.asynccontextmanager
    async def send(self, request: Request) -> AsyncIterator[Response]:
        import aiohttp

        session = self._session or self._open()
        url = request.url
        try:
            async with session.request(
                request.method, url, data=request.body, headers=request.headers
            ) as response:
                yield _AiohttpResponse(response, url)
        except aiohttp.ClientConnectorError as err:
            raise errors.AgentUnreachable(
                f"cannot connect to agent at {url}: {reason(err.os_error)} (is it running?)"
            ) from err
        except (aiohttp.ClientError, OSError) as err:
            message = f"request to agent at {url} failed: {reason(err)}"
            raise errors.AgentUnreachable(message) from err

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _AiohttpResponse:
    """An aiohttp response whose body failures arrive as connector errors where they happen
    (an AG-UI stream cut mid-event is told apart from one that never started)."""

    def __init__(self, response: Any, url: str) -> None:
        self._response = response
        self._url = url
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers

    async def read(self) -> bytes:
        import aiohttp

        try:
            data: bytes = await self._response.read()
        except (aiohttp.ClientError, OSError) as err:
            raise self._broken(err) from err
        return data

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, OSError) as err:
            raise self._broken(err) from err

    def _broken(self, err: BaseException) -> errors.AgentUnreachable:
        return errors.AgentUnreachable(f"request to agent at {self._url} failed: {reason(err)}")


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
