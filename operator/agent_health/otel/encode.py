"""Span records (:mod:`.records`) written as the body of an OTLP/HTTP trace export: an
``ExportTraceServiceRequest`` of one resource (``service.name`` and the resource attributes
of the settings) and one instrumentation scope (``agent-health``, the package version and
the schema URL of the pinned conventions).

* :class:`Protobuf` (``http/protobuf``): the request built with opentelemetry-proto's own
  generated messages (the ``otel`` extra), imported when the encoder is made;
* :class:`Json` (``http/json``): the OTLP/JSON mapping — ids in hex, 64-bit integers as
  strings, lowerCamelCase keys, enums as integers — with the standard library alone.

The records already hold every value (ids, times, attributes), so encoding is one pass with
no SDK span in between; what is spent per span is what the export costs the run
(docs/otel.md gives the figures). Each encoder keeps the encoded form of the attribute
pairs it has seen (a run repeats most of them: statuses, files, agents, operation names).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agent_health.otel import conventions as cv
from agent_health.otel import records

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1 import common_pb2

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_KIND = {"internal": 1, "client": 3}  # SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT
_UNSET, _OK, _ERROR = 0, 1, 2  # STATUS_CODE_*
# SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE (the parent, or the linked span, is this process's own)
# with the W3C trace flags every traceparent agent-health sends carries: sampled.
_FLAGS = 0x100 | 0x01
_INT64 = range(-(2**63), 2**63)
_CACHED_CHARS = 256  # longer values (explanations, errors) are seldom repeated: not kept
_CACHED_PAIRS = 8192  # the cache is emptied past this many pairs


class Encoder(Protocol):
    """Spans added one by one, taken as one request body."""

    content_type: str

    def add(self, record: records.SpanRecord) -> None: ...

    def take(self) -> bytes:
        """The request of every span added since the last take (and start a new one)."""
        ...


def for_protocol(protocol: str, resource: Mapping[str, str], version: str) -> Encoder:
    """The encoder of an OTLP/HTTP ``protocol`` (``http/protobuf`` or ``http/json``)."""
    if protocol == "http/json":
        return Json(resource, version)
    return Protobuf(resource, version)


def _cacheable(value: records.AttributeValue) -> bool:
    return not isinstance(value, str) or len(value) <= _CACHED_CHARS


class Protobuf:
    """``application/x-protobuf``: the spans built straight into the request message."""

    content_type = PROTOBUF

    def __init__(self, resource: Mapping[str, str], version: str) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2

        self._common = common_pb2
        self._request_type = trace_service_pb2.ExportTraceServiceRequest
        self._resource = [self._pair(k, v) for k, v in resource.items()]
        self._version = version
        self._pairs: dict[tuple[str, type, records.AttributeValue], common_pb2.KeyValue] = {}
        self._request = self._request_type()
        self._spans = self._start()

    def _start(self) -> Any:
        resource_spans = self._request.resource_spans.add()
        resource_spans.resource.attributes.extend(self._resource)
        scope_spans = resource_spans.scope_spans.add(schema_url=cv.SCHEMA_URL)
        scope_spans.scope.name = cv.SCOPE
        scope_spans.scope.version = self._version
        return scope_spans.spans

    def add(self, record: records.SpanRecord) -> None:
        span = self._spans.add(
            trace_id=record.trace_id.to_bytes(16, "big"),
            span_id=record.span_id.to_bytes(8, "big"),
            name=record.name,
            kind=_KIND[record.kind],
            start_time_unix_nano=record.start_ns,
            end_time_unix_nano=record.end_ns,
            flags=_FLAGS,
        )
        if record.parent_id:
            span.parent_span_id = record.parent_id.to_bytes(8, "big")
        span.attributes.extend(self._attributes(record.attributes))
        for event in record.events:
            span.events.add(
                time_unix_nano=event.at_ns,
                name=event.name,
                attributes=self._attributes(event.attributes),
            )
        for link in record.links:
            span.links.add(
                trace_id=link.trace_id.to_bytes(16, "big"),
                span_id=link.span_id.to_bytes(8, "big"),
                attributes=self._attributes(link.attributes),
                flags=_FLAGS,
            )
        if record.error is not None:
            span.status.code = _ERROR
            span.status.message = record.error
        elif record.ok:
            span.status.code = _OK

    def take(self) -> bytes:
        body = bytes(self._request.SerializeToString())
        self._request = self._request_type()
        self._spans = self._start()
        return body

    def _attributes(self, attributes: records.Attributes) -> list[common_pb2.KeyValue]:
        pairs = self._pairs
        out = []
        for key, value in attributes.items():
            pair = pairs.get((key, type(value), value))
            if pair is None:
                pair = self._pair(key, value)
                if _cacheable(value):
                    if len(pairs) >= _CACHED_PAIRS:
                        pairs.clear()
                    pairs[(key, type(value), value)] = pair
            out.append(pair)
        return out

    def _pair(self, key: str, value: records.AttributeValue) -> common_pb2.KeyValue:
        return self._common.KeyValue(key=key, value=self._value(value))

    def _value(self, value: records.AttributeValue | str) -> common_pb2.AnyValue:
        any_value = self._common.AnyValue
        if isinstance(value, str):
            return any_value(string_value=value)
        if isinstance(value, bool):  # before int: a bool is one
            return any_value(bool_value=value)
        if isinstance(value, int):
            if value in _INT64:
                return any_value(int_value=value)
            return any_value(string_value=str(value))  # no int64 holds it
        if isinstance(value, float):
            return any_value(double_value=value)
        array = self._common.ArrayValue(values=[self._value(v) for v in value])
        return any_value(array_value=array)


class Json:
    """``application/json``: the OTLP/JSON mapping of the same request."""

    content_type = JSON

    def __init__(self, resource: Mapping[str, str], version: str) -> None:
        self._resource = [_json_pair(k, v) for k, v in resource.items()]
        self._version = version
        self._spans: list[dict[str, Any]] = []

    def add(self, record: records.SpanRecord) -> None:
        span: dict[str, Any] = {
            "traceId": f"{record.trace_id:032x}",
            "spanId": f"{record.span_id:016x}",
            "name": record.name,
            "kind": _KIND[record.kind],
            "startTimeUnixNano": str(record.start_ns),
            "endTimeUnixNano": str(record.end_ns),
            "flags": _FLAGS,
        }
        if record.attributes:
            span["attributes"] = _json_attributes(record.attributes)
        if record.parent_id:
            span["parentSpanId"] = f"{record.parent_id:016x}"
        if record.events:
            span["events"] = [
                _with_attributes(
                    {"timeUnixNano": str(event.at_ns), "name": event.name}, event.attributes
                )
                for event in record.events
            ]
        if record.links:
            span["links"] = [
                _with_attributes(
                    {
                        "traceId": f"{link.trace_id:032x}",
                        "spanId": f"{link.span_id:016x}",
                        "flags": _FLAGS,
                    },
                    link.attributes,
                )
                for link in record.links
            ]
        if record.error is not None:
            span["status"] = {"code": _ERROR, "message": record.error}
        elif record.ok:
            span["status"] = {"code": _OK}
        self._spans.append(span)

    def take(self) -> bytes:
        scope = {"name": cv.SCOPE, **({"version": self._version} if self._version else {})}
        request = {
            "resourceSpans": [
                {
                    "resource": {"attributes": self._resource},
                    "scopeSpans": [
                        {"scope": scope, "spans": self._spans, "schemaUrl": cv.SCHEMA_URL}
                    ],
                }
            ]
        }
        self._spans = []
        return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()


def _with_attributes(item: dict[str, Any], attributes: records.Attributes) -> dict[str, Any]:
    if attributes:  # an empty list is the default: left out, as for the span's own
        item["attributes"] = [_json_pair(key, value) for key, value in attributes.items()]
    return item


def _json_attributes(attributes: records.Attributes) -> list[dict[str, Any]]:
    return [_json_pair(key, value) for key, value in attributes.items()]


def _json_pair(key: str, value: records.AttributeValue) -> dict[str, Any]:
    return {"key": key, "value": _json_value(value)}


def _json_value(value: records.AttributeValue | str | Sequence[str]) -> dict[str, Any]:
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        # int64 is a string in the mapping (JSON numbers lose digits past 2**53).
        return {"intValue": str(value)} if value in _INT64 else {"stringValue": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"doubleValue": value}
        # Not JSON numbers: the protobuf JSON mapping's spellings.
        return {
            "doubleValue": "NaN" if math.isnan(value) else f"{'-' if value < 0 else ''}Infinity"
        }
    # An empty list is the default, left out (as protobuf's JSON mapping leaves it out).
    return {"arrayValue": {"values": [_json_value(v) for v in value]} if value else {}}
