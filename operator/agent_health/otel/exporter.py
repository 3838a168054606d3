"""The spans of :mod:`.spans` handed to the OpenTelemetry SDK (the ``otel`` extra).

Imported only when export is on. Spans are started and ended with the times that were
recorded, through a tracer of our own provider (never the process's global one), and queued
on the SDK's ``BatchSpanProcessor``, whose worker thread encodes and sends them off the event
loop. A collector that is down never fails or slows the run:

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
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator

from agent_health.otel import conventions as cv
from agent_health.otel import settings as settings_mod
from agent_health.otel import spans as spans_mod

_SCHEDULE_MS = 500  # spans reach the collector within about this of their test's end
_KINDS = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT}


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


class _Preset(IdGenerator):
    """Gives the SDK the ids a span must have (the invoke_agent span's is the traceparent's
    parent id, the test's trace id the traceparent's); set just before each span starts."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_span_id(self) -> int:
        return self.span_id or spans_mod.new_span_id()

    def generate_trace_id(self) -> int:
        return self.trace_id or spans_mod.new_trace_id()


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
        self._ids = _Preset()
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": settings.service_name}),
            id_generator=self._ids,
        )
        self._processor = BatchSpanProcessor(
            self._exporter,
            max_queue_size=settings.max_queue,
            schedule_delay_millis=_SCHEDULE_MS,
        )
        self._provider.add_span_processor(self._processor)
        self._tracer = self._provider.get_tracer(cv.SCOPE, version, schema_url=cv.SCHEMA_URL)
        # The SDK logs each failed batch and retry; the run reports one line instead.
        self._sdk_log = logging.getLogger("opentelemetry")
        self._sdk_level = self._sdk_log.level
        self._sdk_log.setLevel(logging.CRITICAL)

    def submit(self, records: Sequence[spans_mod.SpanRecord]) -> None:
        """Queue ``records`` (parents before children); never blocks, never raises."""
        held = self.submitted - self._exporter.exported - self._exporter.lost - self.dropped
        if self._exporter.down or held + len(records) > self.settings.max_queue:
            self.submitted += len(records)
            self.dropped += len(records)
            return
        started: dict[int, trace.Span] = {}
        for record in records:
            parent = started.get(record.parent_id) if record.parent_id is not None else None
            if parent is not None:
                ctx = trace.set_span_in_context(parent)
            elif record.parent_id is not None:  # a parent of another batch: by its ids
                ctx = trace.set_span_in_context(
                    trace.NonRecordingSpan(
                        trace.SpanContext(
                            record.trace_id,
                            record.parent_id,
                            is_remote=False,
                            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                        )
                    )
                )
            else:
                ctx = otel_context.Context()  # a root: never the caller's current span
            self._ids.trace_id, self._ids.span_id = record.trace_id, record.span_id
            try:
                span = self._tracer.start_span(
                    record.name,
                    context=ctx,
                    kind=_KINDS[record.kind],
                    attributes=record.attributes,
                    links=[
                        trace.Link(
                            trace.SpanContext(
                                link.trace_id,
                                link.span_id,
                                is_remote=False,
                                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                            ),
                            link.attributes,
                        )
                        for link in record.links
                    ],
                    start_time=record.start_ns,
                )
            finally:
                self._ids.trace_id = self._ids.span_id = 0
            for event in record.events:
                span.add_event(event.name, event.attributes, timestamp=event.at_ns)
            if record.error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, record.error))
            elif record.ok:
                span.set_status(trace.Status(trace.StatusCode.OK))
            started[record.span_id] = span
        # Ended children first: a backend that shows spans as they come sees whole subtrees.
        for record in reversed(records):
            started[record.span_id].end(end_time=record.end_ns)
        self.submitted += len(records)

    def close(self) -> str | None:
        """Send what is queued and stop (blocking: call it off the event loop); one warning
        when spans were lost."""
        try:
            self._provider.shutdown()
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
