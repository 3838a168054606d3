"""TracesView over the trajectory and gateway-exchange sources; the never-silent-zero rules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from agent_health import ledger
from agent_health.connectors.protocol import Step, TokenUsage
from agent_health.ledger import chain, usage
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import errors, exchanges, traceparent, trajectory, view
from support import ledger_support

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def result(**kwargs: Any) -> RunResult:
    steps = [
        {"type": "thinking", "content": "look at logs"},
        {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"service": "payment"}},
        {"type": "tool_result", "tool_name": "search_logs", "status": "error", "latency_ms": 7},
        {"type": "tool_call", "tool_name": "search_logs", "tool_args": {"service": "pay"}},
        {"type": "tool_result", "tool_name": "search_logs", "status": "ok", "latency_ms": 5},
        {"type": "assistant", "content": "db down"},
    ]
    defaults: dict[str, Any] = {
        "run_id": "run-1",
        "prompt": "p",
        "trajectory": tuple(Step.model_validate(s) for s in steps),
        "token_usage": TokenUsage(prompt=30, completion=12),
        "duration_ms": 99.0,
        "traceparent": TRACEPARENT,
        "raw": {"model": "m1"},
    }
    return RunResult(**{**defaults, **kwargs})


async def test_trajectory_source_turns_steps_into_genai_spans() -> None:
    spans = await trajectory.TrajectorySource(result()).spans("run-1", TRACEPARENT)
    ops = [s.operation for s in spans]
    assert ops == [
        "invoke_agent",
        "chat",
        "execute_tool",
        "chat",
        "execute_tool",
        "chat",
    ]  # three model turns
    root = spans[0]
    assert root.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent_span_id == "b7ad6b7169203331"
    assert (root.input_tokens, root.output_tokens, root.model) == (30, 12, "m1")
    tools = [s for s in spans if s.is_tool_call]
    assert [s.tool_name for s in tools] == ["search_logs", "search_logs"]
    assert [s.status for s in tools] == ["error", "ok"]
    assert [s.duration_ms for s in tools] == [7, 5]
    assert all(s.parent_span_id == root.span_id for s in spans[1:])
    logs = await trajectory.TrajectorySource(result()).logs("run-1")
    assert (logs[0].severity, logs[0].body) == ("INFO", "look at logs")
    assert any(r.severity == "ERROR" and "search_logs failed" in r.body for r in logs)


async def test_view_answers_from_the_trajectory_and_caches() -> None:
    traces = view.build(result(), tracesconfig.TracesSettings(), agent="triage")
    assert traces.source == "trajectory"
    assert traces.loaded is None
    assert await traces.total_tokens() == 42
    assert (await traces.input_tokens(), await traces.output_tokens()) == (30, 12)
    assert await traces.llm_calls() == 3
    assert await traces.tool_calls() == 2
    assert await traces.tool_histogram() == {"search_logs": 2}
    assert len(await traces.error_spans()) == 1
    snapshot = await traces.load()
    assert traces.loaded is snapshot
    assert snapshot.duration_ms == 99.0
    assert (await traces.metrics())["retries"] == 1


async def test_no_token_usage_is_an_error_not_zero() -> None:
    traces = view.build(result(token_usage=TokenUsage()), tracesconfig.TracesSettings(), agent=None)
    with pytest.raises(errors.TracesNotFound, match="no token usage in the 6 spans of run run-1"):
        await traces.total_tokens()


async def test_no_trajectory_reported_leaves_step_counts_unknown_not_zero() -> None:
    silent = result(trajectory=(), unreported=frozenset({"trajectory"}))
    traces = view.build(silent, tracesconfig.TracesSettings(), agent=None)
    assert await traces.total_tokens() == 42  # the usage it did report is still there
    for question in (traces.tool_calls, traces.llm_calls, traces.tool_histogram):
        with pytest.raises(errors.TracesNotFound, match="the agent reported no trajectory"):
            await question()
    assert (await traces.metrics())["tool_calls"] is None
    empty = view.build(result(trajectory=()), tracesconfig.TracesSettings(), agent=None)
    assert await empty.tool_calls() == 0  # an empty trajectory it reported: a real zero


async def test_cost_needs_a_price() -> None:
    cfg = tracesconfig.TracesSettings(
        prices={"m1": tracesconfig.Price(input_per_mtok=1, output_per_mtok=2)}
    )
    assert await view.build(result(), cfg, agent=None).cost_usd() == round(54 / 1e6, 8)
    unpriced = view.build(result(), tracesconfig.TracesSettings(), agent=None)
    with pytest.raises(errors.TracesError, match="no price for model m1 of run run-1"):
        await unpriced.cost_usd()


def test_traces_not_enabled_names_the_agent() -> None:
    off = tracesconfig.TracesSettings(enabled=False)
    with pytest.raises(errors.TracesNotEnabled, match="traces not enabled for agent triage"):
        view.build(result(), off, agent="triage")
    only = tracesconfig.TracesSettings(enabled=["other"])
    with pytest.raises(errors.TracesNotEnabled, match=r"set traces\.enabled"):
        view.build(result(), only, agent="triage")
    assert view.build(result(), only, agent="other").source == "trajectory"


async def test_unknown_source_is_a_clear_error() -> None:
    traces = view.build(result(), tracesconfig.TracesSettings(), agent=None)
    with pytest.raises(errors.TracesNotEnabled, match="'opensearch' is not configured"):
        await traces.spans(source="opensearch")


def exchange(
    *,
    started_at: float = 1000.0,
    ended_at: float = 1000.5,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    model: str | None = None,
    **fields: Any,
) -> ledger.Exchange:
    """A recorded exchange of the target with its model (epoch times, tokens as given)."""
    tokens = (input_tokens, output_tokens, model)
    used = (
        None
        if tokens == (None, None, None)
        else usage.TokenUsage(
            input_tokens=input_tokens or 0, output_tokens=output_tokens or 0, model=model
        )
    )
    base: dict[str, Any] = {
        "run_id": "run-1",
        "principal": "target",
        "upstream": "peer:llm",
        "path": "/v1/chat/completions",
        "started_at": datetime.fromtimestamp(started_at, UTC),
        "ended_at": datetime.fromtimestamp(ended_at, UTC),
        "usage": used,
    }
    return ledger_support.exchange(**{**base, **fields})


RECORDED = [
    exchange(
        principal="controller", upstream="target", path="/run", started_at=999.9, ended_at=1002
    ),
    exchange(input_tokens=100, output_tokens=20, model="m1"),
    exchange(upstream="peer:logs", method="GET", path="/search?q=x", started_at=1000.6),
    exchange(upstream="peer:status", method="GET", path="/status", status=503, started_at=1001),
    exchange(input_tokens=150, output_tokens=30, model="m1", started_at=1001.2),
    exchange(principal="controller", upstream="judge", input_tokens=999, started_at=1003),
    exchange(run_id="another-run", input_tokens=5000),
]


async def read(run_id: str) -> Sequence[ledger.Exchange]:
    return RECORDED


async def test_exchange_source_builds_spans_from_recorded_exchanges() -> None:
    traces = view.build(result(), tracesconfig.TracesSettings(), agent=None, read_exchanges=read)
    assert traces.sources == ["gateway", "trajectory"]
    spans = await traces.spans()
    assert [s.operation for s in spans] == [
        "invoke_agent",
        "chat",
        "execute_tool",
        "execute_tool",
        "chat",
        "judge",
    ]
    assert spans[0].trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert spans[0].duration_ms == pytest.approx(2100.0)
    # judge calls and other runs never count towards the agent's tokens
    assert await traces.total_tokens() == 300
    assert await traces.llm_calls() == 2
    assert await traces.tool_histogram() == {"logs": 1, "status": 1}
    assert [s.tool_name for s in await traces.error_spans()] == ["status"]
    logs = await traces.logs()
    assert logs[3].severity == "ERROR"
    assert "503" in logs[3].body
    # the trajectory stays readable by name
    assert await traces.total_tokens(source="trajectory") == 42


async def test_no_exchanges_for_the_run_is_an_error() -> None:
    async def nothing(run_id: str) -> Sequence[ledger.Exchange]:
        return [exchange(run_id="someone-else")]

    source = exchanges.ExchangeSource(nothing, where="file:///ledger")
    with pytest.raises(errors.TracesNotFound, match="no gateway exchanges for run run-1 in file"):
        await source.spans("run-1", None)


async def test_exchange_source_reads_the_exchanges_as_the_ledger_keeps_them() -> None:
    """The source reads the ledger's own records: those read back from sealed lines give the
    spans of those made in memory, and an exchange that got no answer is an error span."""
    cut = exchange(
        upstream="peer:logs", path="/search", status=None, error="closed", started_at=1004
    )
    made = [*RECORDED, cut]
    key = b"k" * 32
    sealer = chain.Sealer(key)
    lines = [sealer.line(ledger.CellMeta(test_id="t", repeat=0, run_id="run-1"))]
    lines += [sealer.line(e) for e in made]
    assert chain.verify(lines, key, complete=False).ok
    read_back = [r for r in map(ledger.parse_line, lines) if isinstance(r, ledger.Exchange)]

    async def saved(run_id: str) -> Sequence[ledger.Exchange]:
        return read_back

    async def in_memory(run_id: str) -> Sequence[ledger.Exchange]:
        return made

    from_lines = await exchanges.ExchangeSource(saved).spans("run-1", TRACEPARENT)
    assert from_lines == await exchanges.ExchangeSource(in_memory).spans("run-1", TRACEPARENT)
    last = from_lines[-1]
    assert (last.status, last.tool_name) == ("error", "logs")
    logs = await exchanges.ExchangeSource(saved).logs("run-1")
    assert logs[-1].severity == "ERROR"
    assert logs[-1].body.endswith("no answer (closed)")


def test_traceparent_parsing() -> None:
    assert traceparent.trace_id_of(TRACEPARENT) == "0af7651916cd43dd8448eb211c80319c"
    assert traceparent.span_id_of(TRACEPARENT) == "b7ad6b7169203331"
    assert traceparent.trace_id_of("garbage") is None
    assert traceparent.trace_id_of(None) is None


def test_config_errors_name_the_field() -> None:
    from agent_health import ConfigError, define_config

    with pytest.raises(ConfigError, match=r"traces\.opensearch\.hosts: Field required"):
        define_config(traces={"opensearch": {"index": "otel-v1-apm-span-*"}})
    with pytest.raises(ConfigError, match=r"prices\.m\.output_per_mtok"):
        define_config(prices={"m": {"input_per_mtok": 1}})
    with pytest.raises(ConfigError, match=r"traces\.wait"):
        define_config(traces={"wait": 3})
    config = define_config(
        prices={"m": {"input_per_mtok": 1, "output_per_mtok": 2}},
        traces={"prices": {"m": {"input_per_mtok": 3, "output_per_mtok": 4}}},
    )
    assert config.price_table().cost("m", 1_000_000, 0) == 3.0  # traces.prices wins


def test_a_new_traceparent_is_one_read_of_the_os(monkeypatch: Any) -> None:
    """Each agent call's traceparent: its trace id and parent id from one read of the
    OS's randomness, without the ``secrets`` module's frames around it (issue #40)."""
    import os

    from agent_health.sdk import agent

    reads: list[int] = []

    def urandom(n: int) -> bytes:
        reads.append(n)
        return bytes(range(n))

    monkeypatch.setattr(os, "urandom", urandom)
    made = agent.traceparent()
    assert reads == [24]
    assert made == f"00-{bytes(range(16)).hex()}-{bytes(range(16, 24)).hex()}-01"
