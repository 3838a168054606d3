"""The spans of :mod:`.spans` sent to the OTLP/HTTP receiver, in batches, by the export's
worker thread (:mod:`.export`).

Imported only when export is on. Each record is encoded as it comes (:mod:`.encode`) into
the pending request; the request is POSTed with one ``httpx.Client`` when it holds
:data:`BATCH` spans, and whatever is pending at each of the worker's turns, twice a second —
so spans reach the collector within about half a second of their test's end. No
OpenTelemetry SDK: the records hold every value already, and the SDK's spans and encoder
cost six times what encoding them here does (docs/otel.md gives the figures). A collector
that is down never fails or slows the run:

* a refused connection fails its batch at once (no retries: a refused connection is not a
  transient error here), an answer of HTTP 400 or more fails it, and after a failed batch the
  rest of the run's spans are dropped without another try — the end of the run waits on no
  collector;
* every span lost is counted, with the first reason, for the one warning of
  :meth:`RunExporter.close`.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence

import httpx

from agent_health import tls
from agent_health.otel import encode, records
from agent_health.sdk import otlpconfig

BATCH = 512  # spans per export request at most (the OpenTelemetry SDK's default)


class RunExporter:
    """One run's sending side: the pending request, its client, and what was lost and why."""

    def __init__(self, settings: otlpconfig.Settings, *, version: str = "") -> None:
        self.settings = settings
        self.submitted = 0  # spans handed to :meth:`submit`
        self.sent = 0  # in requests the receiver accepted
        self.failure: str | None = None  # the first failed batch's reason; then all is dropped
        resource = {**settings.resource, "service.name": settings.service_name}
        self._encoder = encode.for_protocol(settings.protocol, resource, version)
        self._pending = 0
        self._headers = {
            **settings.headers,
            "Content-Type": self._encoder.content_type,
            "User-Agent": f"agent-health/{version or 'dev'}",
        }
        if settings.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        # The client's own defaults otherwise (the environment's proxies and CA bundle, as
        # the SDK's exporter honoured them); no redirects, no retries.
        self._client = httpx.Client(timeout=settings.timeout, verify=tls.for_url(settings.endpoint))

    @property
    def lost(self) -> int:
        return self.submitted - self.sent - self._pending

    def submit(self, spans: Sequence[records.SpanRecord]) -> None:
        """Encode ``spans`` into the pending request, sending it each time it fills; never
        raises for the collector (blocking: called on the export's worker thread)."""
        self.submitted += len(spans)
        if self.failure is not None:
            return  # a failed batch: the rest is dropped, not tried
        for span in spans:
            self._encoder.add(span)
            self._pending += 1
            if self._pending >= BATCH:
                self.flush()
                if self.failure is not None:
                    return

    def flush(self) -> None:
        """Send the pending request, if any; a failure is kept, never raised."""
        if not self._pending:
            return
        count, self._pending = self._pending, 0
        body = self._encoder.take()
        if self.failure is not None:
            return
        if self.settings.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        self.failure = self._post(body)
        if self.failure is None:
            self.sent += count

    def _post(self, body: bytes) -> str | None:
        """The reason the receiver did not take ``body``, or ``None`` when it did."""
        try:
            response = self._client.post(
                self.settings.endpoint, content=body, headers=self._headers
            )
        except httpx.ConnectError as err:
            return f"cannot connect: {err.__class__.__name__}"
        except httpx.TimeoutException as err:
            return f"no answer within {self.settings.timeout:g} s: {err.__class__.__name__}"
        except Exception as err:  # any other failure of the client: this batch's reason
            return f"{err.__class__.__name__}: {err}"
        if response.status_code >= 400:
            return f"HTTP {response.status_code} {response.reason_phrase}"
        return None

    def close(self) -> str | None:
        """Send what is pending and stop; the warning when spans were lost, else ``None``."""
        try:
            self.flush()
        finally:
            self._client.close()
        if not self.lost:
            return None
        return (
            f"{self.lost} of {self.submitted} spans dropped "
            f"({self.failure or 'the exporter failed'})"
        )
