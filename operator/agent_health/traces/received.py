"""A trace source over the spans the agent exported to agent-health's own OTLP receiver.

A local run (for agents it starts with ``command``) and a cell's gateway receive OTLP/HTTP
from the agent (``OTEL_EXPORTER_OTLP_ENDPOINT``, docs/agent-protocol.md) and keep each span
with the run whose trace id it carries; this source reads them back, no OpenSearch needed.
What the receiver answers for one run (:data:`SpansReader`) is the receiver's report::

    {"run_id": "...", "trace_id": "...", "spans": [span object, ...], "dropped": 0,
     "rejected": 0}

with span objects as :mod:`agent_health.ledger.otlp` makes them, or ``None`` when there is
no receiver. Spans may land just after the agent answered (an exporter that batches), so
reading waits, at most ``wait_seconds``, until the agent's ``invoke_agent`` span is there or
the count stops changing; with nothing at the end it raises :class:`~.errors.TracesNotFound`.

The traces view asks :meth:`ReceivedSource.present` once, without waiting: when spans of
the run have arrived by the time a test reads ``result.traces``, this source answers its
questions (it is the agent's own account, correlated by trace id); otherwise the other
sources do, and ``source="otel"`` still reads (and waits for) these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_health.traces import errors, records

SpansReader = Callable[[str], Awaitable[Mapping[str, Any] | None]]
"""The receiver's report of one run id (see the module docstring), ``None``: no receiver."""
NAME = "otel"
STATUS_MESSAGE = "otel.status_description"


def to_span(data: Mapping[str, Any]) -> records.Span:
    """A span object of the receiver as a :class:`~records.Span` (epoch milliseconds).

    The receiver checked it (:mod:`agent_health.ledger.otlp`); a time that is not one (a
    span object from elsewhere) is read as unknown, never raised on."""
    start, end = _time(data.get("start_ns")), _time(data.get("end_ns"))
    if end < start:
        end = 0  # an end before the start is no end: no negative durations
    status = data.get("status")
    attributes = dict(data.get("attributes") or {})
    if data.get("status_message"):  # as OTel names it where a backend has no status field
        attributes.setdefault(STATUS_MESSAGE, data["status_message"])
    return records.Span(
        trace_id=str(data["trace_id"]),
        span_id=str(data["span_id"]),
        name=str(data.get("name", "")),
        parent_span_id=data.get("parent_span_id") or None,
        start_ms=start / 1e6 if start else None,
        end_ms=end / 1e6 if end else None,
        status=status if status in ("ok", "error") else "unset",
        attributes=attributes,
        service=data.get("service"),
    )


def _time(value: Any) -> int:
    """Nanoseconds since the epoch, or 0 (unknown) for what is not a time of a span."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**64:
        return value
    return 0


class ReceivedSource:
    """Spans of one run from the OTLP receiver (``name`` ``otel``)."""

    name = NAME

    def __init__(
        self,
        read: SpansReader,
        *,
        where: str = "the OTLP receiver",
        wait_seconds: float = 5.0,
        poll_seconds: float = 0.1,
    ) -> None:
        self._read = read
        self._where = where
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds

    async def present(self, run_id: str) -> bool:
        """Whether spans of ``run_id`` have arrived (no waiting)."""
        report = await self._read(run_id)
        return bool(report and report.get("spans"))

    async def spans(self, run_id: str, traceparent: str | None) -> Sequence[records.Span]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        previous = -1
        while True:
            report = await self._read(run_id)
            if report is None:
                raise errors.TracesNotEnabled(
                    f"spans of run {run_id}: no OTLP receiver was on for this run"
                )
            found = [to_span(s) for s in report.get("spans") or ()]
            if found and (_settled(found) or len(found) == previous):
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                if found:  # still arriving at the deadline: what landed
                    return found
                rejected = report.get("rejected") or 0
                raise errors.TracesNotFound(
                    f"no OTel spans of run {run_id} reached {self._where} within "
                    f"{self.wait_seconds:g} s (does the agent export to "
                    "$OTEL_EXPORTER_OTLP_ENDPOINT, in the trace of the traceparent it was sent?)"
                    + (f"; {rejected} spans naming another run were rejected" if rejected else "")
                )
            previous = len(found)
            await asyncio.sleep(min(self.poll_seconds, remaining))

    async def logs(
        self, run_id: str, traceparent: str | None = None
    ) -> Sequence[records.LogRecord]:
        raise errors.TracesNotEnabled(
            f"logs of run {run_id}: the OTLP receiver takes spans only; read logs from "
            "OpenSearch (traces.opensearch.logs_index) or the gateway's exchanges"
        )


def _settled(spans: list[records.Span]) -> bool:
    """The agent's root span has landed: an exporter sends a parent after its children."""
    ids = {s.span_id for s in spans}
    return any(s.operation == records.INVOKE_AGENT and s.parent_span_id not in ids for s in spans)
