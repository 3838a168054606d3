"""The ``otel`` trace source (spans the agent exported to agent-health's receiver): when it
answers ``result.traces``, how long it waits, and what the spans fill into a reply."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from agent_health.connectors.protocol import AgentReply, Step, TokenUsage
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import errors, fromspans, received, records, view

TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE}-b7ad6b7169203331-01"


def span(name: str, span_id: str, parent: str | None = "a" * 16, **attrs: Any) -> dict[str, Any]:
    op = name.split(" ", 1)[0]
    return {
        "trace_id": TRACE,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": name,
        "kind": 1,
        "start_ns": 1_000_000_000 + int(span_id[:2], 16) * 1_000_000,
        "end_ns": 1_002_000_000 + int(span_id[:2], 16) * 1_000_000,
        "status": attrs.pop("status", "ok"),
        "status_message": attrs.pop("status_message", None),
        "attributes": {"gen_ai.operation.name": op, **attrs},
        "service": "agent",
    }


SPANS = [
    span("invoke_agent a", "a" * 16, parent="b7ad6b7169203331"),
    span("chat m", "01" * 8, **{"gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 4}),
    span(
        "execute_tool search_logs",
        "02" * 8,
        **{"gen_ai.tool.name": "search_logs", "gen_ai.tool.call.arguments": '{"service": "db"}'},
    ),
    span("execute_tool status", "03" * 8, status="error", status_message="503 from status"),
    span("chat m", "04" * 8, **{"gen_ai.usage.input_tokens": 6, "gen_ai.usage.output_tokens": 2}),
]


class Receiver:
    """What a receiver holds for a run; ``arrive`` spans later, as an exporter would."""

    def __init__(self, spans: list[dict[str, Any]] | None = None, on: bool = True) -> None:
        self.spans = list(spans or [])
        self.on = on
        self.reads = 0
        self.later: list[dict[str, Any]] = []

    async def read(self, run_id: str) -> Mapping[str, Any] | None:
        self.reads += 1
        if not self.on:
            return None
        if self.reads > 1 and self.later:
            self.spans, self.later = self.spans + self.later, []
        return {"run_id": run_id, "trace_id": TRACE, "spans": self.spans, "rejected": 0}


def run_result(**fields: Any) -> RunResult:
    base: dict[str, Any] = {"run_id": "run-1", "prompt": "p", "traceparent": TRACEPARENT}
    return RunResult(**{**base, **fields})


def traces_view(receiver: Receiver, **fields: Any) -> view.TracesView:
    config = tracesconfig.TracesSettings(otlp=tracesconfig.OtlpSettings(wait_seconds=0.5))
    return view.build(run_result(**fields), config, agent=None, read_received=receiver.read)


async def test_spans_that_arrived_answer_by_default() -> None:
    traces = traces_view(Receiver(SPANS))
    snapshot = await traces.load()
    assert snapshot.source == "otel"
    assert traces.source == "otel"
    assert snapshot.tool_histogram == {"search_logs": 1, "status": 1}
    assert (snapshot.llm_calls, snapshot.total_tokens) == (2, 22)
    assert [s.name for s in snapshot.error_spans] == ["execute_tool status"]
    assert snapshot.error_spans[0].attributes[received.STATUS_MESSAGE] == "503 from status"
    assert snapshot.spans[0].start_ms == 1_170.0  # nanoseconds → milliseconds


async def test_without_spans_the_trajectory_answers_and_otel_is_still_there_to_ask() -> None:
    receiver = Receiver([])
    traces = traces_view(receiver, trajectory=(Step(type="assistant", content="x"),))
    assert (await traces.load()).source == "trajectory"
    assert traces.sources == ["trajectory", "otel"]
    with pytest.raises(errors.TracesNotFound, match=r"no OTel spans of run run-1 reached"):
        await traces.load("otel")
    assert receiver.reads > 2  # it waited (polled) before saying so


async def test_asking_otel_waits_for_spans_that_land_late() -> None:
    receiver = Receiver([])
    receiver.later = SPANS
    traces = traces_view(receiver)
    snapshot = await traces.load("otel")
    assert len(snapshot.spans) == len(SPANS)


async def test_no_receiver_is_a_clear_error_and_logs_never_come_from_it() -> None:
    traces = traces_view(Receiver(on=False), trajectory=(Step(type="assistant", content="x"),))
    with pytest.raises(errors.TracesNotEnabled, match="no OTLP receiver"):
        await traces.load("otel")
    assert (await traces_view(Receiver(SPANS)).logs()) == []  # the trajectory's: no steps
    with pytest.raises(errors.TracesNotEnabled, match="spans only"):
        await traces.logs("otel")


def test_spans_fill_the_trajectory_and_tokens_a_reply_left_out() -> None:
    spans = [received.to_span(s) for s in SPANS]
    filled = fromspans.fill(AgentReply(output="done"), spans)
    assert filled.unreported == frozenset()
    kinds = [(s.type, s.tool_name, s.status) for s in filled.trajectory]
    assert kinds == [
        ("assistant", None, None),
        ("tool_call", "search_logs", None),
        ("tool_result", "search_logs", "ok"),
        ("tool_call", "status", None),
        ("tool_result", "status", "error"),
        ("assistant", None, None),
    ]
    assert filled.trajectory[1].tool_args == {"service": "db"}
    assert filled.trajectory[4].tool_output == {"error": "503 from status"}
    assert all(s.model_extra and s.model_extra["source"] == "otel" for s in filled.trajectory)
    assert filled.token_usage == TokenUsage(prompt=16, completion=6, total=22)


def test_what_the_agent_reported_is_never_replaced() -> None:
    spans = [received.to_span(s) for s in SPANS]
    own = AgentReply(output="x", trajectory=(Step(type="assistant", content="mine"),))
    filled = fromspans.fill(own, spans)
    assert filled.trajectory == own.trajectory
    assert filled.token_usage.total == 22  # it left its tokens out: those come from the spans
    both = AgentReply(output="x", trajectory=(), token_usage=TokenUsage(total=5))
    assert fromspans.fill(both, spans) is both
    assert fromspans.fill(AgentReply(output="x"), []).unreported == {"trajectory", "token_usage"}


def test_usage_falls_back_to_the_agent_span_and_never_counts_both() -> None:
    root = span("invoke_agent a", "a" * 16, parent=None, **{"gen_ai.usage.input_tokens": 50})
    chat = span("chat m", "01" * 8)
    got = fromspans.usage([received.to_span(root), received.to_span(chat)])
    assert got == TokenUsage(prompt=50, completion=0, total=50)
    assert not fromspans.usage([received.to_span(chat)]).reported


def test_a_span_of_the_receiver_becomes_a_span_record() -> None:
    converted = received.to_span(SPANS[0])
    assert isinstance(converted, records.Span)
    assert converted.parent_span_id == "b7ad6b7169203331"
    assert converted.duration_ms == 2.0


@pytest.mark.parametrize(
    "fields",
    [
        {"start_ns": int("9" * 400)},
        {"start_ns": -5, "end_ns": True},
        {"start_ns": 2_000_000_000, "end_ns": 1_000_000_000},
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 1e400}},
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": -9}},
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": "9" * 400}},
        {"attributes": {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": 2.5}},
        {"attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                        "gen_ai.tool.call.arguments": '{"n": NaN}',
                        "gen_ai.tool.call.result": "[1e999]"}},
    ],
)  # fmt: skip
def test_a_span_object_that_slipped_past_the_receivers_checks_never_raises(
    fields: dict[str, Any],
) -> None:
    """Spans from elsewhere (a backend, an older ledger) are read with the same care: a time
    that is not one is unknown, a count that is not one counts nothing, JSON text that JSON
    cannot hold stays text."""
    bad = {**span("chat m", "05" * 8), **fields}
    spans = [received.to_span(s) for s in (*SPANS, bad)]
    filled = fromspans.fill(AgentReply(output="done"), spans)
    assert filled.token_usage == TokenUsage(prompt=16, completion=6, total=22)
    assert len(filled.trajectory) >= 6
    for step in filled.trajectory:
        assert step.latency_ms is None or step.latency_ms >= 0
    if "gen_ai.tool.call.arguments" in bad["attributes"]:
        call, result = filled.trajectory[-2:]
        assert call.tool_args == {"arguments": '{"n": NaN}'}
        assert result.tool_output == "[1e999]"
