"""OTLP trace bodies read into span objects, and the ledger's ``spans`` record that seals them."""

from __future__ import annotations

import base64
import json

import pytest
from agent_health.ledger import chain, errors, otlp, records
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from otlp_bodies import FakeSpan, agent_trace, json_body, protobuf, traceparent


def test_protobuf_and_json_of_the_same_spans_decode_alike() -> None:
    _, trace_id = traceparent()
    spans = agent_trace(trace_id)
    from_proto = otlp.decode(protobuf(*spans), otlp.PROTOBUF)
    from_json = otlp.decode(json_body(*spans), otlp.JSON)
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
    [got] = otlp.decode(body, otlp.JSON)
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
    [got] = otlp.decode(body, otlp.PROTOBUF, otlp.Limits(max_attributes=3, max_value_chars=20))
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
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "00f067aa0ba902b7"}]}]}]}',
            otlp.JSON,
            "traceId is missing",
        ),
        (json_body(FakeSpan("x", "ab" * 16, span_id="12")), otlp.JSON, "spanId '12'"),
        (b"\x0a\x05\x12\x03\x12\x01\x0a", otlp.PROTOBUF, "not a protobuf"),
    ],
)
def test_what_is_not_otlp_is_an_error_saying_what(body: bytes, kind: str, says: str) -> None:
    with pytest.raises(otlp.OtlpError, match=says):
        otlp.decode(body, kind)


def test_a_protobuf_span_with_a_short_id_is_an_error() -> None:
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 15, b"\x02" * 8, "x"
    with pytest.raises(otlp.OtlpError, match="trace_id has 15 bytes, not 16"):
        otlp.decode(request.SerializeToString(), otlp.PROTOBUF)


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
    spans = otlp.decode(json_body(*agent_trace(trace_id)), otlp.JSON)
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
