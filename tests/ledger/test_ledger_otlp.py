"""OTLP trace bodies read into span objects, and the ledger's ``spans`` record that seals them."""

from __future__ import annotations

import base64
import json

import pytest
from agent_health.ledger import chain, errors, otlp, records
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from support.otlp_bodies import FakeSpan, agent_trace, json_body, protobuf, traceparent


def test_protobuf_and_json_of_the_same_spans_decode_alike() -> None:
    _, trace_id = traceparent()
    spans = agent_trace(trace_id)
    from_proto = otlp.decode(protobuf(*spans), otlp.PROTOBUF).spans
    from_json = otlp.decode(json_body(*spans), otlp.JSON).spans
    assert from_proto == from_json
    assert from_proto[1] == {
        "trace_id": trace_id,
        "span_id": spans[1].span_id,
        "parent_span_id": spans[0].span_id,
        "name": "chat gpt-4o-mini",
        "kind": 1,
        "start_ns": spans[1].start_ns,
        "end_ns": spans[1].end_ns,
        "status": "ok",
        "status_message": None,
        "attributes": {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30,
        },
        "service": "otel-agent",
    }


def test_json_takes_base64_ids_numbers_for_integers_and_nested_values() -> None:
    _, trace_id = traceparent()
    span = {
        "traceId": base64.b64encode(bytes.fromhex(trace_id)).decode(),
        "spanId": "00f067aa0ba902b7",
        "name": "execute_tool x",
        "startTimeUnixNano": 5,
        "endTimeUnixNano": 7.0,
        "status": {"code": 2, "message": "boom"},
        "attributes": [
            {"key": "list", "value": {"arrayValue": {"values": [{"intValue": 1}]}}},
            {
                "key": "map",
                "value": {"kvlistValue": {"values": [{"key": "a", "value": {"boolValue": True}}]}},
            },
        ],
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    [got] = otlp.decode(body, otlp.JSON).spans
    assert got["trace_id"] == trace_id
    assert (got["start_ns"], got["end_ns"]) == (5, 7)
    assert got["status"] == "error"
    assert got["status_message"] == "boom"
    assert got["attributes"] == {"list": [1], "map": {"a": True}}
    assert got["service"] is None
    assert got["parent_span_id"] is None


def test_values_past_the_limits_are_cut_and_the_span_says_so() -> None:
    _, trace_id = traceparent()
    many = {f"k{n}": "v" * 50 for n in range(10)}
    body = protobuf(FakeSpan("x", trace_id, attributes=many))
    limits = otlp.Limits(max_attributes=3, max_value_chars=20)
    [got] = otlp.decode(body, otlp.PROTOBUF, limits).spans
    assert got["truncated"] is True
    assert got["attributes"] == {"k0": "v" * 20, "k1": "v" * 20, "k2": "v" * 20}


def test_more_spans_than_a_body_may_hold_is_too_large() -> None:
    _, trace_id = traceparent()
    with pytest.raises(otlp.TooLarge, match="more than 2 spans"):
        otlp.decode(protobuf(*agent_trace(trace_id)), otlp.PROTOBUF, otlp.Limits(max_spans=2))


@pytest.mark.parametrize(
    ("body", "kind", "says"),
    [
        (b"[1]", otlp.JSON, "not a JSON object"),
        (b"\x0a\x05\x12\x03\x12\x01\x0a", otlp.PROTOBUF, "not a protobuf"),
        (b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}", otlp.JSON, "nested deeper"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"x": NaN}]}]}]}', otlp.JSON, "NaN"),
        (b'{"resourceSpans": [], "n": ' + b"9" * 5000 + b"}", otlp.JSON, "5000 digits"),
    ],
)
def test_what_is_not_otlp_is_an_error_saying_what(body: bytes, kind: str, says: str) -> None:
    with pytest.raises(otlp.OtlpError, match=says):
        otlp.decode(body, kind)


def _one_span(**fields: object) -> bytes:
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "x", **fields}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _nested(levels: int, kind: str) -> dict[str, object]:
    value: dict[str, object] = {"stringValue": "bottom"}
    for _ in range(levels):
        if kind == "kvlist":
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
        else:
            value = {"arrayValue": {"values": [value]}}
    return value


@pytest.mark.parametrize("kind", ["kvlist", "array"])
def test_values_nested_past_the_depth_limit_are_refused_through_key_value_lists_too(
    kind: str,
) -> None:
    """Key-value lists carry the depth as arrays do: 8 levels are read, 9 are not OTLP."""
    deep = _one_span(attributes=[{"key": "v", "value": _nested(9, kind)}])
    with pytest.raises(otlp.OtlpError, match="nested more than 8 deep"):
        otlp.decode(deep, otlp.JSON)
    [kept] = otlp.decode(
        _one_span(attributes=[{"key": "v", "value": _nested(8, kind)}]), otlp.JSON
    ).spans
    assert kept["attributes"]["v"]


def test_a_protobuf_key_value_list_past_the_depth_limit_is_refused() -> None:
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "x"
    value = span.attributes.add()
    value.key = "v"
    inner = value.value
    for _ in range(9):
        kv = inner.kvlist_value.values.add()
        kv.key = "k"
        inner = kv.value
    inner.string_value = "bottom"
    with pytest.raises(otlp.OtlpError, match="nested more than 8 deep"):
        otlp.decode(request.SerializeToString(), otlp.PROTOBUF)


HUGE = "9" * 400


def _attr(key: str, **value: object) -> dict[str, object]:
    return {"attributes": [{"key": key, "value": value}]}


INVALID = [
    ({"spanId": None}, "spanId is missing"),
    ({"spanId": "12"}, "spanId '12' is not 16 hex digits"),
    ({"traceId": "0" * 32}, "traceId is all zeros"),
    ({"startTimeUnixNano": HUGE}, "startTimeUnixNano '9999999999999999999… (402 characters)"),
    ({"startTimeUnixNano": int(HUGE)}, "startTimeUnixNano 99999999999999999999… (400 characters)"),
    ({"startTimeUnixNano": "-5"}, "startTimeUnixNano -5 is out of range"),
    ({"startTimeUnixNano": "20", "endTimeUnixNano": "10"}, "ends (10) before it starts (20)"),
    ({"kind": 99}, "kind 99 is not a SpanKind"),
    (_attr("d", doubleValue="Infinity"), "doubleValue inf is not a finite"),
    (_attr("d", doubleValue="NaN"), "doubleValue nan is not a finite"),
    (_attr("d", doubleValue=int(HUGE)), "is not a number"),
    (_attr("i", intValue=str(2**63)), "intValue 9223372036854775808 is out of range"),
    (_attr("gen_ai.usage.input_tokens", intValue="-40"), "input_tokens -40 is not a count"),
    (_attr("gen_ai.usage.output_tokens", doubleValue=3.5), "output_tokens 3.5 is not a count"),
    (_attr("gen_ai.usage.output_tokens", stringValue="7"), "output_tokens '7' is not a count"),
]


@pytest.mark.parametrize(("fields", "says"), INVALID)
def test_a_span_that_fails_its_checks_is_left_out_and_counted_saying_why(
    fields: dict[str, object], says: str
) -> None:
    _, trace_id = traceparent()
    good = json.loads(json_body(*agent_trace(trace_id)))
    bad = json.loads(_one_span(**fields))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    good["resourceSpans"][0]["scopeSpans"][0]["spans"].insert(1, bad)
    read = otlp.decode(json.dumps(good).encode(), otlp.JSON)
    assert [s["name"] for s in read.spans] == [s.name for s in agent_trace(trace_id)]
    assert read.invalid == 1
    assert read.problem is not None
    assert says in read.problem
    assert read.problem.startswith("resourceSpans[0].scopeSpans[0].spans[1]")


def test_a_protobuf_span_that_fails_its_checks_is_left_out_and_counted() -> None:
    _, trace_id = traceparent()
    spans = [
        *agent_trace(trace_id),
        FakeSpan("inf", trace_id, attributes={"x": float("inf")}),
        FakeSpan("nan", trace_id, attributes={"y": float("nan")}),
        FakeSpan("negative", trace_id, attributes={"gen_ai.usage.input_tokens": -5}),
        FakeSpan("backwards", trace_id, start_ns=20, end_ns=10),
    ]
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(protobuf(*spans))
    short = request.resource_spans[0].scope_spans[0].spans.add()
    short.trace_id, short.span_id, short.name = b"\x01" * 15, b"\x02" * 8, "short"
    read = otlp.decode(request.SerializeToString(), otlp.PROTOBUF)
    assert [s["name"] for s in read.spans] == [s.name for s in agent_trace(trace_id)]
    assert read.invalid == 5
    assert read.problem == "span 'inf'.x.doubleValue inf is not a finite number"


def test_the_answer_names_rejected_spans_in_the_requests_encoding() -> None:
    assert otlp.response(otlp.JSON) == b"{}"
    assert otlp.response(otlp.PROTOBUF) == b""
    partial = json.loads(otlp.response(otlp.JSON, 2, "why"))["partialSuccess"]
    assert partial == {"rejectedSpans": "2", "errorMessage": "why"}
    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(
        otlp.response(otlp.PROTOBUF, 2, "why")
    )
    assert (answer.partial_success.rejected_spans, answer.partial_success.error_message) == (
        2,
        "why",
    )


def _record(**fields: object) -> records.SpansRecord:
    _, trace_id = traceparent()
    spans = otlp.decode(json_body(*agent_trace(trace_id)), otlp.JSON).spans
    base: dict[str, object] = {
        "principal": "target",
        "run_id": "run-1",
        "trace_id": trace_id,
        "content_type": otlp.JSON,
        "request_bytes": 10,
        "request_sha256": "a" * 64,
        "spans": spans,
    }
    return records.SpansRecord.model_validate({**base, **fields})


def test_a_spans_record_is_version_3_and_round_trips_through_a_sealed_chain() -> None:
    spans = _record()
    assert records.to_object(spans)["version"] == 3
    meta = records.CellMeta(test_id="t", repeat=0, run_id="run-1")
    end = records.CellEnd(status="passed")
    sealer = chain.Sealer(b"k" * 32)
    lines = [sealer.line_of(records.to_object(r, with_mac=False)) for r in (meta, spans, end)]
    assert chain.verify(lines, b"k" * 32, complete=True).ok
    back = records.parse_lines(lines)[1]
    assert isinstance(back, records.SpansRecord)
    assert back.spans == spans.spans


def test_a_spans_record_at_an_older_version_or_from_no_principal_is_refused() -> None:
    payload = records.to_object(_record())
    payload["version"] = 2
    with pytest.raises(errors.RecordError, match="spans record field 'version'"):
        records.parse_object(payload, 1)
    with pytest.raises(errors.RecordError, match="not a principal"):
        records.parse_object({**records.to_object(_record()), "principal": "root"}, 1)
