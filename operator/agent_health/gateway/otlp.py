"""The OTLP receiver: the agent's OpenTelemetry spans, straight to the run they belong to.

The agent is told where to export (``OTEL_EXPORTER_OTLP_ENDPOINT``, docs/agent-protocol.md)
and sends ``POST /v1/traces`` there, protobuf or JSON (:mod:`agent_health.ledger.otlp`).
Spans join a run by trace id: the trace id of the W3C ``traceparent`` the run sent the agent,
which whoever sends it tells the :class:`Collector` first (:meth:`Collector.expect`: the
gateway's controller route when the controller's call passes, the local engine before it
calls the agent). A span of a trace no run here was given — or one whose
``agent_health.run_id`` attribute names another run — is not kept: it is rejected and
counted, and the answer says so in its ``partial_success`` (HTTP 200, as OTLP asks).

Bad input never reaches a run: a body over ``max_body_bytes`` (before or after inflating) is
answered 413 without being read further, one that is not OTLP 400 (also JSON nested deeper
than an export nests, or holding an integer of thousands of digits), another media type or a
``Content-Encoding`` other than gzip, deflate or identity 415, another path 404 and another
method 405, an export while ``max_inflight`` are being read 503 (an exporter retries it),
each counted in :meth:`Collector.summary` (the gateway's ``/healthz``); anything else that
goes wrong reading one is a 500, counted and logged the same way. A span that fails its
checks (:mod:`agent_health.ledger.otlp`: ids, times, counts, numbers) is left out of an
export otherwise kept, counted as invalid and named in the answer's ``partial_success``. A
run keeps at most ``max_spans`` spans, taken from at most ``max_run_bytes`` of exports;
later ones are dropped and counted. The spans of the last :data:`MAX_RUNS` runs are held.
What is kept goes, one :class:`~agent_health.ledger.records.SpansRecord` per request and
run, to ``on_kept`` (the ledger cell of the run).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web, web_protocol

from agent_health.gateway import config
from agent_health.ledger import otlp, records

log = logging.getLogger("agent_health.gateway")
PATH = "/v1/traces"
RUN_ID_ATTRIBUTE = "agent_health.run_id"
ENCODINGS = frozenset({"", "identity", "gzip", "deflate"})
"""``Content-Encoding`` values taken (the OTLP exporters send gzip or nothing); another would
be read still encoded, as if it were the media type."""
MAX_RUNS = 128
"""Runs whose spans are held at once; the oldest is forgotten for a new one."""


@dataclass(frozen=True)
class Limits:
    """What one receiver takes: body bytes (also after inflating), spans kept per run, and
    the bounds of each decoded span (:class:`agent_health.ledger.otlp.Limits`)."""

    max_body_bytes: int = 4 * 1024 * 1024
    max_spans: int = 2000
    max_run_bytes: int = 16 * 1024 * 1024
    """Export bytes a run takes spans from: what a run holds stays bounded, whatever the
    size of its spans' attributes."""
    max_inflight: int = 4
    """Exports read at once; more are answered 503 (an exporter retries): what the bodies
    being read hold stays at most ``max_inflight × max_body_bytes``."""
    body_timeout: float = 30.0
    decode: otlp.Limits = field(default_factory=otlp.Limits)


@dataclass
class _Run:
    trace_id: str
    spans: list[dict[str, Any]] = field(default_factory=list)
    bytes: int = 0
    dropped: int = 0
    rejected: int = 0


KeptSpans = Callable[[records.SpansRecord], None]


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<flags>``), if valid."""
    parts = (traceparent or "").strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    try:
        return parts[1].lower() if int(parts[1], 16) else None
    except ValueError:
        return None


class Collector:
    """Which trace belongs to which run, and the spans each run kept (bounded)."""

    def __init__(self, limits: Limits | None = None, on_kept: KeptSpans | None = None) -> None:
        self.limits = limits or Limits()
        self.on_kept = on_kept
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._owners: dict[str, str] = {}  # trace id → run id
        self.requests = 0
        self.spans_kept = 0
        self.spans_rejected = 0
        self.spans_dropped = 0
        self.spans_invalid = 0
        self.last_invalid: str | None = None
        self.refused: Counter[int] = Counter()  # HTTP status → requests refused with it
        self.reading = 0  # exports being read now (at most max_inflight)
        self.last_refusal: str | None = None

    def expect(self, run_id: str, trace_id: str | None) -> None:
        """Spans of ``trace_id`` are ``run_id``'s (called before the agent is sent it)."""
        if not trace_id:
            return
        trace_id = trace_id.lower()
        known = self._runs.get(run_id)
        if known is not None and known.trace_id == trace_id:
            return
        if known is not None and self._owners.get(known.trace_id) == run_id:
            del self._owners[known.trace_id]
        self._runs[run_id] = _Run(trace_id)
        self._runs.move_to_end(run_id)
        self._owners[trace_id] = run_id
        while len(self._runs) > MAX_RUNS:
            gone, old = self._runs.popitem(last=False)
            if self._owners.get(old.trace_id) == gone:
                del self._owners[old.trace_id]

    def spans(self, run_id: str) -> list[dict[str, Any]]:
        """The spans ``run_id`` kept so far (a copy)."""
        run = self._runs.get(run_id)
        return list(run.spans) if run is not None else []

    def report(self, run_id: str) -> dict[str, Any]:
        """What the receiver holds for ``run_id``, as the admin listener answers it."""
        run = self._runs.get(run_id)
        return {
            "run_id": run_id,
            "trace_id": run.trace_id if run is not None else None,
            "spans": list(run.spans) if run is not None else [],
            "dropped": run.dropped if run is not None else 0,
            "rejected": run.rejected if run is not None else 0,
        }

    def refuse(self, status: int, reason: str) -> None:
        self.refused[status] += 1
        self.last_refusal = f"{status}: {reason}"
        log.warning("OTLP export refused (%d): %s", status, reason)

    def receive(
        self,
        spans: Sequence[dict[str, Any]],
        *,
        principal: str,
        evidence: str,
        content_type: str,
        body: bytes,
        invalid: int = 0,
        problem: str | None = None,
    ) -> tuple[int, str]:
        """Keep each span with its run; ``(spans not kept, why)`` for the answer. ``invalid``
        spans of the export failed their checks (the first because of ``problem``)."""
        self.requests += 1
        if invalid:
            self.spans_invalid += invalid
            self.last_invalid = problem
            log.warning("OTLP export: %d invalid spans left out (first: %s)", invalid, problem)
        by_run: dict[str, list[dict[str, Any]]] = {}
        rejected: dict[str, int] = {}
        foreign = 0
        for span in spans:
            owner = self._owners.get(span["trace_id"])
            named = span["attributes"].get(RUN_ID_ATTRIBUTE)
            if owner is None or (named is not None and str(named) != owner):
                foreign += 1
                if owner is not None:
                    rejected[owner] = rejected.get(owner, 0) + 1
                continue
            by_run.setdefault(owner, []).append(span)
        dropped = 0
        full = False
        sha = hashlib.sha256(body).hexdigest()
        for run_id in by_run.keys() | rejected.keys():
            run = self._runs[run_id]
            run.rejected += rejected.get(run_id, 0)
            offered = by_run.get(run_id, [])
            room = max(0, self.limits.max_spans - len(run.spans))
            if offered and run.bytes + len(body) > self.limits.max_run_bytes:
                room, full = 0, True
            kept, over = offered[:room], len(offered) - min(room, len(offered))
            if kept:
                run.bytes += len(body)
            run.spans.extend(kept)
            run.dropped += over
            dropped += over
            self.spans_kept += len(kept)
            if self.on_kept is not None and (kept or over or rejected.get(run_id)):
                self.on_kept(
                    records.SpansRecord(
                        principal=principal,
                        evidence=evidence,
                        run_id=run_id,
                        trace_id=run.trace_id,
                        content_type=content_type,
                        request_bytes=len(body),
                        request_sha256=sha,
                        spans=kept,
                        rejected=rejected.get(run_id, 0),
                        dropped=over,
                    )
                )
        self.spans_rejected += foreign
        self.spans_dropped += dropped
        reasons = []
        if invalid:
            reasons.append(f"{invalid} invalid spans (the first: {problem})")
        if foreign:
            reasons.append(
                f"{foreign} spans of a trace no run here was sent (or naming another run)"
            )
        if dropped:
            cap = (
                f"{self.limits.max_run_bytes} bytes of exports"
                if full
                else f"{self.limits.max_spans} spans"
            )
            reasons.append(f"{dropped} spans past the run's cap of {cap}")
        return invalid + foreign + dropped, "; ".join(reasons)

    def summary(self) -> dict[str, Any]:
        """The receiver's counts, for ``/healthz``."""
        return {
            "otlp": {
                "requests": self.requests,
                "reading": self.reading,
                "spans_kept": self.spans_kept,
                "spans_rejected": self.spans_rejected,
                "spans_dropped": self.spans_dropped,
                "spans_invalid": self.spans_invalid,
                "last_invalid": self.last_invalid,
                "refused": {str(status): n for status, n in sorted(self.refused.items())},
                "last_refusal": self.last_refusal,
            }
        }


class Receiver:
    """The OTLP/HTTP listener's handler (an aiohttp low-level server handler)."""

    def __init__(self, collector: Collector, tokens: config.Tokens | None = None) -> None:
        self.collector = collector
        self._tokens = tokens or config.Tokens({})

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path != PATH:
            return self._refuse(request, 404, f"no {request.path} here: OTLP traces go to {PATH}")
        if request.method != "POST":
            return self._refuse(request, 405, f"{PATH} takes POST, not {request.method}")
        kind = otlp.media_type(request.content_type)
        if kind is None:
            return self._refuse(
                request,
                415,
                f"Content-Type {request.content_type!r} is not {otlp.PROTOBUF} or {otlp.JSON}",
            )
        encoding = request.headers.get("Content-Encoding", "")
        if encoding.strip().lower() not in ENCODINGS:
            return self._refuse(
                request,
                415,
                f"Content-Encoding {encoding[:60]!r} is not taken: send gzip, deflate or none",
            )
        limit = self.collector.limits.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._refuse(request, 413, f"the body has more than {limit} bytes")
        collector = self.collector
        if collector.reading >= collector.limits.max_inflight:
            response = self._refuse(
                request, 503, f"{collector.reading} exports are being read; try again shortly"
            )
            response.headers["Retry-After"] = "1"
            return response
        collector.reading += 1
        try:
            return await self._receive(request, kind, limit)
        except Exception as err:
            # A bug reading an export is the receiver's, not a reason to stop serving: answered,
            # counted and logged with its traceback, as every other refusal is counted.
            log.exception("OTLP export: reading it failed")
            why = f"the receiver failed reading the export: {err!r}"[:300]
            return self._refuse(request, 500, why)
        finally:
            collector.reading -= 1

    async def _receive(self, request: web.BaseRequest, kind: str, limit: int) -> web.Response:
        body = bytearray()
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        inflater = _Inflater(encoding) if encoding not in ("", "identity") else None
        # The limit holds for what the body inflates to, so a small bomb stops at it too.
        inflated = " once inflated" if inflater is not None else ""
        try:
            async with asyncio.timeout(self.collector.limits.body_timeout):
                async for chunk in request.content.iter_any():
                    if inflater is not None:
                        chunk = inflater.feed(chunk, limit - len(body) + 1)
                    body += chunk
                    if len(body) > limit:
                        reason = f"the body has more than {limit} bytes{inflated}"
                        return self._refuse(request, 413, reason)
                if inflater is not None:
                    inflater.finish()
        except TimeoutError:
            return self._refuse(request, 408, "the body did not arrive in time")
        except (web_protocol.RequestPayloadError, zlib.error) as err:
            return self._refuse(
                request, 400, f"the {encoding or 'identity'} body is corrupt: {err}"
            )
        raw = bytes(body)
        try:
            export = await _decode(raw, kind, self.collector.limits)
        except otlp.TooLarge as err:
            return self._refuse(request, 413, str(err))
        except otlp.OtlpError as err:
            return self._refuse(request, 400, str(err))
        principal, evidence = self._tokens.evidence(request.headers.get(config.TOKEN_HEADER))
        rejected, why = self.collector.receive(
            export.spans,
            principal=principal,
            evidence=evidence,
            content_type=kind,
            body=raw,
            invalid=export.invalid,
            problem=export.problem,
        )
        return web.Response(
            status=200,
            body=otlp.response(kind, rejected, why),
            content_type=kind,
        )

    def _refuse(self, request: web.BaseRequest, status: int, reason: str) -> web.Response:
        self.collector.refuse(status, reason)
        # The Status message of OTLP/HTTP, as JSON: what an exporter logs.
        response = web.json_response({"code": 3, "message": reason}, status=status)
        if request.body_exists and status in (408, 413, 500, 503):
            response.force_close()  # the rest of the body is never read
        return response


class _Inflater:
    """A gzip or deflate body inflated as it arrives, never more than the room left at a time
    (the listener leaves inflating to its handler: ``SERVER_OPTIONS``)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._inflate: Any = None

    def feed(self, chunk: bytes, room: int) -> bytes:
        """What ``chunk`` inflates to, at most ``room`` bytes (more means the body is over its
        limit: the caller stops there)."""
        if self._inflate is None:
            if self.encoding == "gzip":
                wbits = 16 + zlib.MAX_WBITS
            else:  # deflate: zlib-wrapped, as HTTP means it, or raw, as some clients send it
                wbits = zlib.MAX_WBITS if chunk[:1] and chunk[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self._inflate = zlib.decompressobj(wbits)
        out: bytes = self._inflate.decompress(chunk, room)
        if self._inflate.unused_data:
            raise zlib.error(f"data after the end of the {self.encoding} stream")
        return out

    def finish(self) -> None:
        """The body has all arrived: it must have been a whole stream."""
        if self._inflate is None or not self._inflate.eof:
            raise zlib.error(f"the {self.encoding} stream ends before its end")


SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}
"""Options of the aiohttp server a :class:`Receiver` serves on: it inflates bodies itself, so an
encoding aiohttp would refuse (or pass on still encoded) reaches it, to be refused and
counted."""


async def _decode(body: bytes, kind: str, limits: Limits) -> otlp.Export:
    """Decode off the event loop when the body is large (protobuf parsing and JSON of a few
    MiB take milliseconds the other listeners would wait)."""
    if len(body) < 64 * 1024:
        return otlp.decode(body, kind, limits.decode)
    return await asyncio.to_thread(otlp.decode, body, kind, limits.decode)
