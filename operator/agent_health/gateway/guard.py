"""Limits that keep every listener serving while the target abuses it, and the record of refusals.

The target shares localhost with the gateway, so it can reach every listener, the admin one
included. Each listener is a :class:`Listener`, which holds it to the limits of
:class:`~agent_health.gateway.config.Settings`:

* **request heads** — a line of at most ``max_line_size`` bytes, at most ``max_headers``
  headers of at most ``max_field_size`` bytes (aiohttp answers 400 beyond); a connection must
  send a complete head within ``header_timeout`` seconds of opening (and may idle that long
  between requests), else it is closed, so bytes trickled slowly (slowloris) hold nothing;
* **connections** — at most ``max_connections`` per listener: for a new one at the limit the
  oldest idle connection (no request in progress: a keep-alive one, or one whose head is still
  arriving or has arrived but is not yet handled) is closed; when every connection is busy the
  new one is closed instead. A call whose connection was so closed before it was handled is
  dropped, never forwarded: its caller can no longer read an answer;
* **calls from callers without a valid token** — at most ``max_untrusted_calls`` in flight per
  route listener (:mod:`~agent_health.gateway.proxy` answers 503 beyond), so the target cannot
  fill a listener with calls it answers slowly itself while trusted callers wait;
* **admin bodies** — at most ``admin_max_bytes`` (413, from ``Content-Length`` before reading
  and again while reading), received within ``body_timeout`` (408); a caller without the
  controller's token is refused before its body is read.

Every refused call is recorded in the cell's ledger (:class:`Refusals`) as an ``exchange``
whose callee is ``gateway``, with the caller's principal and evidence (``none``,
``invalid-token``, or the id of the token it presented), the path, the status and the
reason — up to ``max_refused_records`` per gateway; the rest are counted in ``/healthz``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web, web_protocol

from agent_health.gateway import config, recorder
from agent_health.ledger import observation, records

log = logging.getLogger("agent_health.gateway")
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
LINGER_SECONDS = 2.0  # how long an unread refused body is drained so the caller reads the answer
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def server_options(settings: config.Settings) -> dict[str, Any]:
    """The aiohttp server options every listener of ``settings`` runs with."""
    return {
        # aiohttp closes a connection that sits waiting for a complete request head longer
        # than its keep-alive timeout, from the moment it opens: the header timeout.
        "keepalive_timeout": settings.header_timeout,
        "max_line_size": settings.max_line_size,
        "max_field_size": settings.max_field_size,
        "max_headers": settings.max_headers,
        "lingering_time": LINGER_SECONDS,
        "access_log": None,  # the ledger is the record; a log line per call costs as much
    }


class Listener(web.Server):
    """A low-level aiohttp server that holds one listener to the connection limit."""

    def __init__(
        self, handler: Handler, settings: config.Settings, name: str, **options: Any
    ) -> None:
        """``options``: aiohttp server options of this listener's own, over the shared ones."""
        self.name = name
        self.refused_connections = 0
        self.dropped_calls = 0  # calls whose connection was closed before they were handled
        self._inner = handler
        self._limit = settings.max_connections
        self._busy: dict[object, int] = {}  # transport → requests in progress on it
        super().__init__(self._handle, **(server_options(settings) | options))

    def serve(self, handler: Handler) -> None:
        """Hand the listener's calls to ``handler`` from now on (a pooled gateway, assigned)."""
        self._inner = handler

    def connection_made(self, handler: web_protocol.RequestHandler, transport: Any) -> None:
        super().connection_made(handler, transport)
        open_ = [h.transport for h in self.connections if h.transport is not None]
        live = [t for t in open_ if not t.is_closing()]
        if len(live) <= self._limit:
            return
        idle = next((t for t in live if t is not transport and t not in self._busy), None)
        if idle is not None:
            idle.close()
            return
        self.refused_connections += 1
        if self.refused_connections in (1, 10, 100) or self.refused_connections % 1000 == 0:
            log.warning(
                "listener %s: %d connections, all busy; refused %d new connections so far",
                self.name,
                self._limit,
                self.refused_connections,
            )
        transport.close()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        transport = request.transport
        if transport is None or transport.is_closing():
            # Closed as idle at the connection limit after its head arrived but before this
            # call was handled: the answer could not reach the caller, so the upstream must
            # not act on the call. (aiohttp writes this answer to nowhere and moves on.)
            self.dropped_calls += 1
            return refusal(503, f"listener {self.name}: the connection was closed at the limit")
        self._busy[transport] = self._busy.get(transport, 0) + 1
        try:
            return await self._inner(request)
        finally:
            left = self._busy.pop(transport, 1) - 1
            if left > 0:
                self._busy[transport] = left


class Refusals:
    """Refused calls, recorded as ``exchange`` records to the gateway up to a cap, then counted."""

    def __init__(self, record: recorder.Sink | None, limit: int) -> None:
        self._recorder = record
        self.limit = limit
        self.recorded = 0
        self.unrecorded = 0

    def refuse(
        self,
        request: web.BaseRequest,
        *,
        principal: str,
        evidence: str,
        run_id: str | None,
        status: int,
        reason: str,
        started_at: float,
        request_bytes: int = 0,
        request_sha256: str | None = None,
        response_bytes: int = 0,
    ) -> None:
        """Record (or count) one refused call; never waits and never raises."""
        if self._recorder is None or self.recorded >= self.limit:
            self.unrecorded += 1
            if self.unrecorded in (1, 100) or self.unrecorded % 10_000 == 0:
                log.warning(
                    "refused %s %s from %s (%s): %s; %d refusals not recorded",
                    request.method,
                    request.path,
                    principal,
                    evidence,
                    reason,
                    self.unrecorded,
                )
            return
        self.recorded += 1
        if self.recorded == self.limit:
            reason += f"; refusals after this one are counted, not recorded (limit {self.limit})"
        ticket = self._recorder.start(run_id)
        ticket.finish(
            observation.Observation(
                principal=principal,
                evidence=evidence,
                upstream=records.GATEWAY,
                run_id=run_id,
                method=request.method,
                path=request.path[:2048],
                status=status,
                started_at=started_at,
                ended_at=time.time(),
                request_bytes=request_bytes,
                response_bytes=response_bytes,
                request_sha256=request_sha256 or _EMPTY_SHA256,
                response_sha256=None,
                error=f"refused: {reason}",
            )
        )

    def summary(self) -> dict[str, int]:
        return {"refused_recorded": self.recorded, "refused_unrecorded": self.unrecorded}


def refusal(status: int, reason: str, **more: Any) -> web.Response:
    """The JSON answer to a refused call; it closes the connection."""
    response = web.json_response({"error": reason, **more}, status=status)
    response.force_close()
    return response
