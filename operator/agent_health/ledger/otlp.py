"""OTLP/HTTP trace bodies (``POST /v1/traces``) read into plain span objects.

An agent exports its OpenTelemetry spans as an ``ExportTraceServiceRequest``, protobuf
(``application/x-protobuf``, decoded with the ``opentelemetry-proto`` package's generated
messages — the ``otel`` extra, imported only when such a body comes) or JSON (``application/json``,
the OTLP JSON mapping, read here without it: trace and span ids are hex strings, 64-bit integers may
be strings, enums are integers, keys are lowerCamelCase). Either becomes the same list of
span objects, JSON data that a ledger ``spans`` record seals and the traces view reads::

    {"trace_id": "4bf9…", "span_id": "00f0…", "parent_span_id": "…" | None,
     "name": "chat gpt-4o", "kind": 3, "start_ns": 1718…, "end_ns": 1718…,
     "status": "ok" | "error" | "unset", "status_message": "…" | None,
     "attributes": {"gen_ai.operation.name": "chat", …}, "service": "rca-agent" | None}

Everything is bounded (:class:`Limits`): the spans of one body, the attributes of a span, the
length of a string value and how deep values nest; a value cut to its limit marks its span
``"truncated": true``. Span events and links are not kept.

The agent sending them may be hostile, so each span is checked as it is read, and one that
fails is left out and counted (:attr:`Export.invalid`, with why), never kept for a run to
trip over: its trace and span ids must be there, of the right size and not all zeros; its
times ``0 ≤ t < 2^64`` nanoseconds, its end not before its start; its kind a SpanKind;
every integer within 64 bits, every double finite; and a token count
(``gen_ai.usage.*tokens``) a non-negative integer. A body that is not OTLP at all — not
JSON (or JSON that nests past :data:`MAX_JSON_DEPTH`, holds ``NaN`` or an integer of
thousands of digits, quoted or not), not a protobuf export, not of that shape, a value
nested deeper than :attr:`Limits.max_depth` (key-value lists count as arrays do) — raises
:class:`OtlpError` with what is wrong, which the receiver answers 400.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_health.ledger import strictjson

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
STATUS = {0: "unset", 1: "ok", 2: "error"}
SPAN_KINDS = range(6)
"""``SPAN_KIND_UNSPECIFIED`` (0) to ``SPAN_KIND_CONSUMER`` (5)."""
MAX_TIME = 2**64
"""Span times are ``fixed64`` nanoseconds: below this."""
INT64 = range(-(2**63), 2**63)
"""An ``intValue`` (and every other integer of a span) is an int64."""
INT32 = range(-(2**31), 2**31)
USAGE_PREFIX = "gen_ai.usage."
"""Attributes under it ending in ``tokens`` are counts (GenAI semantic conventions)."""
MAX_JSON_DEPTH = strictjson.FAST_DEPTH
"""How deep an OTLP/JSON body may nest (a span's value at :attr:`Limits.max_depth` sits about
45 levels down): the depth pydantic-core's parser reads at full speed — a lower bound would
read every body the slow way (four times slower on a 4 MiB export)."""


class OtlpError(ValueError):
    """A body that is not an OTLP trace export, with what is wrong with it."""


class TooLarge(OtlpError):
    """A body with more spans than the receiver takes."""


class SpanError(OtlpError):
    """One span that fails its checks: left out of the export and counted."""


@dataclass(frozen=True)
class Limits:
    """How much of an export is read: spans per body, attributes per span, string length,
    and how deep an attribute's value may nest (arrays and key-value lists alike)."""

    max_spans: int = 10_000
    max_attributes: int = 128
    max_value_chars: int = 8192
    max_depth: int = 8


@dataclass(frozen=True)
class Export:
    """What one export body held: the spans that passed their checks, and how many did not
    (with why the first of them failed)."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    invalid: int = 0
    problem: str | None = None


class Reading:
    """The spans of one body as they are read (by either encoding's decoder): the ones that
    passed their checks, and the count of those that did not."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.spans: list[dict[str, Any]] = []
        self.invalid = 0
        self.problem: str | None = None

    def add(self, span: dict[str, Any]) -> None:
        self.spans.append(span)

    def refuse(self, err: SpanError) -> None:
        self.invalid += 1
        self.problem = self.problem or str(err)

    def count(self) -> None:
        if len(self.spans) + self.invalid > self.limits.max_spans:
            raise TooLarge(f"the body has more than {self.limits.max_spans} spans")

    def export(self) -> Export:
        return Export(self.spans, self.invalid, self.problem)


def media_type(content_type: str | None) -> str | None:
    """``application/x-protobuf`` or ``application/json`` (parameters ignored), else None."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind if kind in (PROTOBUF, JSON) else None


def decode(body: bytes, content_type: str, limits: Limits | None = None) -> Export:
    """The spans of one export body of media type ``content_type`` (see :func:`media_type`),
    each checked (see the module docstring)."""
    reading = Reading(limits or Limits())
    if content_type == JSON:
        _from_json(body, reading)
    elif content_type == PROTOBUF:
        _from_protobuf(body, reading)  # and the otel extra: only for protobuf
    else:
        raise OtlpError(f"Content-Type {content_type!r} is not {PROTOBUF} or {JSON}")
    return reading.export()


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
    return _protobuf_response(rejected, message)


# --- the checks both encodings share -------------------------------------------------------


def checked(span: dict[str, Any], at: str) -> dict[str, Any]:
    """``span`` (a span object) if it passes the checks no encoding makes for us: its times,
    its kind and its token counts; else :class:`SpanError` saying which failed where."""
    start, end = span["start_ns"], span["end_ns"]
    for name, value in (("startTimeUnixNano", start), ("endTimeUnixNano", end)):
        if not 0 <= value < MAX_TIME:
            raise SpanError(f"{at}.{name} {_shown(value)} is not a time (0 to 2^64 - 1 ns)")
    if start and end and end < start:
        raise SpanError(f"{at} ends ({end}) before it starts ({start})")
    if span["kind"] not in SPAN_KINDS:
        raise SpanError(f"{at}.kind {_shown(span['kind'])} is not a SpanKind (0 to 5)")
    for key, value in span["attributes"].items():
        if key.startswith(USAGE_PREFIX) and key.endswith("tokens") and not _count(value):
            raise SpanError(
                f"{at}: attribute {key} {_shown(value)} is not a count (an integer 0 or more)"
            )
    return span


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def finite(value: float, at: str) -> float:
    """``value``, a double of a span, if it is finite; else :class:`SpanError`."""
    if not math.isfinite(value):
        raise SpanError(f"{at}.doubleValue {value} is not a finite number")
    return value


def bounded(value: int, at: str, within: range = INT64) -> int:
    """``value``, an integer of a span, if it is ``within`` range; else :class:`SpanError`."""
    if value not in within:
        raise SpanError(f"{at} {_shown(value)} is out of range")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}… ({len(text)} characters)"


# --- JSON --------------------------------------------------------------------------------


def _from_json(body: bytes, reading: Reading) -> None:
    try:
        payload = strictjson.loads(body, max_depth=MAX_JSON_DEPTH)
    except (ValueError, UnicodeDecodeError) as err:
        raise OtlpError(f"the body is not JSON an export can hold: {err}") from err
    if not isinstance(payload, dict):
        raise OtlpError("the body is not a JSON object (an ExportTraceServiceRequest)")
    limits = reading.limits
    for r, resource_spans in enumerate(_list(payload, "resourceSpans", "resource_spans")):
        where = f"resourceSpans[{r}]"
        resource = _object(resource_spans, where).get("resource") or {}
        try:
            resource_attrs = _attributes(_object(resource, f"{where}.resource"), where, limits)[0]
        except SpanError as err:  # the resource is no span: its export is malformed
            raise OtlpError(str(err)) from err
        service = resource_attrs.get("service.name")
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", "scope_spans")):
            for n, span in enumerate(_list(_object(scope_spans, where), "spans")):
                at = f"{where}.scopeSpans[{s}].spans[{n}]"
                try:
                    reading.add(checked(_json_span(span, at, service, limits), at))
                except SpanError as err:
                    reading.refuse(err)
                reading.count()


def _json_span(span: Any, at: str, service: Any, limits: Limits) -> dict[str, Any]:
    if not isinstance(span, dict):
        raise SpanError(f"{at} is not a JSON object")
    attributes, truncated = _attributes(span, at, limits)
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise SpanError(f"{at}.status is not a JSON object")
    code = _int(status.get("code", 0), f"{at}.status.code", INT32)
    message = status.get("message") or None
    name = span.get("name", "")
    if not isinstance(name, str):
        raise SpanError(f"{at}.name is not a string")
    if len(name) > limits.max_value_chars:
        name, truncated = name[: limits.max_value_chars], True
    out: dict[str, Any] = {
        "trace_id": _id(span.get("traceId", span.get("trace_id")), 16, f"{at}.traceId"),
        "span_id": _id(span.get("spanId", span.get("span_id")), 8, f"{at}.spanId"),
        "parent_span_id": _id(
            span.get("parentSpanId", span.get("parent_span_id")), 8, f"{at}.parentSpanId", True
        ),
        "name": name,
        "kind": _int(span.get("kind", 0), f"{at}.kind", INT32),
        "start_ns": _int(span.get("startTimeUnixNano", 0), f"{at}.startTimeUnixNano", _TIMES),
        "end_ns": _int(span.get("endTimeUnixNano", 0), f"{at}.endTimeUnixNano", _TIMES),
        "status": STATUS.get(code, "unset"),
        "status_message": str(message)[: limits.max_value_chars] if message else None,
        "attributes": attributes,
        "service": service if isinstance(service, str) else None,
    }
    if truncated:
        out["truncated"] = True
    return out


_TIMES = range(MAX_TIME)


def _attributes(
    holder: Mapping[str, Any], at: str, limits: Limits, depth: int = 0
) -> tuple[dict[str, Any], bool]:
    """The attributes of ``holder`` (a span, a resource, or a key-value list ``depth``
    values down), and whether any was cut to the limits."""
    found: dict[str, Any] = {}
    truncated = False
    for i, item in enumerate(_list(holder, "attributes", at=at)):
        where = f"{at}.attributes[{i}]"
        if not isinstance(item, dict):
            raise SpanError(f"{where} is not a JSON object")
        key = item.get("key")
        if not isinstance(key, str):
            raise SpanError(f"{where}.key is not a string")
        if len(found) >= limits.max_attributes:
            truncated = True
            break
        value, cut = _any_value(item.get("value"), where, limits, depth)
        found[key[: limits.max_value_chars]] = value
        truncated = truncated or cut or len(key) > limits.max_value_chars
    return found, truncated


def _any_value(value: Any, at: str, limits: Limits, depth: int) -> tuple[Any, bool]:
    """An OTLP ``AnyValue`` as JSON data, and whether it was cut to the limits."""
    if value is None:
        return None, False
    if depth > limits.max_depth:  # no SDK nests so: the body is not an export
        raise OtlpError(f"{at}: values nested more than {limits.max_depth} deep")
    if not isinstance(value, dict):
        raise SpanError(f"{at}.value is not an AnyValue object")
    if "stringValue" in value:
        return _text(value["stringValue"], at, limits)
    if "boolValue" in value:
        return bool(value["boolValue"]), False
    if "intValue" in value:
        return _int(value["intValue"], f"{at}.intValue", INT64), False
    if "doubleValue" in value:
        number = value["doubleValue"]
        if isinstance(number, bool) or not isinstance(number, int | float | str):
            raise SpanError(f"{at}.doubleValue is not a number")
        try:  # the JSON mapping writes NaN and the infinities as strings: refused below
            double = float(number)
        except (ValueError, OverflowError) as err:  # OverflowError: an int past any float
            raise SpanError(f"{at}.doubleValue {_shown(number)} is not a number") from err
        return finite(double, at), False
    if "bytesValue" in value:
        return _text(str(value["bytesValue"]), at, limits)
    if "arrayValue" in value:
        items = _list(_holder(value["arrayValue"], at), "values", at=at)
        out, cut = [], len(items) > limits.max_attributes
        for n, item in enumerate(items[: limits.max_attributes]):
            got, c = _any_value(item, f"{at}[{n}]", limits, depth + 1)
            out.append(got)
            cut = cut or c
        return out, cut
    if "kvlistValue" in value:
        values = _list(_holder(value["kvlistValue"], at), "values", at=at)
        return _attributes({"attributes": values}, at, limits, depth + 1)
    return None, False


def _text(value: Any, at: str, limits: Limits) -> tuple[str, bool]:
    if not isinstance(value, str):
        raise SpanError(f"{at}.stringValue is not a string")
    if len(value) > limits.max_value_chars:
        return value[: limits.max_value_chars], True
    return value, False


def _id(value: Any, size: int, at: str, optional: bool = False) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex: hex as the OTLP JSON
    mapping says, or base64 as protobuf's own JSON mapping writes it."""
    if value in (None, ""):
        if optional:
            return None
        raise SpanError(f"{at} is missing")
    if not isinstance(value, str):
        raise SpanError(f"{at} is not a string")
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
        raise SpanError(f"{at} {value[:40]!r} is not {size * 2} hex digits")
    return nonzero(raw.hex(), at, optional)


def nonzero(hexed: str, at: str, optional: bool) -> str | None:
    """``hexed``, an id; an all-zero id is invalid (``None`` where the id is optional)."""
    if hexed.strip("0"):
        return hexed
    if optional:
        return None
    raise SpanError(f"{at} is all zeros (an invalid id)")


_MAX_DIGITS = 20  # 2^64 has 20 digits: a longer string is out of range without reading it
PARSER_DIGITS = 4300
"""Digits of an integer the JSON parser reads (Python's own bound); a longer one is refused
with the body, unquoted or quoted alike."""


def _int(value: Any, at: str, within: range) -> int:
    """An integer field: a JSON number or, as the mapping writes 64-bit ones, a string of
    digits; within ``within`` (else :class:`SpanError`, never a huge int read whole)."""
    if isinstance(value, bool):
        raise SpanError(f"{at} is not an integer")
    if isinstance(value, int):
        return bounded(value, at, within)
    if isinstance(value, str):
        digits = value[1:] if value[:1] == "-" else value
        if digits.isascii() and digits.isdigit():
            if len(digits) > PARSER_DIGITS:
                raise OtlpError(f"{at} is an integer of {len(digits)} digits: not an export")
            if len(digits.lstrip("0")) > _MAX_DIGITS:
                raise SpanError(f"{at} {_shown(value)} is out of range")
            return bounded(int(value), at, within)
    if isinstance(value, float) and value.is_integer():
        return bounded(int(value), at, within)
    raise SpanError(f"{at} {_shown(value)} is not an integer")


def _holder(value: Any, at: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SpanError(f"{at} is not a JSON object")
    return value


def _object(value: Any, at: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise OtlpError(f"{at} is not a JSON object")
    return value


def _list(holder: Any, *keys: str, at: str | None = None) -> list[Any]:
    """The list under the first of ``keys`` in ``holder``; inside a span (``at`` given) a
    wrong shape is that span's fault (:class:`SpanError`), elsewhere the body's."""
    error = OtlpError if at is None else SpanError
    if not isinstance(holder, dict):
        raise error(f"expected a JSON object with {keys[0]!r}")
    for key in keys:
        if key in holder:
            value = holder[key]
            if value is None:
                return []
            if not isinstance(value, list):
                raise error(f"{at + '.' if at else ''}{key!r} is not a list")
            return value
    return []


# --- protobuf (application/x-protobuf), the OpenTelemetry SDKs' default ---------------------


def _from_protobuf(body: bytes, reading: Reading) -> None:
    """Read the spans of one protobuf export body into ``reading``; :class:`OtlpError` when it
    is not one. The ``opentelemetry-proto`` package's own generated messages decode it (the
    ``otel`` extra, imported only when a protobuf body comes)."""
    try:
        from google.protobuf import message
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError as err:  # the otlp extra (or otel, which holds it)
        raise OtlpError(
            "protobuf OTLP needs the otlp extra (pip install 'agent-health[otlp]'); "
            f"or export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json ({err})"
        ) from err
    request = trace_service_pb2.ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except message.DecodeError as err:
        raise OtlpError(f"the body is not a protobuf ExportTraceServiceRequest: {err}") from err
    found = []
    for item in _proto_spans(request):
        found.append(item)
        if len(found) > reading.limits.max_spans:
            raise TooLarge(f"the body has more than {reading.limits.max_spans} spans")
    for span, service in found:
        at = f"span {span.name[:60]!r}"
        try:
            reading.add(checked(_proto_span(span, at, service, reading.limits), at))
        except SpanError as err:
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


def _proto_span(span: Any, at: str, service: str | None, limits: Limits) -> dict[str, Any]:
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
        "status": STATUS.get(int(span.status.code), "unset"),
        "status_message": span.status.message[: limits.max_value_chars] or None,
        "attributes": attributes,
        "service": service,
    }
    if truncated:
        out["truncated"] = True
    return out


def _proto_attributes(
    items: Any, at: str, limits: Limits, depth: int
) -> tuple[dict[str, Any], bool]:
    found: dict[str, Any] = {}
    truncated = len(items) > limits.max_attributes
    for kv in list(items)[: limits.max_attributes]:
        value, cut = _proto_value(kv.value, f"{at}.{kv.key[:60]}", limits, depth)
        found[kv.key[: limits.max_value_chars]] = value
        truncated = truncated or cut or len(kv.key) > limits.max_value_chars
    return found, truncated


def _proto_value(value: Any, at: str, limits: Limits, depth: int) -> tuple[Any, bool]:
    which = value.WhichOneof("value")
    if which is None:
        return None, False
    if depth > limits.max_depth:  # as in JSON: the body is not an export
        raise OtlpError(f"{at}: values nested more than {limits.max_depth} deep")
    if which == "string_value":
        text: str = value.string_value
        return text[: limits.max_value_chars], len(text) > limits.max_value_chars
    if which == "bool_value":
        return bool(value.bool_value), False
    if which == "int_value":
        return int(value.int_value), False  # an int64: in range by its type
    if which == "double_value":
        return finite(float(value.double_value), at), False
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
        raise SpanError(f"{at} is missing")
    if len(raw) != size:
        raise SpanError(f"{at} has {len(raw)} bytes, not {size}")
    return nonzero(raw.hex(), at, optional)


def _protobuf_response(rejected: int, message: str) -> bytes:
    """An ``ExportTraceServiceResponse`` whose ``partial_success`` names ``rejected`` spans."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    answer = trace_service_pb2.ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = rejected
    answer.partial_success.error_message = message
    return bytes(answer.SerializeToString())
