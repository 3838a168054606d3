"""OTLP/HTTP trace bodies (``POST /v1/traces``) read into plain span objects.

An agent exports its OpenTelemetry spans as an ``ExportTraceServiceRequest``, protobuf
(``application/x-protobuf``, decoded by :mod:`~agent_health.ledger.otlpproto` with the
``opentelemetry-proto`` package: the ``otel`` extra) or JSON (``application/json``, the OTLP
JSON mapping, read here without it: trace and span ids are hex strings, 64-bit integers may
be strings, enums are integers, keys are lowerCamelCase). Either becomes the same list of
span objects, JSON data that a ledger ``spans`` record seals and the traces view reads::

    {"trace_id": "4bf9…", "span_id": "00f0…", "parent_span_id": "…" | None,
     "name": "chat gpt-4o", "kind": 3, "start_ns": 1718…, "end_ns": 1718…,
     "status": "ok" | "error" | "unset", "status_message": "…" | None,
     "attributes": {"gen_ai.operation.name": "chat", …}, "service": "rca-agent" | None}

Everything is bounded (:class:`Limits`): the spans of one body, the attributes of a span and
the length of a string value; a value cut to its limit marks its span ``"truncated": true``.
Span events and links are not kept. A body that is not OTLP raises :class:`OtlpError` with
what is wrong, which the receiver answers 400.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
STATUS = {0: "unset", 1: "ok", 2: "error"}


class OtlpError(ValueError):
    """A body that is not an OTLP trace export, with what is wrong with it."""


class TooLarge(OtlpError):
    """A body with more spans than the receiver takes."""


@dataclass(frozen=True)
class Limits:
    """How much of an export is read: spans per body, attributes per span, string length."""

    max_spans: int = 10_000
    max_attributes: int = 128
    max_value_chars: int = 8192


def media_type(content_type: str | None) -> str | None:
    """``application/x-protobuf`` or ``application/json`` (parameters ignored), else None."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind if kind in (PROTOBUF, JSON) else None


def decode(body: bytes, content_type: str, limits: Limits | None = None) -> list[dict[str, Any]]:
    """The spans of one export body of media type ``content_type`` (see :func:`media_type`)."""
    limits = limits or Limits()
    if content_type == JSON:
        return _from_json(body, limits)
    if content_type == PROTOBUF:
        from agent_health.ledger import otlpproto  # and the otel extra: only for protobuf

        return otlpproto.decode(body, limits)
    raise OtlpError(f"Content-Type {content_type!r} is not {PROTOBUF} or {JSON}")


def response(content_type: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse`` in the request's encoding; ``rejected`` spans (and
    why) go in its ``partial_success``, as the OTLP specification asks."""
    if content_type == JSON:
        if not rejected:
            return b"{}"
        payload = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}
        return json.dumps(payload).encode()
    if not rejected:
        return b""  # an empty message
    from agent_health.ledger import otlpproto

    return otlpproto.response(rejected, message)


# --- JSON --------------------------------------------------------------------------------


def _from_json(body: bytes, limits: Limits) -> list[dict[str, Any]]:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise OtlpError(f"the body is not JSON: {err}") from err
    if not isinstance(payload, dict):
        raise OtlpError("the body is not a JSON object (an ExportTraceServiceRequest)")
    spans: list[dict[str, Any]] = []
    for r, resource_spans in enumerate(_list(payload, "resourceSpans", "resource_spans")):
        where = f"resourceSpans[{r}]"
        resource = _object(resource_spans, where).get("resource") or {}
        resource_attrs = _attributes(_object(resource, f"{where}.resource"), where, limits)[0]
        service = resource_attrs.get("service.name")
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans")):
            for n, span in enumerate(_list(_object(scope_spans, where), "spans")):
                at = f"{where}.scopeSpans[{s}].spans[{n}]"
                spans.append(_json_span(_object(span, at), at, service, limits))
                if len(spans) > limits.max_spans:
                    raise TooLarge(f"the body has more than {limits.max_spans} spans")
    return spans


def _json_span(span: Mapping[str, Any], at: str, service: Any, limits: Limits) -> dict[str, Any]:
    attributes, truncated = _attributes(span, at, limits)
    status = span.get("status") or {}
    code = _int(_object(status, f"{at}.status").get("code", 0), f"{at}.status.code")
    message = status.get("message") or None
    name = span.get("name", "")
    if not isinstance(name, str):
        raise OtlpError(f"{at}.name is not a string")
    if len(name) > limits.max_value_chars:
        name, truncated = name[: limits.max_value_chars], True
    out: dict[str, Any] = {
        "trace_id": _id(span.get("traceId", span.get("trace_id")), 16, f"{at}.traceId"),
        "span_id": _id(span.get("spanId", span.get("span_id")), 8, f"{at}.spanId"),
        "parent_span_id": _id(
            span.get("parentSpanId", span.get("parent_span_id")), 8, f"{at}.parentSpanId", True
        ),
        "name": name,
        "kind": _int(span.get("kind", 0), f"{at}.kind"),
        "start_ns": _int(span.get("startTimeUnixNano", 0), f"{at}.startTimeUnixNano"),
        "end_ns": _int(span.get("endTimeUnixNano", 0), f"{at}.endTimeUnixNano"),
        "status": STATUS.get(code, "unset"),
        "status_message": str(message)[: limits.max_value_chars] if message else None,
        "attributes": attributes,
        "service": service if isinstance(service, str) else None,
    }
    if truncated:
        out["truncated"] = True
    return out


def _attributes(holder: Mapping[str, Any], at: str, limits: Limits) -> tuple[dict[str, Any], bool]:
    found: dict[str, Any] = {}
    truncated = False
    for i, item in enumerate(_list(holder, "attributes")):
        where = f"{at}.attributes[{i}]"
        key = _object(item, where).get("key")
        if not isinstance(key, str):
            raise OtlpError(f"{where}.key is not a string")
        if len(found) >= limits.max_attributes:
            truncated = True
            break
        value, cut = _any_value(item.get("value"), where, limits, 0)
        found[key[: limits.max_value_chars]] = value
        truncated = truncated or cut or len(key) > limits.max_value_chars
    return found, truncated


def _any_value(value: Any, at: str, limits: Limits, depth: int) -> tuple[Any, bool]:
    """An OTLP ``AnyValue`` as JSON data, and whether it was cut to the limits."""
    if value is None:
        return None, False
    if depth > 8:
        raise OtlpError(f"{at}: values nested more than 8 deep")
    if not isinstance(value, dict):
        raise OtlpError(f"{at}.value is not an AnyValue object")
    if "stringValue" in value:
        return _text(value["stringValue"], at, limits)
    if "boolValue" in value:
        return bool(value["boolValue"]), False
    if "intValue" in value:
        return _int(value["intValue"], f"{at}.intValue"), False
    if "doubleValue" in value:
        try:
            return float(value["doubleValue"]), False
        except (TypeError, ValueError) as err:
            raise OtlpError(f"{at}.doubleValue is not a number") from err
    if "bytesValue" in value:
        return _text(str(value["bytesValue"]), at, limits)
    if "arrayValue" in value:
        items = _list(_object(value["arrayValue"], at), "values")
        out, cut = [], len(items) > limits.max_attributes
        for n, item in enumerate(items[: limits.max_attributes]):
            got, c = _any_value(item, f"{at}[{n}]", limits, depth + 1)
            out.append(got)
            cut = cut or c
        return out, cut
    if "kvlistValue" in value:
        kv, cut = _attributes(
            {"attributes": _list(_object(value["kvlistValue"], at), "values")}, at, limits
        )
        return kv, cut
    return None, False


def _text(value: Any, at: str, limits: Limits) -> tuple[str, bool]:
    if not isinstance(value, str):
        raise OtlpError(f"{at}.stringValue is not a string")
    if len(value) > limits.max_value_chars:
        return value[: limits.max_value_chars], True
    return value, False


def _id(value: Any, size: int, at: str, optional: bool = False) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex: hex as the OTLP JSON
    mapping says, or base64 as protobuf's own JSON mapping writes it."""
    if value in (None, ""):
        if optional:
            return None
        raise OtlpError(f"{at} is missing")
    if not isinstance(value, str):
        raise OtlpError(f"{at} is not a string")
    if len(value) == size * 2:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
        if len(raw) == size:
            return nonzero(raw.hex(), at, optional)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != size:
        raise OtlpError(f"{at} {value[:40]!r} is not {size * 2} hex digits")
    return nonzero(raw.hex(), at, optional)


def nonzero(hexed: str, at: str, optional: bool) -> str | None:
    """``hexed``, an id; an all-zero id is invalid (``None`` where the id is optional)."""
    if hexed.strip("0"):
        return hexed
    if optional:
        return None
    raise OtlpError(f"{at} is all zeros (an invalid id)")


def _int(value: Any, at: str) -> int:
    if isinstance(value, bool):
        raise OtlpError(f"{at} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise OtlpError(f"{at} {value!r} is not an integer")


def _object(value: Any, at: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise OtlpError(f"{at} is not a JSON object")
    return value


def _list(holder: Any, *keys: str) -> list[Any]:
    if not isinstance(holder, dict):
        raise OtlpError(f"expected a JSON object with {keys[0]!r}")
    for key in keys:
        if key in holder:
            value = holder[key]
            if value is None:
                return []
            if not isinstance(value, list):
                raise OtlpError(f"{key!r} is not a list")
            return value
    return []
