"""HTTP plumbing shared by the HTTP connectors (REST, AG-UI, OpenAI-compatible).

One client seam (an optional httpx transport, so a unit test can pass a function instead of
a server), the run headers every request carries, and one translation of httpx failures
into :mod:`~agent_health.connectors.errors`, so every HTTP connector reports a refused
connection, a timeout or a non-2xx answer in the same words.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pydantic

from agent_health.connectors import errors
from agent_health.connectors.base import ConnectorSpec
from agent_health.connectors.protocol import AgentRequest

RUN_ID_HEADER = "X-Agent-Health-Run-Id"


class Clients:
    """The HTTP clients of one connector, leased one per request in flight.

    httpcore's connection pool does work proportional to its connections times the requests
    waiting on it for every request (encode/httpcore#1035), which at 50 tests in flight
    costs more than the agents' own latency. A small client per in-flight request keeps
    that constant; an idle client (and its keep-alive connection) is reused by the next
    request, so connections are still pooled.
    """

    def __init__(
        self, spec: ConnectorSpec, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._spec = spec
        self._transport = transport
        self._idle: list[httpx.AsyncClient] = []
        self._every: list[httpx.AsyncClient] = []
        # Loading the CA bundle is the costly part of a new client: do it once.
        self._tls = httpx.create_ssl_context()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client no other request is using, returned to the idle list afterwards."""
        leased = self._idle.pop() if self._idle else self._new()
        try:
            yield leased
        finally:
            self._idle.append(leased)

    def _new(self) -> httpx.AsyncClient:
        made = httpx.AsyncClient(
            headers=self._spec.headers,
            timeout=httpx.Timeout(self._spec.timeout),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=1),
            transport=self._transport or _socket(self._spec),
            verify=self._tls,
        )
        self._every.append(made)
        return made

    async def aclose(self) -> None:
        every, self._every, self._idle = self._every, [], []
        for made in every:
            await made.aclose()


def _socket(spec: ConnectorSpec) -> httpx.AsyncHTTPTransport | None:
    return httpx.AsyncHTTPTransport(uds=spec.uds) if spec.uds else None


def require_url(spec: ConnectorSpec, kind: str) -> str:
    """The spec's URL, or a config error naming the connector kind."""
    if not spec.url:
        raise errors.ConnectorConfigError(
            f"the {kind} connector needs a url (for example {kind}+http://127.0.0.1:8080/...)"
        )
    return spec.url


def run_headers(request: AgentRequest) -> dict[str, str]:
    """``X-Agent-Health-Run-Id`` and, when the run has one, the W3C ``traceparent``."""
    headers = {RUN_ID_HEADER: request.run_id}
    if request.traceparent:
        headers["traceparent"] = request.traceparent
    return headers


def timeout_of(request: AgentRequest, spec: ConnectorSpec) -> float:
    """The run's own timeout when ``agent.run(timeout=...)`` gave one, else the spec's."""
    return request.timeout_s or spec.timeout


@contextlib.asynccontextmanager
async def translating(url: str, timeout: float) -> AsyncIterator[None]:
    """Bound the block by ``timeout`` seconds in all and turn httpx failures into
    connector errors (``raise ... from err``). Connector errors raised inside pass through.
    """
    try:
        async with asyncio.timeout(timeout):
            yield
    except (TimeoutError, httpx.TimeoutException) as err:
        raise errors.AgentTimeout(f"agent at {url} did not answer within {timeout:g} s") from err
    except httpx.ConnectError as err:
        raise errors.AgentUnreachable(
            f"cannot connect to agent at {url}: {reason(err)} (is it running?)"
        ) from err
    except httpx.HTTPError as err:
        raise errors.AgentUnreachable(f"request to agent at {url} failed: {reason(err)}") from err


def ensure_success(response: httpx.Response, url: str) -> None:
    """Raise :class:`~errors.AgentHTTPError` for a non-2xx answer (its body must be read)."""
    if not response.is_success:
        raise errors.AgentHTTPError(
            f"agent at {url} answered HTTP {response.status_code}: {snippet(response.text)}",
            status=response.status_code,
        )


def json_body(response: httpx.Response, url: str) -> Any:
    """The answer's JSON, or :class:`~errors.AgentProtocolError` quoting what came instead."""
    try:
        return json.loads(response.content)
    except ValueError as err:
        raise errors.AgentProtocolError(
            f"agent at {url} answered malformed JSON: {snippet(response.text)}"
        ) from err


def require_output(body: Any, who: str) -> None:
    """The protocol's one required field: a reply without ``output`` is broken, not empty."""
    if isinstance(body, dict) and "output" not in body:
        keys = ", ".join(sorted(map(str, body))[:10]) or "none"
        raise errors.AgentProtocolError(
            f'{who}: reply has no output (REST protocol v1 requires an "output" string; '
            f"the reply's fields: {keys})"
        )


def validation_reason(err: pydantic.ValidationError) -> str:
    """``where: what`` of the first validation error, for one-line messages."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


def reason(err: BaseException) -> str:
    """An exception's message, or its type name when it has none."""
    return str(err) or type(err).__name__


def snippet(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
