"""OTLP trace export bodies as an agent's OpenTelemetry SDK sends them (protobuf and JSON)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@dataclass(frozen=True)
class FakeSpan:
    name: str
    trace_id: str
    span_id: str = field(default_factory=lambda: secrets.token_hex(8))
    parent: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: bool = False
    start_ns: int = 1_764_633_600_000_000_000
    end_ns: int = 1_764_633_600_250_000_000


def traceparent() -> tuple[str, str]:
    """A fresh (traceparent, trace id)."""
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


def protobuf(*spans: FakeSpan, service: str = "otel-agent") -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    kv = resource_spans.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", service
    scope = resource_spans.scope_spans.add()
    for span in spans:
        out = scope.spans.add()
        out.trace_id = bytes.fromhex(span.trace_id)
        out.span_id = bytes.fromhex(span.span_id)
        if span.parent:
            out.parent_span_id = bytes.fromhex(span.parent)
        out.name = span.name
        out.kind = 1
        out.start_time_unix_nano = span.start_ns
        out.end_time_unix_nano = span.end_ns
        out.status.code = 2 if span.error else 1
        for key, value in span.attributes.items():
            attr = out.attributes.add()
            attr.key = key
            if isinstance(value, bool):
                attr.value.bool_value = value
            elif isinstance(value, int):
                attr.value.int_value = value
            elif isinstance(value, float):
                attr.value.double_value = value
            else:
                attr.value.string_value = str(value)
    return bytes(request.SerializeToString())


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # 64-bit integers as strings, per the JSON mapping
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def json_body(*spans: FakeSpan, service: str = "otel-agent") -> bytes:
    payload = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": service}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "test"},
                        "spans": [
                            {
                                "traceId": s.trace_id,
                                "spanId": s.span_id,
                                **({"parentSpanId": s.parent} if s.parent else {}),
                                "name": s.name,
                                "kind": 1,
                                "startTimeUnixNano": str(s.start_ns),
                                "endTimeUnixNano": str(s.end_ns),
                                "status": {"code": 2 if s.error else 1},
                                "attributes": [
                                    {"key": k, "value": _json_value(v)}
                                    for k, v in s.attributes.items()
                                ],
                            }
                            for s in spans
                        ],
                    }
                ],
            }
        ]
    }
    return json.dumps(payload).encode()


def agent_trace(trace_id: str, parent: str | None = None) -> list[FakeSpan]:
    """An ``invoke_agent`` root, one ``chat`` with usage and one ``execute_tool``."""
    root = FakeSpan(
        "invoke_agent rca",
        trace_id,
        parent=parent,
        attributes={"gen_ai.operation.name": "invoke_agent"},
    )
    chat = FakeSpan(
        "chat gpt-4o-mini",
        trace_id,
        parent=root.span_id,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30,
        },
    )
    tool = FakeSpan(
        "execute_tool search_logs",
        trace_id,
        parent=root.span_id,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_logs"},
    )
    return [root, chat, tool]
