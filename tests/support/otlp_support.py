"""A real OTLP/HTTP receiver on 127.0.0.1 for the export tests: it decodes each protobuf
``ExportTraceServiceRequest`` with opentelemetry-proto, as a collector does, and keeps the
spans as plain dicts (and every body as it came: OTLP/JSON ones are only kept)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2


def value_of(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    if kind is None:
        return None
    return getattr(value, kind)


def attributes_of(items: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


@dataclass
class Receiver:
    """What the receiver was sent: spans, requests, their headers."""

    url: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)
    scopes: list[tuple[str, str]] = field(default_factory=list)  # (name, schema_url)
    resources: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # as sent, inflated
    messages: list[Any] = field(default_factory=list)  # the protobuf requests, decoded
    answer: int = 200  # the status every export is answered with

    async def handle(self, request: web.Request) -> web.Response:
        # aiohttp inflates a gzip body itself (and answers 400 to one that is not gzip).
        body = await request.read()
        self.requests += 1
        self.headers.append(dict(request.headers))
        self.bodies.append(body)
        if self.answer != 200:
            return web.Response(status=self.answer, text="not now")
        if request.content_type == "application/json":
            return web.json_response({})
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.messages.append(message)
        for resource_spans in message.resource_spans:
            self.resources.append(attributes_of(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.scopes.append((scope_spans.scope.name, scope_spans.schema_url))
                self.spans.extend(_span(s) for s in scope_spans.spans)
        answer = trace_service_pb2.ExportTraceServiceResponse()
        return web.Response(body=answer.SerializeToString(), content_type="application/x-protobuf")

    def named(self, prefix: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"].startswith(prefix)]

    def children(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            s
            for s in self.spans
            if s["trace_id"] == span["trace_id"] and s["parent_id"] == span["span_id"]
        ]


def _span(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_id": span.parent_span_id.hex() or None,
        "kind": span.kind,
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "attributes": attributes_of(span.attributes),
        "events": [
            {"name": e.name, "at_ns": e.time_unix_nano, "attributes": attributes_of(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": attributes_of(link.attributes),
            }
            for link in span.links
        ],
        "status": span.status.code,
        "status_message": span.status.message,
    }


@asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    """An OTLP/HTTP receiver on a free loopback port; its ``url`` is the base endpoint."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield receiver
    finally:
        await runner.cleanup()
