"""OTLP trace bodies in protobuf (``application/x-protobuf``), the OpenTelemetry SDKs' default.

Decoded with the ``opentelemetry-proto`` package's own generated messages (the ``otel``
extra) into the span objects :mod:`agent_health.ledger.otlp` describes, within its
:class:`~agent_health.ledger.otlp.Limits` and with its checks; loaded only when a protobuf
body comes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from agent_health.ledger import otlp


def decode(body: bytes, reading: otlp.Reading) -> None:
    """Read the spans of one protobuf export body into ``reading``; :class:`~otlp.OtlpError`
    when it is not one."""
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
    found = []
    for item in _proto_spans(request):
        found.append(item)
        if len(found) > reading.limits.max_spans:
            raise otlp.TooLarge(f"the body has more than {reading.limits.max_spans} spans")
    for span, service in found:
        at = f"span {span.name[:60]!r}"
        try:
            reading.add(otlp.checked(_proto_span(span, at, service, reading.limits), at))
        except otlp.SpanError as err:
            reading.refuse(err)


def _proto_spans(request: Any) -> Iterator[Any]:
    for resource_spans in request.resource_spans:
        service = None
        for kv in resource_spans.resource.attributes:
            if kv.key == "service.name" and kv.value.WhichOneof("value") == "string_value":
                service = kv.value.string_value
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield span, service


def _proto_span(span: Any, at: str, service: str | None, limits: otlp.Limits) -> dict[str, Any]:
    attributes, truncated = _proto_attributes(span.attributes, at, limits, 0)
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


def _proto_attributes(
    items: Any, at: str, limits: otlp.Limits, depth: int
) -> tuple[dict[str, Any], bool]:
    found: dict[str, Any] = {}
    truncated = len(items) > limits.max_attributes
    for kv in list(items)[: limits.max_attributes]:
        value, cut = _proto_value(kv.value, f"{at}.{kv.key[:60]}", limits, depth)
        found[kv.key[: limits.max_value_chars]] = value
        truncated = truncated or cut or len(kv.key) > limits.max_value_chars
    return found, truncated


def _proto_value(value: Any, at: str, limits: otlp.Limits, depth: int) -> tuple[Any, bool]:
    which = value.WhichOneof("value")
    if which is None:
        return None, False
    if depth > limits.max_depth:  # as in JSON: the body is not an export
        raise otlp.OtlpError(f"{at}: values nested more than {limits.max_depth} deep")
    if which == "string_value":
        text: str = value.string_value
        return text[: limits.max_value_chars], len(text) > limits.max_value_chars
    if which == "bool_value":
        return bool(value.bool_value), False
    if which == "int_value":
        return int(value.int_value), False  # an int64: in range by its type
    if which == "double_value":
        return otlp.finite(float(value.double_value), at), False
    if which == "bytes_value":
        text = base64.b64encode(value.bytes_value).decode()
        return text[: limits.max_value_chars], len(text) > limits.max_value_chars
    if which == "array_value":
        items = list(value.array_value.values)
        out, cut = [], len(items) > limits.max_attributes
        for n, item in enumerate(items[: limits.max_attributes]):
            got, c = _proto_value(item, f"{at}[{n}]", limits, depth + 1)
            out.append(got)
            cut = cut or c
        return out, cut
    if which == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values, at, limits, depth + 1)
    return None, False


def _raw_id(raw: bytes, size: int, at: str, optional: bool = False) -> str | None:
    if not raw:
        if optional:
            return None
        raise otlp.SpanError(f"{at} is missing")
    if len(raw) != size:
        raise otlp.SpanError(f"{at} has {len(raw)} bytes, not {size}")
    return otlp.nonzero(raw.hex(), at, optional)


def response(rejected: int, message: str) -> bytes:
    """An ``ExportTraceServiceResponse`` whose ``partial_success`` names ``rejected`` spans."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    answer = trace_service_pb2.ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = rejected
    answer.partial_success.error_message = message
    return bytes(answer.SerializeToString())
