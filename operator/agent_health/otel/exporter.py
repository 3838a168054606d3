"""The spans of :mod:`.spans` handed to the OpenTelemetry SDK (the ``otel`` extra).

Imported only when export is on. Each record becomes the SDK's finished span
(``ReadableSpan``) with the ids and times that were recorded, queued on the SDK's
``BatchSpanProcessor``, whose worker thread encodes and sends them with the SDK's OTLP/HTTP
exporter. No tracer provider is made and the process's global one is never touched. A
collector that is down never fails or slows the run:

* the queue is bounded (``max_queue``): spans beyond it are dropped and counted;
* an endpoint that refuses the connection fails its batch at once (no retries: a refused
  connection is not a transient error here), and after a failed batch the rest of the run's
  spans are dropped without another try — the end of the run waits on no collector;
* the SDK's own log lines are held back; :meth:`RunExporter.close` returns one warning with
  the count of spans dropped and why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from agent_health.otel import conventions as cv
from agent_health.otel import records
from agent_health.otel import settings as settings_mod

_SCHEDULE_MS = 500  # spans reach the collector within about this of their test's end
_BATCH = 512  # spans per export request at most (the SDK's default)
_KINDS = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT}
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)


def _context(trace_id: int, span_id: int) -> trace.SpanContext:
    return trace.SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)


class EndpointUnreachable(Exception):
    """The OTLP endpoint refused the connection (not a ``requests`` error, so the SDK's client
    does not retry it)."""


class _Session(requests.Session):
    """The exporter's HTTP session: a refused connection fails its export at once, and the last
    failure is kept for the warning."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: str | None = None

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().request(method, url, *args, **kwargs)
        except requests.exceptions.ConnectionError as err:
            self.failure = f"cannot connect: {err.__class__.__name__}"
            raise EndpointUnreachable(self.failure) from err
        except requests.exceptions.RequestException as err:
            self.failure = f"{err.__class__.__name__}: {err}"
            raise
        if response.status_code >= 400:
            self.failure = f"HTTP {response.status_code} {response.reason}"
        return response


class _Counting(SpanExporter):
    """Counts what was sent and what was lost; after a failed batch, drops the rest at once."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.lost = 0
        self.down = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.down:
            with self._lock:
                self.lost += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:  # the worker thread must never die of an export
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.lost += len(spans)
                self.down = True
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class RunExporter:
    """One run's export: built when the run starts, closed when it ends."""

    def __init__(self, settings: settings_mod.Settings, *, version: str = "") -> None:
        self.settings = settings
        self.submitted = 0
        self.dropped = 0  # over the queue's bound, never handed to the SDK
        self._session = _Session()
        self._exporter = _Counting(
            OTLPSpanExporter(
                endpoint=settings.endpoint,
                headers=dict(settings.headers),
                timeout=settings.timeout,
                session=self._session,
            )
        )
        self._resource = Resource.create({"service.name": settings.service_name})
        self._scope = InstrumentationScope(cv.SCOPE, version, cv.SCHEMA_URL)
        self._processor = BatchSpanProcessor(
            self._exporter,
            max_queue_size=settings.max_queue,
            schedule_delay_millis=_SCHEDULE_MS,
            max_export_batch_size=min(_BATCH, settings.max_queue),  # the SDK wants it so
        )
        # The SDK logs each failed batch and retry; the run reports one line instead.
        self._sdk_log = logging.getLogger("opentelemetry")
        self._sdk_level = self._sdk_log.level
        self._sdk_log.setLevel(logging.CRITICAL)

    def submit(self, records: Sequence[records.SpanRecord]) -> None:
        """Queue ``records`` on the batch processor; never blocks, never raises."""
        held = self.submitted - self._exporter.exported - self._exporter.lost - self.dropped
        self.submitted += len(records)
        if self._exporter.down or held + len(records) > self.settings.max_queue:
            self.dropped += len(records)
            return
        for record in records:
            self._processor.on_end(self._readable(record))

    def _readable(self, record: records.SpanRecord) -> ReadableSpan:
        """The SDK's finished span of ``record``: every value was recorded, so the span is
        made ended, as the tracer would have made it (``Tracer.start_span`` and ``end`` cost
        thirty times as much, and would have to be handed the ids and times anyway)."""
        status = trace.Status(trace.StatusCode.UNSET)
        if record.error is not None:
            status = trace.Status(trace.StatusCode.ERROR, record.error)
        elif record.ok:
            status = trace.Status(trace.StatusCode.OK)
        parent = _context(record.trace_id, record.parent_id) if record.parent_id else None
        return ReadableSpan(
            name=record.name,
            context=_context(record.trace_id, record.span_id),
            parent=parent,
            resource=self._resource,
            attributes=record.attributes,
            events=[Event(e.name, e.attributes, e.at_ns) for e in record.events],
            links=[
                trace.Link(_context(link.trace_id, link.span_id), link.attributes)
                for link in record.links
            ],
            kind=_KINDS[record.kind],
            status=status,
            start_time=record.start_ns,
            end_time=record.end_ns,
            instrumentation_scope=self._scope,
        )

    def close(self) -> str | None:
        """Send what is queued and stop (blocking: call it off the event loop); one warning
        when spans were lost."""
        try:
            self._processor.shutdown()  # type: ignore[no-untyped-call]
        finally:
            self._sdk_log.setLevel(self._sdk_level)
            self._session.close()
        lost = self.dropped + self._exporter.lost
        held = self.submitted - self._exporter.exported - lost
        lost += max(0, held)  # still queued when the worker stopped
        if not lost:
            return None
        why = self._session.failure or (
            "the export queue was full" if self.dropped else "the exporter failed"
        )
        return (
            f"OTLP export to {self.settings.endpoint}: {lost} of {self.submitted} spans dropped "
            f"({why}); the run's results are unaffected"
        )
