"""Records built as JSON objects (``ledger.objects``) are the models' own, byte for byte.

A local run seals these objects instead of validating a model and dumping it back; if one
drifted from its model (a field added with a default, a late field written when unset, a
time formatted another way), its line would still verify but would not be what the model
writes. Each builder is held here to ``records.to_object`` of the model made from the same
values, and to the canonical line and MAC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from agent_health.ledger import (
    chain,
    encoding,
    errors,
    objects,
    observation,
    records,
    strictjson,
    usage,
)
from hypothesis import given
from hypothesis import strategies as st

KEY = b"k" * 32
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
_times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
_maybe_text = st.none() | st.text(max_size=20)


def same(built: dict[str, Any], model: records.Record) -> None:
    """The builder's object is the model's, and seals to the same line."""
    assert built == records.to_object(model, with_mac=False)
    # Sealed as the second record of a cell (only a cell-meta may come first).
    by_object = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    by_model = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    assert by_object.line_of(dict(built)) == by_model.line(model)


@given(moment=_times)
def test_a_time_is_written_as_pydantic_writes_it(moment: datetime) -> None:
    meta = records.CellMeta(test_id="t", repeat=0, run_id="r", started_at=moment, time=moment)
    assert objects.stamp(moment) == records.to_object(meta)["time"]


@given(moments=st.lists(_times, min_size=1, max_size=6))
def test_a_clock_stamps_each_time_as_stamp_does(moments: list[datetime]) -> None:
    """The gateway's clock (each second's text made once) writes every time as stamp()
    does, whatever came before it: the same second, another second, another day."""
    clock = objects.Clock()
    for moment in [*moments, *moments]:
        assert clock.of(moment) == objects.stamp(moment)
        assert clock.of(moment.replace(microsecond=0)) == objects.stamp(
            moment.replace(microsecond=0)
        )
    now = clock.now()
    assert now.endswith("Z")
    assert datetime.fromisoformat(now).tzinfo is not None
    with pytest.raises(ValueError, match="UTC"):
        clock.of(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))))


_EPOCHS = st.one_of(
    st.floats(min_value=-2e9, max_value=4.2e9, allow_nan=False),
    # Halfway between two microseconds, and a hair either side: where rounding can differ.
    st.builds(
        lambda second, micro, hair: second + (micro + 0.5) / 1e6 + hair,
        st.integers(0, 4_200_000_000),
        st.integers(-1, 999_999),
        st.sampled_from([0.0, 1e-9, -1e-9, 5e-7, -5e-7]),
    ),
)


@given(seconds=st.lists(_EPOCHS, min_size=1, max_size=8))
def test_a_clock_stamps_each_epoch_time_as_stamp_epoch_does(seconds: list[float]) -> None:
    """A local cell's writer dates its records with a clock (each second's text made once):
    every epoch time is written as stamp_epoch() writes it — rounded to the microsecond as
    datetime.fromtimestamp rounds, half to even, a fraction that rounds to a whole second
    carried into it — whatever came before it."""
    clock = objects.Clock()
    for value in [*seconds, *reversed(seconds)]:
        assert clock.epoch(value) == objects.stamp_epoch(value), value
        assert clock.epoch(float(int(value))) == objects.stamp_epoch(float(int(value)))


def test_a_clock_stamps_the_edges_of_a_second_as_stamp_epoch_does() -> None:
    clock = objects.Clock()
    for value in (
        1767323045.9999995,  # rounds up into the next second
        1767323045.0000005,
        1767323045.0000015,
        1767323045.5,
        0.0,
        -0.5,
        -1.0000005,
        1e-7,
        253402300799.9999,  # the last second of year 9999
        -62135596800.0,  # year 1: its year written with four digits, as isoformat does
        -30000000000.5,  # year 1019
    ):
        assert clock.epoch(value) == objects.stamp_epoch(value), value


def test_a_time_that_is_not_utc_is_refused() -> None:
    with pytest.raises(ValueError, match="UTC"):
        objects.stamp(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))))
    with pytest.raises(ValueError, match="UTC"):
        objects.stamp(datetime(2026, 1, 1))


@given(moment=_times, test_id=st.text(), repeat=st.integers(0, 9), agent=_maybe_text)
def test_cell_meta(moment: datetime, test_id: str, repeat: int, agent: str | None) -> None:
    at = objects.stamp(moment)
    built = objects.cell_meta(at=at, test_id=test_id, repeat=repeat, run_id="r1", agent=agent)
    model = records.CellMeta(
        test_id=test_id, repeat=repeat, run_id="r1", started_at=moment, time=moment, agent=agent
    )
    same(built, model)


@given(
    moment=_times,
    status=st.none() | st.integers(100, 599),
    sizes=st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)),
    error=_maybe_text,
    tokens=st.none() | st.tuples(st.integers(0, 99), st.integers(0, 99), _maybe_text),
    callee=st.sampled_from(["target", "peer:search", records.GATEWAY]),
)
def test_exchange(
    moment: datetime,
    status: int | None,
    sizes: tuple[int, int],
    error: str | None,
    tokens: tuple[int, int, str | None] | None,
    callee: str,
) -> None:
    """What was seen of an exchange, as the gateway or a connector saw it, becomes the
    model's record (version 2 when the gateway answered the call itself)."""
    found = (
        None
        if tokens is None
        else usage.TokenUsage(
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            total_tokens=tokens[0] + tokens[1],
            model=tokens[2],
        )
    )
    started = moment.timestamp()
    ended = started + 0.051
    values: dict[str, Any] = {
        "principal": "controller",
        "evidence": "in-process",
        "upstream": callee,
        "run_id": "r1",
        "method": "POST",
        "path": "/run",
        "status": status,
        "request_bytes": sizes[0],
        "response_bytes": sizes[1],
        "request_sha256": "a" * 64,
        "response_sha256": None if status is None else "b" * 64,
        "error": error,
    }
    seen = observation.Observation(started_at=started, ended_at=ended, usage=found, **values)
    built = objects.exchange(seen)
    later = datetime.fromtimestamp(ended, UTC)
    model = records.Exchange(
        time=later,
        started_at=datetime.fromtimestamp(started, UTC),
        ended_at=later,
        usage=found,
        **values,
    )
    same(built, model)
    assert built["version"] == (2 if callee == records.GATEWAY else 1)


@given(
    status=st.integers(100, 599),
    answer=st.sampled_from(
        [
            b'{"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}',
            b'{"output": "pong", "token_usage": {"prompt": 1}}',
            b"",
        ]
    ),
)
def test_an_exchange_a_connector_saw_carries_the_usage_of_its_answer(
    status: int, answer: bytes
) -> None:
    """A connector keeps the answer; its usage is read when the record is made, and only
    from an answer that is not an error."""
    seen = observation.Observation(
        run_id="r1",
        method="POST",
        path="/v1/chat/completions",
        status=status,
        started_at=1_000_000_000.0,
        ended_at=1_000_000_000.5,
        request_bytes=2,
        response_bytes=len(answer),
        request_sha256="a" * 64,
        response_sha256="b" * 64,
        body=answer or None,
        content_type="application/json",
    )
    built = objects.exchange(seen)
    read = usage.parse(answer, "application/json") if status < 400 else None
    assert built["usage"] == (read.model_dump(mode="json") if read is not None else None)
    assert (built["principal"], built["evidence"], built["upstream"]) == (
        "controller",
        observation.IN_PROCESS,
        "target",
    )
    assert built["ended_at"] == "2001-09-09T01:46:40.500000Z"


@given(
    moment=_times,
    prompt=_maybe_text,
    output=st.text(),
    duration=st.floats(0, 1e9) | st.integers(0, 10**6),
    trajectory=st.lists(st.dictionaries(st.text(max_size=5), _json, max_size=3), max_size=3),
    raw=st.none() | st.dictionaries(st.text(max_size=5), _json, min_size=1, max_size=3),
    unreported=st.none() | st.lists(st.sampled_from(["trajectory", "token_usage"]), min_size=1),
    truncated=st.none() | st.lists(st.text(max_size=10), min_size=1, max_size=2),
)
def test_run_result(
    moment: datetime,
    prompt: str | None,
    output: str,
    duration: float,
    trajectory: list[dict[str, Any]],
    raw: dict[str, Any] | None,
    unreported: list[str] | None,
    truncated: list[str] | None,
) -> None:
    values: dict[str, Any] = {
        "run_id": "r1",
        "prompt": prompt,
        "context": [{"description": "log", "value": "x"}],
        "output": output,
        "trajectory": trajectory,
        "token_usage": {"prompt": 1, "completion": 2, "total": 3},
        "duration_ms": duration,
        "unreported": unreported,
        "raw": raw,
        "truncated": truncated,
    }
    built = objects.run_result(at=objects.stamp(moment), **values)
    same(built, records.RunResultRecord(time=moment, **values))


@given(moment=_times, error=st.text(), cause=st.sampled_from(["agent", "judge", "test", "infra"]))
def test_run_result_of_a_failed_call(moment: datetime, error: str, cause: str) -> None:
    built = objects.run_result(
        at=objects.stamp(moment), run_id="r1", prompt="p", error=error, cause=cause
    )
    model = records.RunResultRecord(time=moment, run_id="r1", prompt="p", error=error, cause=cause)
    same(built, model)


@given(moment=_times, data=st.dictionaries(st.text(), _json, max_size=5))
def test_signal(moment: datetime, data: dict[str, Any]) -> None:
    same(
        objects.signal(at=objects.stamp(moment), data=data),
        records.SignalRecord(time=moment, signal=data),
    )


@given(
    moment=_times,
    status=st.sampled_from(["passed", "failed", "errored", "skipped"]),
    error=_maybe_text,
    duration=st.none() | st.floats(0, 1e9) | st.integers(0, 10**6),
    cause=st.none() | st.sampled_from(["agent", "judge", "test", "infra"]),
    content_hash=_maybe_text,
    insights=st.none() | st.dictionaries(st.text(max_size=5), _json, max_size=3),
)
def test_cell_end(
    moment: datetime,
    status: str,
    error: str | None,
    duration: float | None,
    cause: str | None,
    content_hash: str | None,
    insights: dict[str, Any] | None,
) -> None:
    values: dict[str, Any] = {
        "status": status,
        "exit_code": None,
        "error": error,
        "duration_ms": duration,
        "cause": cause,
        "content_hash": content_hash,
        "insights": insights,
    }
    same(
        objects.cell_end(at=objects.stamp(moment), **values), records.CellEnd(time=moment, **values)
    )


def test_the_builders_write_the_base_version() -> None:
    assert objects.VERSION == records.BASE_VERSION


def test_a_built_cell_verifies_as_a_cell() -> None:
    at = objects.stamp(datetime(2026, 1, 2, tzinfo=UTC))
    sealer = chain.Sealer(KEY)
    lines = [
        sealer.line_of(item)
        for item in (
            objects.cell_meta(at=at, test_id="t", repeat=0, run_id="r"),
            objects.run_result(at=at, run_id="r", prompt="p", output="o", duration_ms=1),
            objects.signal(at=at, data={"name": "to_equal", "passed": True}),
            objects.cell_end(at=at, status="passed", duration_ms=2),
        )
    ]
    result = chain.verify(lines, KEY)
    assert result.ok, result.problem
    assert result.records == 4
    assert result.ended


_json_object = st.dictionaries(st.text(max_size=8), _json, max_size=3)


@given(
    moment=_times,
    id=st.none() | st.integers() | st.text(max_size=8),
    name=_maybe_text,
    arguments=st.none() | _json_object,
    result=st.none() | _json_object,
    result_bytes=st.integers(0, 10**9),
    cuts=st.tuples(st.booleans(), st.booleans()),
    is_error=st.none() | st.booleans(),
    error=st.none() | _json_object,
    problem=_maybe_text,
    session=_maybe_text,
    status=st.none() | st.integers(100, 599),
)
def test_mcp_call(
    moment: datetime,
    id: int | str | None,
    name: str | None,
    arguments: dict[str, Any] | None,
    result: dict[str, Any] | None,
    result_bytes: int,
    cuts: tuple[bool, bool],
    is_error: bool | None,
    error: dict[str, Any] | None,
    problem: str | None,
    session: str | None,
    status: int | None,
) -> None:
    later = moment + timedelta(milliseconds=7)
    values: dict[str, Any] = {
        "principal": "target",
        "evidence": "none",
        "server": "peer:time",
        "run_id": "r1",
        "session": session,
        "method": "tools/call",
        "id": id,
        "name": name,
        "arguments": arguments,
        "arguments_cut": cuts[0],
        "result": result,
        "result_bytes": result_bytes,
        "result_cut": cuts[1],
        "is_error": is_error,
        "error": error,
        "problem": problem,
        "status": status,
    }
    built = objects.mcp_call(
        at=objects.stamp(later),
        started_at=objects.stamp(moment),
        ended_at=objects.stamp(later),
        **values,
    )
    model = records.McpRecord(time=later, started_at=moment, ended_at=later, **values)
    same(built, model)
    assert list(built) == sorted(built)  # built in canonical order: its sort is one pass
    # Written as its line by hand (the gateway's way), it seals to the very same line.
    by_text = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    by_object = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    line = by_text.line_written(objects.mcp_text(built))
    assert line == by_object.line_of(dict(built))
    assert by_text.previous_mac == by_object.previous_mac
    assert by_text.next_seq == by_object.next_seq == 2
    carried(built, moment, later, status)


def carried(built: objects.Object, moment: datetime, later: datetime, status: int | None) -> None:
    """``built`` carried by its exchange (version 5): the exchange written by hand seals to
    the canonical encoder's line of :func:`objects.exchange`, and reads back as that call."""
    seen = observation.Observation(
        principal=built["principal"],
        evidence=built["evidence"],
        upstream=built["server"],
        run_id=built["run_id"],
        method="POST",
        path="/mcp",
        status=status,
        started_at=moment.timestamp(),
        ended_at=later.timestamp() + 0.001,
        request_bytes=10,
        response_bytes=20,
        request_sha256="a" * 64,
        response_sha256="b" * 64 if status is not None else None,
    )
    entry = objects.mcp_entry(built)
    assert objects.mcp_entry_text(built) == encoding.text(entry)
    if built["arguments"] is not None:  # written already, as the gateway's recorder does
        given = encoding.text(built["arguments"])
        assert objects.mcp_entry_text(built, given) == encoding.text(entry)
    by_text = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    by_object = chain.Sealer(KEY, next_seq=1, previous_mac="c" * 64)
    written = objects.exchange_text(seen, [objects.mcp_entry_text(built)] * 2)
    line = by_text.line_written(written)
    assert line == by_object.line_of(objects.exchange(seen, [entry, entry]))
    exchange = records.parse_line(line)
    assert isinstance(exchange, records.Exchange)
    assert exchange.version == 5
    first, second = records.calls_of(exchange)
    assert first == second
    alone = records.parse_object(dict(built))
    shared = {"version", "seq", "mac", "time", "started_at", "status"}
    assert first.model_dump(exclude=shared) == alone.model_dump(exclude=shared)
    assert (first.status, first.started_at, first.time) == (status, exchange.started_at, later)


@pytest.mark.parametrize(
    "value",
    [
        "caf\u00e9 \u2603 \U0001f600",
        "\ud800 a lone surrogate",
        'quotes " and \\ and \n\t\x00\x1f',
        2**70,
        -(2**70),
        1.5,
        1e300,
        -0.0,
        True,
        {"b": 1, "a": [None, {"d": "\u00e9", "c": 2.5}]},
        [],
        {},
    ],
    ids=repr,
)
def test_an_mcp_call_written_by_hand_is_its_canonical_line(value: Any) -> None:
    """Whatever an MCP call holds — text beyond ASCII, lone surrogates, big numbers, floats,
    nested objects whose keys are out of order — its line written member by member is the
    canonical encoder's, seq and mac included."""
    built = objects.mcp_call(
        at="2026-01-02T03:04:05Z",
        principal="target",
        evidence="none",
        server="peer:time",
        run_id=None,
        session=value if isinstance(value, str) else None,
        method="tools/call",
        id=value if isinstance(value, str | int) and not isinstance(value, bool) else None,
        name=value if isinstance(value, str) else None,
        arguments={"v": value},
        result={"content": [{"type": "text", "text": "x"}], "v": value},
        error={"code": -32000, "data": value},
        problem=value if isinstance(value, str) else None,
        status=200,
        started_at="2026-01-02T03:04:05Z",
        ended_at="2026-01-02T03:04:05Z",
    )
    sealed = chain.Sealer(KEY, next_seq=3, previous_mac="c" * 64)
    line = sealed.line_written(objects.mcp_text(built))
    assert line == chain.Sealer(KEY, next_seq=3, previous_mac="c" * 64).line_of(dict(built))
    assert records.parse_object(strictjson.loads(line)).kind == "mcp"
    # Carried by its exchange, whose own strings may hold the same.
    text = value if isinstance(value, str) else "x"
    seen = observation.Observation(
        principal="target",
        evidence="none",
        upstream="peer:time",
        run_id=text,
        method="POST",
        path=text,
        status=200,
        started_at=1767323045.25,
        ended_at=1767323046.0,
        request_bytes=1,
        response_bytes=2,
        request_sha256="a",
        response_sha256="b",
        error=text,
    )
    entry = objects.mcp_entry(built)
    assert objects.mcp_entry_text(built) == encoding.text(entry)
    by_text = chain.Sealer(KEY, next_seq=3, previous_mac="c" * 64)
    line = by_text.line_written(objects.exchange_text(seen, [objects.mcp_entry_text(built)]))
    by_object = chain.Sealer(KEY, next_seq=3, previous_mac="c" * 64)
    assert line == by_object.line_of(objects.exchange(seen, [entry]))
    assert records.parse_object(strictjson.loads(line)).kind == "exchange"


def test_an_mcp_call_that_json_cannot_hold_is_refused_as_the_encoder_refuses_it() -> None:
    built = objects.mcp_call(
        at="2026-01-02T03:04:05Z",
        principal="target",
        evidence="none",
        server="peer:time",
        run_id=None,
        session=None,
        method="tools/call",
        arguments={"x": float("nan")},
        status=200,
        started_at="2026-01-02T03:04:05Z",
        ended_at="2026-01-02T03:04:05Z",
    )
    with pytest.raises(errors.RecordError, match="NaN"):
        objects.mcp_text(built)
    with pytest.raises(errors.RecordError, match="NaN"):
        objects.mcp_entry_text(built)


def test_a_written_record_is_never_the_first_of_a_cell_nor_after_its_end() -> None:
    built = objects.mcp_call(
        at="2026-01-02T03:04:05Z",
        principal="target",
        evidence="none",
        server="peer:time",
        run_id=None,
        session=None,
        method="tools/list",
        status=200,
        started_at="2026-01-02T03:04:05Z",
        ended_at="2026-01-02T03:04:05Z",
    )
    with pytest.raises(errors.ChainError, match="first record"):
        chain.Sealer(KEY).line_written(objects.mcp_text(built))
    with pytest.raises(errors.ChainError, match="ended"):
        chain.Sealer(KEY, next_seq=4, ended=True).line_written(objects.mcp_text(built))
