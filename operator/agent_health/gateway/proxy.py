"""The streaming handler: forward one call to the route's upstream and observe it on the way.

Bodies are never buffered whole: each request chunk goes upstream as it arrives and each
response chunk goes to the caller as it arrives (server-sent events pass through live), while
both are hashed and counted, and the response's token usage is read as it passes
(:class:`~agent_health.ledger.usage.Reader`, bounded memory; at most ``usage_max_bytes``
decoded bytes are read). No body is ever held whole, whatever its size or encoding.
Hop-by-hop headers are dropped both ways; status codes, reasons and the other headers pass
unchanged. The caller's token header is checked and never forwarded; a call to a peer
carries the peer's own token instead (:data:`~.config.VIA_HEADER`; a caller's copy dropped).

An upstream that cannot be reached answers 502 (504 on a timeout) with a JSON reason; an
upstream that breaks off a response already started aborts the caller's connection, so a
truncated stream is never mistaken for a complete one. Both are recorded with ``error``.

On a route to an MCP peer (``protocol=mcp``) each POST is read as MCP as it passes
(:mod:`~agent_health.gateway.mcpwire`, bounded like the usage reader) instead of for token
usage, which no MCP answer reports: each call is noted as soon as its answer is in, and
sealed in the exchange's own record when it ends (ledger version 5: one sealed line per
exchange, as on a plain route), or alone when the cell needs it sooner
(:class:`~agent_health.gateway.recorder.Ticket`).

A caller without a valid token is the target (evidence ``none``, or ``invalid-token`` when it
presented one nobody was given). The gateway itself refuses, and records as refused (see
:mod:`~agent_health.gateway.guard`): such a caller on a route to the judge when the route's
principal has a token (403: the judge is the controller's alone), and such a caller's calls
beyond ``max_untrusted_calls`` in flight on one listener (503).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from agent_health.gateway import config, guard, mcpwire, otlp, recorder
from agent_health.ledger import objects, observation, usage

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = frozenset(
    {"host", "expect", config.TOKEN_HEADER.lower(), config.VIA_HEADER.lower()}
)
SKIP_AUTO_HEADERS = ("User-Agent", "Accept-Encoding", "Content-Type")
# Bodies with a Content-Length up to this size are read whole and sent in one write: a small
# fixed-size body gains nothing from streaming and saves a syscall and a wake-up each way.
# Anything larger, or without a length (chunked, server-sent events), streams chunk by chunk.
WHOLE_BODY_BYTES = 64 * 1024
# A streamed response is copied at most this much at a time: reading all that is buffered
# (readany) took 256 KiB and more per call in flight, which a target multiplies by the calls
# it makes at once.
CHUNK_BYTES = 64 * 1024


class _Meter:
    """sha256 and byte count of a body seen chunk by chunk."""

    __slots__ = ("hash", "size")

    def __init__(self) -> None:
        self.hash = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.hash.update(chunk)
        self.size += len(chunk)


@dataclass
class _State:
    """What one call has shown so far; becomes its :class:`~agent_health.ledger.observation.
    Observation`."""

    sent: _Meter = field(default_factory=_Meter)
    received: _Meter = field(default_factory=_Meter)
    usage: usage.Reader | None = None
    mcp: mcpwire.Reader | None = None
    status: int | None = None
    error: str | None = "the gateway stopped before the exchange finished"


def _dropped(headers: CIMultiDictProxy[str], extra: frozenset[str]) -> CIMultiDict[str]:
    """The headers without hop-by-hop ones, those the Connection header names, and ``extra``."""
    out = CIMultiDict(headers)  # a copy in C, duplicates and order kept
    for name in HOP_BY_HOP | extra:
        out.popall(name, None)
    for value in headers.getall("Connection", []):
        for token in value.split(","):
            out.popall(token.strip(), None)
    return out


class Proxy:
    """The handler of one route's listener (an aiohttp low-level server handler)."""

    def __init__(
        self,
        route: config.Route,
        settings: config.Settings,
        session: aiohttp.ClientSession,  # carries the timeouts and skip_auto_headers
        tokens: config.Tokens,
        record: recorder.Sink | None,
        refusals: guard.Refusals | None = None,
        spans: otlp.Collector | None = None,
    ) -> None:
        self.route = route
        # The controller's call of the target names the run's trace (the target's own claim
        # of a trace id proves nothing).
        self._spans = spans if route.principal == "controller" and route.to == "target" else None
        self.settings = settings
        self._session = session
        self._tokens = tokens
        self._recorder = record
        self._refusals = refusals or guard.Refusals(record, settings.max_refused_records)
        self._untrusted = 0  # calls in flight from callers without a valid token
        # The judge is the controller's alone: on a route to it, the gateway refuses a
        # caller without the route principal's token rather than leave it to the service.
        self._token_required = route.to == "judge" and tokens.principal_of(route.principal)
        # A peer knows the gateway's calls by its own token; no other callee gets a token.
        self._via = tokens.token_of(route.to) if route.to.startswith("peer:") else None
        self._mcp = (
            mcpwire.Limits(settings.mcp_max_bytes, settings.mcp_keep_bytes)
            if route.protocol == "mcp"
            else None
        )
        self._clock = objects.Clock()  # dates the MCP calls read on this route
        upstream = URL(route.upstream)
        # raw_path keeps the caller's percent-encoding and query exactly as sent.
        self._prefix = str(upstream.origin()) + upstream.raw_path.rstrip("/")

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        started_at = time.time()
        principal, evidence = self._tokens.evidence(request.headers.get(config.TOKEN_HEADER))
        run_id = request.headers.get(config.RUN_ID_HEADER) or self.settings.run_id
        trusted = evidence not in (config.NO_TOKEN, config.INVALID_TOKEN)
        refused = self._refusal(principal, trusted)
        if refused is not None:
            status, reason = refused
            self._refusals.refuse(
                request,
                principal=principal,
                evidence=evidence,
                run_id=run_id,
                status=status,
                reason=f"{self.route.principal}→{self.route.to} listener: {reason}",
                started_at=started_at,
            )
            return guard.refusal(status, reason, upstream=self.route.to)
        if self._spans is not None and trusted and principal == "controller" and run_id:
            self._spans.expect(run_id, otlp.trace_id_of(request.headers.get("traceparent")))
        if not trusted:
            self._untrusted += 1
        try:
            return await self._observe(request, principal, evidence, run_id, started_at)
        finally:
            if not trusted:
                self._untrusted -= 1

    def _refusal(self, principal: str, trusted: bool) -> tuple[int, str] | None:
        if self._token_required and not (trusted and principal == self.route.principal):
            return 403, f"only the {self.route.principal}'s token may call {self.route.to}"
        if not trusted and self._untrusted >= self.settings.max_untrusted_calls:
            return 503, (
                f"{self._untrusted} calls without a valid token are in flight on this listener "
                f"(--max-untrusted-calls {self.settings.max_untrusted_calls}); try again later"
            )
        return None

    async def _observe(
        self,
        request: web.BaseRequest,
        principal: str,
        evidence: str,
        run_id: str | None,
        started_at: float,
    ) -> web.StreamResponse:
        ticket = self._recorder.start(run_id) if self._recorder is not None else None
        state = _State()
        if ticket is not None and self._mcp is not None and request.method == "POST":
            state.mcp = mcpwire.Reader(
                mcpwire.Caller(principal, evidence, self.route.to, run_id),
                self._mcp,
                ticket.note,
                session=request.headers.get(mcpwire.SESSION_HEADER),
                started=started_at,
                clock=self._clock,
            )
        try:
            return await self._forward(request, run_id, state)
        finally:
            if state.mcp is not None:
                state.mcp.finish(state.error)
            if ticket is not None:
                ticket.finish(
                    observation.Observation(
                        principal=principal,
                        evidence=evidence,
                        upstream=self.route.to,
                        run_id=run_id,
                        method=request.method,
                        path=request.path,
                        status=state.status,
                        started_at=started_at,
                        ended_at=time.time(),
                        request_bytes=state.sent.size,
                        response_bytes=state.received.size,
                        request_sha256=state.sent.hash.hexdigest(),
                        response_sha256=(
                            state.received.hash.hexdigest() if state.status is not None else None
                        ),
                        usage=state.usage.result() if state.usage is not None else None,
                        error=state.error,
                    )
                )

    async def _forward(
        self, request: web.BaseRequest, run_id: str | None, state: _State
    ) -> web.StreamResponse:
        headers = _dropped(request.headers, _NOT_FORWARDED)
        if run_id:
            headers[config.RUN_ID_HEADER] = run_id
        if self._via is not None:
            headers[config.VIA_HEADER] = self._via
        body: bytes | AsyncIterator[bytes] | None = None
        length = request.content_length
        if length is not None and length <= WHOLE_BODY_BYTES:
            body = await request.read()
            state.sent.update(body)
            if state.mcp is not None:
                state.mcp.request(body)
        elif request.body_exists:
            body = self._body(request, state)
        try:
            upstream = await self._session.request(
                request.method,
                URL(self._prefix + request.raw_path, encoded=True),
                headers=headers,
                data=body,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            state.error = f"the gateway cannot reach {self.route.to}: {_detail(err)}"
            await self._drain(request, state.sent)
            return self._failure(504 if isinstance(err, TimeoutError) else 502, state.error)
        try:
            state.status = upstream.status
            if state.mcp is not None:
                state.mcp.answer(
                    upstream.status,
                    upstream.headers.get("Content-Type"),
                    upstream.headers.get(mcpwire.SESSION_HEADER),
                )
            # An MCP server's answers are not model completions: nothing there reports token
            # usage, and its calls are read as MCP instead.
            if upstream.status < 400 and request.method != "HEAD" and self._mcp is None:
                state.usage = usage.Reader(
                    upstream.headers.get("Content-Type"),
                    upstream.headers.get("Content-Encoding"),
                    limit=self.settings.usage_max_bytes,
                )
            headers = _dropped(upstream.headers, frozenset())
            length = upstream.content_length
            if length is not None and length <= WHOLE_BODY_BYTES and request.method != "HEAD":
                return await self._whole(request, upstream, headers, state)
            response = web.StreamResponse(
                status=upstream.status, reason=upstream.reason, headers=headers
            )
            state.error = await self._stream(request, upstream, response, state)
        finally:
            if state.error is None:
                upstream.release()
            else:
                upstream.close()
        return response

    async def _whole(
        self,
        request: web.BaseRequest,
        upstream: aiohttp.ClientResponse,
        headers: CIMultiDict[str],
        state: _State,
    ) -> web.StreamResponse:
        """A small fixed-length response: read it, then answer it in one write."""
        try:
            body = await upstream.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            state.error = f"{self.route.to} broke off the response: {_detail(err)}"
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=502)
        state.received.update(body)
        if state.usage is not None:
            state.usage.feed(body)
        if state.mcp is not None:
            state.mcp.response(body)
        headers.popall("Content-Length", None)
        response = web.Response(
            status=upstream.status, reason=upstream.reason, headers=headers, body=body
        )
        state.error = None
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError as err:
            state.error = f"the caller went away before the response: {_detail(err)}"
        return response

    async def _stream(
        self,
        request: web.BaseRequest,
        upstream: aiohttp.ClientResponse,
        response: web.StreamResponse,
        state: _State,
    ) -> str | None:
        """Copy the upstream body to the caller chunk by chunk; the error, if any."""
        received, reader, calls = state.received, state.usage, state.mcp
        try:
            await response.prepare(request)
            while True:
                try:
                    chunk = await upstream.content.read(CHUNK_BYTES)
                except (aiohttp.ClientError, OSError, TimeoutError) as err:
                    # Headers are out: cutting the connection is the only way to say
                    # "incomplete" to the caller.
                    if request.transport is not None:
                        request.transport.close()
                    return (
                        f"{self.route.to} broke off the response after {received.size} bytes: "
                        f"{_detail(err)}"
                    )
                if not chunk:
                    break
                received.update(chunk)
                if reader is not None:
                    reader.feed(chunk)
                if calls is not None:
                    calls.response(chunk)
                await response.write(chunk)
            await response.write_eof()
        except ConnectionError as err:
            return f"the caller went away after {received.size} response bytes: {_detail(err)}"
        return None

    async def _body(self, request: web.BaseRequest, state: _State) -> AsyncIterator[bytes]:
        meter, calls = state.sent, state.mcp
        async for chunk in request.content.iter_any():
            meter.update(chunk)
            if calls is not None:
                calls.request(chunk)
            yield chunk

    async def _drain(self, request: web.BaseRequest, meter: _Meter) -> None:
        """Read (and hash) what is left of the request body, so the record covers all of it."""
        if not request.body_exists:
            return
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                async for chunk in request.content.iter_any():
                    meter.update(chunk)  # not read as MCP: the call reached no server
        except (TimeoutError, aiohttp.ClientError, OSError):
            return

    def _failure(self, status: int, reason: str) -> web.Response:
        payload = {
            "error": "bad gateway" if status == 502 else "gateway timeout",
            "reason": reason,
            "upstream": self.route.to,
            "url": self.route.upstream,
        }
        return web.Response(
            status=status, text=json.dumps(payload), content_type="application/json"
        )


def _detail(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    return str(err) or type(err).__name__
