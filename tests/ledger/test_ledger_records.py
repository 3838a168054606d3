"""Ledger records: round trips, parse errors that name the line, canonical JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import agent_health.ledger as ledger_pkg
import pytest
from agent_health.ledger import errors, records, usage
from hypothesis import given
from hypothesis import strategies as st

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
T1 = datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)


def every_kind() -> list[records.Record]:
    return [
        records.CellMeta(
            test_id="suite/test_rca.py::payment rca",
            repeat=2,
            run_id="run-1",
            images={"target": "ghcr.io/x/agent@sha256:" + "a" * 64},
            started_at=T0,
            time=T0,
        ),
        records.Exchange(
            principal="peer:search",
            evidence="tok-7",
            upstream="target",
            run_id="run-1",
            method="POST",
            path="/v1/chat/completions",
            status=200,
            started_at=T0,
            ended_at=T1,
            request_bytes=120,
            response_bytes=900,
            request_sha256="b" * 64,
            response_sha256="c" * 64,
            usage=usage.TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15, model="m"),
            time=T1,
        ),
        records.Exchange(
            principal="target",
            upstream="judge",
            method="GET",
            path="/",
            started_at=T0,
            ended_at=T1,
            request_bytes=0,
            request_sha256="d" * 64,
            error="connection refused",
        ),
        records.RunResultRecord(
            run_id="run-1",
            prompt="Diagnose ünïcode ✓",
            output="db-primary is down",
            trajectory=[{"type": "tool_call", "tool_name": "search_logs", "tool_args": {"q": 1}}],
            token_usage={"prompt": 3, "completion": 4, "total": 7},
            duration_ms=12.5,
        ),
        records.SignalRecord(signal={"kind": "judge", "passed": None, "score": 0.25}),
        records.CellEnd(status="errored", exit_code=3, error="agent unreachable", duration_ms=1.0),
    ]


@pytest.mark.parametrize("record", every_kind(), ids=lambda r: r.kind)
def test_every_kind_round_trips_through_a_line(record: records.Record) -> None:
    line = records.dump_line(record)
    assert "\n" not in line
    back = records.parse_line(line)
    assert back == record
    assert type(back) is type(record)
    assert records.dump_line(back) == line


def test_lines_are_canonical_json() -> None:
    record = every_kind()[3]
    line = records.dump_line(record)
    payload = json.loads(line)
    assert line == json.dumps(payload, sort_keys=True, separators=(",", ":"))
    assert line.isascii()
    assert list(payload) == sorted(payload)
    assert payload["version"] == 1
    assert payload["kind"] == "run-result"


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _JSON, max_size=6))
def test_canonical_json_is_the_standard_encoders_with_the_ledgers_options(payload: Any) -> None:
    """``canonical`` drives the C encoder it keeps, not ``json.dumps``: the same bytes."""
    expected = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    assert records.canonical(payload) == expected.encode("ascii")


def test_bad_json_names_the_line() -> None:
    with pytest.raises(errors.RecordError, match=r"ledger line 7: not JSON") as info:
        records.parse_line('{"kind": "signal"', 7)
    assert info.value.line == 7


def test_unknown_version_says_to_upgrade() -> None:
    payload = records.to_object(every_kind()[4])
    payload["version"] = 6
    with pytest.raises(errors.RecordError, match=r"line 3: unknown record version 6.*upgrade"):
        records.parse_line(json.dumps(payload), 3)


def test_only_an_exchange_refused_by_the_gateway_is_written_at_version_2() -> None:
    refused = records.Exchange(
        principal="target",
        evidence="invalid-token",
        upstream=records.GATEWAY,
        method="POST",
        path="/ledger/records",
        status=403,
        started_at=T0,
        ended_at=T1,
        request_bytes=0,
        request_sha256="0" * 64,
    )
    assert refused.version == 2
    assert records.parse_line(records.dump_line(refused)) == refused
    assert {r.version for r in every_kind()} == {records.BASE_VERSION}  # old readers read them
    payload = {**records.to_object(refused), "version": 1}
    with pytest.raises(errors.RecordError, match="'gateway' is a version 2 record"):
        records.parse_line(json.dumps(payload))
    with pytest.raises(errors.RecordError, match="'gateway' is not a principal"):
        records.parse_line(json.dumps({**payload, "version": 2, "principal": "gateway"}))


def test_unknown_kind_lists_the_known_ones() -> None:
    payload = {**records.to_object(every_kind()[4]), "kind": "gossip"}
    with pytest.raises(errors.RecordError, match=r"unknown record kind 'gossip'; known: cell-meta"):
        records.parse_line(json.dumps(payload), 1)


def test_bad_field_names_kind_and_field() -> None:
    payload = {**records.to_object(every_kind()[5]), "status": "sort-of"}
    with pytest.raises(errors.RecordError, match=r"line 9: cell-end record field 'status'"):
        records.parse_line(json.dumps(payload), 9)


def test_not_an_object() -> None:
    with pytest.raises(errors.RecordError, match="expected a JSON object, got list"):
        records.parse_line("[1, 2]", 2)


@pytest.mark.parametrize("principal", ["admin", "peer:", "peer:a b", "Controller"])
def test_principal_must_be_known(principal: str) -> None:
    with pytest.raises(ValueError, match="is not a principal"):
        records.Exchange(
            principal=principal,
            upstream="target",
            method="GET",
            path="/",
            started_at=T0,
            ended_at=T1,
            request_bytes=0,
            request_sha256="e" * 64,
        )


def test_parse_lines_skips_blank_lines_and_numbers_the_rest() -> None:
    good = records.dump_line(every_kind()[4])
    assert len(records.parse_lines([good, "", good])) == 2
    with pytest.raises(errors.RecordError, match="ledger line 3"):
        records.parse_lines([good, "", "nope"])


def test_nan_becomes_null_so_every_line_is_strict_json() -> None:
    line = records.dump_line(records.SignalRecord(signal={"score": float("nan")}))
    assert json.loads(line)["signal"] == {"score": None}
    with pytest.raises(errors.RecordError, match="not representable as JSON"):
        records.canonical({"score": float("nan")})


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(signal=st.dictionaries(st.text(), _json, max_size=6))
def test_any_signal_dict_has_one_stable_line(signal: dict[str, Any]) -> None:
    record = records.SignalRecord(signal=signal, time=T0)
    line = records.dump_line(record)
    assert records.dump_line(records.parse_line(line)) == line


def test_all_is_complete() -> None:
    public = {
        name
        for name in dir(ledger_pkg)
        if not name.startswith("_") and not isinstance(getattr(ledger_pkg, name), type(ledger_pkg))
    }
    assert set(ledger_pkg.__all__) == public


def test_an_mcp_call_round_trips_at_version_4_and_names_a_peer_as_its_server() -> None:
    call = records.McpRecord(
        principal="target",
        server="peer:time",
        run_id="run-1",
        session="s-1",
        method="tools/call",
        id=3,
        name="get_current_time",
        arguments={"timezone": "Europe/Oslo"},
        result={"content": [{"type": "text", "text": "12:00"}], "isError": False},
        result_bytes=80,
        is_error=False,
        status=200,
        started_at=T0,
        ended_at=T1,
        time=T1,
    )
    line = records.dump_line(call)
    assert json.loads(line)["version"] == 4
    assert records.parse_line(line) == call
    payload = {**json.loads(line), "server": "judge"}
    with pytest.raises(errors.RecordError, match="'judge' is not an MCP server: use peer:NAME"):
        records.parse_object(payload)
    with pytest.raises(errors.RecordError, match="mcp record field 'version': Input should be 4"):
        records.parse_object({**json.loads(line), "version": 3})
    with pytest.raises(errors.RecordError, match="an mcp record on its own is version 4"):
        records.parse_object({**json.loads(line), "version": 5})


def test_the_gateway_builds_an_mcp_record_as_the_model_writes_it() -> None:
    from agent_health.ledger import objects

    built = objects.mcp_call(
        at=objects.stamp(T1),
        principal="target",
        evidence="none",
        server="peer:time",
        run_id=None,
        session=None,
        method="tools/call",
        id="a",
        name="t",
        arguments={"x": [1, 2]},
        result={"content": []},
        result_bytes=12,
        is_error=True,
        status=200,
        started_at=objects.stamp(T0),
        ended_at=objects.stamp(T1),
    )
    model = records.parse_object(built)
    written = records.to_object(model, with_mac=False)
    assert written == built
    # Built in canonical (sorted) key order, so the canonical line is the model's own.
    assert list(built) == sorted(built)
    assert records.canonical(built) == records.canonical(written)


def test_an_exchange_carries_mcp_calls_only_at_version_5_and_only_from_an_mcp_server() -> None:
    exchange = records.Exchange(
        principal="target",
        upstream="peer:time",
        method="POST",
        path="/mcp",
        status=200,
        started_at=T0,
        ended_at=T1,
        request_bytes=10,
        request_sha256="a" * 64,
        mcp=[records.McpCall(method="tools/call", id=1, name="now", is_error=False, ended_at=T1)],
    )
    line = records.dump_line(exchange)
    assert json.loads(line)["version"] == 5
    assert records.parse_line(line) == exchange
    [call] = records.calls_of(exchange)
    assert (call.server, call.name, call.status, call.version) == ("peer:time", "now", 200, 5)
    payload = json.loads(line)
    with pytest.raises(errors.RecordError, match="carries mcp calls is a version 5 record"):
        records.parse_object({**payload, "version": 1})
    with pytest.raises(errors.RecordError, match=r"upstream peer:NAME\) carries mcp calls"):
        records.parse_object({**payload, "upstream": "judge"})
    without = {k: v for k, v in payload.items() if k != "mcp"}
    with pytest.raises(errors.RecordError, match="a version 5 exchange carries mcp calls"):
        records.parse_object(without)
    with pytest.raises(errors.RecordError, match=r"mcp\.0\.principal"):
        records.parse_object({**payload, "mcp": [{**payload["mcp"][0], "principal": "judge"}]})
