"""OTLP trace bodies in protobuf (``application/x-protobuf``), the OpenTelemetry SDKs' default.

Decoded with the ``opentelemetry-proto`` package's own generated messages (the ``otel``
extra) into the span objects :mod:`agent_health.ledger.otlp` describes, within its
:class:`~agent_health.ledger.otlp.Limits`; loaded only when a protobuf body comes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from agent_health.ledger import otlp


def decode(body: bytes, limits: otlp.Limits) -> list[dict[str, Any]]:
    """The spans of one protobuf export body; :class:`~otlp.OtlpError` when it is not one."""
    try:
        from google.protobuf import message
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError as err:  # the otlp extra (or otel, which holds it)
        raise otlp.OtlpError(
            "protobuf OTLP needs the otlp extra (pip install 'agent-health[otlp]'); "
            f"or export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json ({err})"
        ) from err
    request = trace_service_pb2.ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except message.DecodeError as err:
        raise otlp.OtlpError(
            f"the body is not a protobuf ExportTraceServiceRequest: {err}"
        ) from err
    spans = []
    for item in _proto_spans(request):
        spans.append(item)
        if len(spans) > limits.max_spans:
            raise otlp.TooLarge(f"the body has more than {limits.max_spans} spans")
    return [_proto_span(span, service, limits) for span, service in spans]


def _proto_spans(request: Any) -> Iterator[Any]:
    for resource_spans in request.resource_spans:
        service = None
        for kv in resource_spans.resource.attributes:
            if kv.key == "service.name" and kv.value.WhichOneof("value") == "string_value":
                service = kv.value.string_value
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield span, service


def _proto_span(span: Any, service: str | None, limits: otlp.Limits) -> dict[str, Any]:
    at = f"span {span.name[:60]!r}"
    attributes, truncated = _proto_attributes(span.attributes, at, limits)
    name = span.name
    if len(name) > limits.max_value_chars:
        name, truncated = name[: limits.max_value_chars], True
    out: dict[str, Any] = {
        "trace_id": _raw_id(span.trace_id, 16, f"{at} trace_id"),
        "span_id": _raw_id(span.span_id, 8, f"{at} span_id"),
        "parent_span_id": _raw_id(span.parent_span_id, 8, f"{at} parent_span_id", True),
        "name": name,
        "kind": int(span.kind),
        "start_ns": int(span.start_time_unix_nano),
        "end_ns": int(span.end_time_unix_nano),
        "status": otlp.STATUS.get(int(span.status.code), "unset"),
        "status_message": span.status.message[: limits.max_value_chars] or None,
        "attributes": attributes,
        "service": service,
    }
    if truncated:
        out["truncated"] = True
    return out


def _proto_attributes(items: Any, at: str, limits: otlp.Limits) -> tuple[dict[str, Any], bool]:
    found: dict[str, Any] = {}
    truncated = len(items) > limits.max_attributes
    for kv in list(items)[: limits.max_attributes]:
        value, cut = _proto_value(kv.value, limits, 0)
        found[kv.key[: limits.max_value_chars]] = value
        truncated = truncated or cut or len(kv.key) > limits.max_value_chars
    return found, truncated


def _proto_value(value: Any, limits: otlp.Limits, depth: int) -> tuple[Any, bool]:
    which = value.WhichOneof("value")
    if which is None or depth > 8:
        return None, depth > 8
    if which == "string_value":
        text: str = value.string_value
        return text[: limits.max_value_chars], len(text) > limits.max_value_chars
    if which == "bool_value":
        return bool(value.bool_value), False
    if which == "int_value":
        return int(value.int_value), False
    if which == "double_value":
        return float(value.double_value), False
    if which == "bytes_value":
        text = base64.b64encode(value.bytes_value).decode()
        return text[: limits.max_value_chars], len(text) > limits.max_value_chars
    if which == "array_value":
        items = list(value.array_value.values)
        out, cut = [], len(items) > limits.max_attributes
        for item in items[: limits.max_attributes]:
            got, c = _proto_value(item, limits, depth + 1)
            out.append(got)
            cut = cut or c
        return out, cut
    if which == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values, "kvlist", limits)
    return None, False


def _raw_id(raw: bytes, size: int, at: str, optional: bool = False) -> str | None:
    if not raw:
        if optional:
            return None
        raise otlp.OtlpError(f"{at} is missing")
    if len(raw) != size:
        raise otlp.OtlpError(f"{at} has {len(raw)} bytes, not {size}")
    return otlp.nonzero(raw.hex(), at, optional)


def response(rejected: int, message: str) -> bytes:
    """An ``ExportTraceServiceResponse`` whose ``partial_success`` names ``rejected`` spans."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    answer = trace_service_pb2.ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = rejected
    answer.partial_success.error_message = message
    return bytes(answer.SerializeToString())
