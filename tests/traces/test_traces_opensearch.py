"""The OpenSearch source against a loopback server answering recorded-shape ``_search`` replies
(``tests/support/opensearch_support.py``)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import RunResult
from agent_health.traces import errors, opensearch, view
from aiohttp import web
from support.helpers import run_cli
from support.opensearch_support import (
    TRACE,
    TRACE_ID,
    TRACEPARENT,
    Docs,
    FakeOpenSearch,
    cfg,
    queried,
    serving,
    span_doc,
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenSearch]:
    async with serving() as server:
        yield server


async def read_spans(source: opensearch.OpenSearchSource, run_id: str = "run-42") -> Any:
    try:
        return await source.spans(run_id, TRACEPARENT)
    finally:
        await source.aclose()


async def test_query_finds_the_run_by_trace_id_and_run_id_attribute(fake: FakeOpenSearch) -> None:
    await read_spans(opensearch.OpenSearchSource(cfg(fake.url, run_id_attribute="my.run")))
    [req] = fake.requests
    assert req["index"] == "otel-v1-apm-span-*"
    assert req["body"]["size"] == 10_000
    should = req["body"]["query"]["bool"]["should"]
    assert req["body"]["query"]["bool"]["minimum_should_match"] == 1
    assert {"term": {"traceId": TRACE_ID}} in should
    assert {"term": {"span.attributes.my@run": "run-42"}} in should
    assert {"term": {"attributes.my@run": "run-42"}} in should


async def test_without_a_traceparent_only_the_run_id_attribute_is_used() -> None:
    body = opensearch.span_query("r", None, cfg("http://x"))
    assert all("traceId" not in clause["term"] for clause in body["query"]["bool"]["should"])


async def test_spans_are_parsed_with_genai_fields(fake: FakeOpenSearch) -> None:
    spans = await read_spans(opensearch.OpenSearchSource(cfg(fake.url)))
    assert [s.span_id for s in spans] == ["a1", "c1", "t1", "c2"]  # sorted by start time
    root, chat, tool, chat2 = spans
    assert root.operation == "invoke_agent"
    assert root.parent_span_id == "00f067aa0ba902b7"
    assert root.duration_ms == pytest.approx(3000.0)
    assert root.service == "triage-agent"
    assert (chat.input_tokens, chat.output_tokens, chat.model) == (120, 30, "gpt-4o-mini")
    assert chat2.operation == "chat"  # from the span name when the attribute is missing
    assert chat2.duration_ms == pytest.approx(500.0)
    assert (tool.tool_name, tool.status) == ("search_logs", "error")
    assert root.attributes["agent_health.run_id"] == "run-42"


async def test_view_reads_tokens_and_tools_from_opensearch(fake: FakeOpenSearch) -> None:
    traces_cfg = tracesconfig.TracesSettings(
        opensearch=cfg(fake.url),
        prices={"gpt-4o-mini": tracesconfig.Price(input_per_mtok=0.15, output_per_mtok=0.6)},
    )
    run = RunResult(run_id="run-42", prompt="p", traceparent=TRACEPARENT)
    traces = view.build(run, traces_cfg, agent="triage")
    try:
        assert traces.sources == ["opensearch", "trajectory"]
        assert await traces.total_tokens() == 400  # chat spans only, the root is not re-counted
        assert await traces.llm_calls() == 2
        assert await traces.tool_histogram() == {"search_logs": 1}
        assert await traces.cost_usd() == round((320 * 0.15 + 80 * 0.6) / 1e6, 8)
        assert len(fake.requests) == 1  # loaded once, then cached
    finally:
        await traces.aclose()


async def test_bounded_wait_then_a_clear_error(fake: FakeOpenSearch) -> None:
    fake.answers = [lambda body: []]
    source = opensearch.OpenSearchSource(cfg(fake.url, wait_seconds=0.3, poll_seconds=0.05))
    with pytest.raises(errors.TracesNotFound) as info:
        await read_spans(source, "run-7")
    assert str(info.value).startswith(
        "no spans for run run-7 in index otel-v1-apm-span-* after 0.3 s"
    )
    assert len(fake.requests) >= 2  # it polled, it did not give up after one look


async def test_zero_wait_looks_once(fake: FakeOpenSearch) -> None:
    fake.answers = [lambda body: []]
    with pytest.raises(errors.TracesNotFound, match="after 0 s"):
        await read_spans(opensearch.OpenSearchSource(cfg(fake.url, wait_seconds=0)))
    assert len(fake.requests) == 1


async def test_spans_that_land_late_are_waited_for(fake: FakeOpenSearch) -> None:
    fake.answers = [lambda body: [], lambda body: [], lambda body: TRACE]
    spans = await read_spans(opensearch.OpenSearchSource(cfg(fake.url)))
    assert len(spans) == 4
    assert len(fake.requests) == 3


async def test_without_a_root_span_it_waits_until_the_count_settles(fake: FakeOpenSearch) -> None:
    children = TRACE[1:]
    fake.answers = [lambda body: children[:1], lambda body: children, lambda body: children]
    spans = await read_spans(opensearch.OpenSearchSource(cfg(fake.url)))
    assert [s.span_id for s in spans] == ["c1", "t1", "c2"]
    assert len(fake.requests) == 3


async def test_refused_credentials_are_a_backend_error(
    fake: FakeOpenSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OS_USER", "reader")
    monkeypatch.setenv("OS_PASS", "s3cret")
    fake.status = 401
    source = opensearch.OpenSearchSource(
        cfg(fake.url, username_env="OS_USER", password_env="OS_PASS")
    )
    with pytest.raises(errors.TracesBackendError, match=r"refused .* check traces\.opensearch"):
        await read_spans(source)
    assert fake.requests[0]["auth"] == "Basic " + base64.b64encode(b"reader:s3cret").decode()


async def test_missing_credential_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_OS_USER", raising=False)
    source = opensearch.OpenSearchSource(cfg("http://127.0.0.1:9", username_env="NO_SUCH_OS_USER"))
    with pytest.raises(errors.TracesBackendError, match="NO_SUCH_OS_USER"):
        await read_spans(source)


async def test_unreachable_server_is_a_backend_error() -> None:
    app_runner = web.AppRunner(web.Application())
    await app_runner.setup()
    site = web.TCPSite(app_runner, "127.0.0.1", 0)
    await site.start()
    port = app_runner.addresses[0][1]
    await app_runner.cleanup()  # the port is now closed
    source = opensearch.OpenSearchSource(cfg(f"http://127.0.0.1:{port}"))
    with pytest.raises(errors.TracesBackendError, match="unreachable"):
        await read_spans(source)


async def test_logs_need_a_logs_index(fake: FakeOpenSearch) -> None:
    source = opensearch.OpenSearchSource(cfg(fake.url))
    with pytest.raises(errors.TracesNotEnabled, match="logs_index"):
        await source.logs("run-42")
    log = {
        "traceId": TRACE_ID,
        "spanId": "t1",
        "time": "2026-01-05T10:00:01.5Z",
        "severityText": "ERROR",
        "body": "search_logs: upstream 500",
        "log.attributes.agent_health@run_id": "run-42",
    }
    fake.answers = [lambda body: [log]]
    source = opensearch.OpenSearchSource(cfg(fake.url, logs_index="logs-otel-v1-*"))
    try:
        [record] = await source.logs("run-42", TRACEPARENT)
    finally:
        await source.aclose()
    assert (record.severity, record.body, record.span_id) == ("ERROR", log["body"], "t1")
    assert record.attributes["agent_health.run_id"] == "run-42"
    assert fake.requests[-1]["index"] == "logs-otel-v1-*"


def test_time_parsing() -> None:
    assert opensearch.parse_time("1970-01-01T00:00:01.500000000Z") == 1500.0
    assert opensearch.parse_time("1970-01-01T00:00:01Z") == 1000.0
    assert opensearch.parse_time(1234) == 1234.0
    assert opensearch.parse_time("nonsense") is None
    assert opensearch.parse_time(None) is None


@pytest.mark.slow
async def test_a_suite_gates_on_opensearch_tokens(
    fake: FakeOpenSearch, write_suite: Any, triage_url: str
) -> None:
    def for_the_queried_trace(body: dict[str, Any]) -> Docs:
        return queried(body, TRACE)

    fake.answers = [for_the_queried_trace]
    suite: Path = write_suite(
        **{
            "agent-health.config.py": f"""
            from agent_health import define_config

            config = define_config(
                agents={{"triage": {{"connector": "rest", "url": "{triage_url}"}}}},
                traces={{"opensearch": {{"hosts": ["{fake.url}"], "wait_seconds": 5,
                                         "poll_seconds": 0.05}}}},
            )
            """,
            "test_tokens.py": """
            from agent_health import test

            @test("few tokens")
            async def few(agent, expect, traces):
                result = await agent.run("Diagnose the payment service")
                expect(await result.traces.total_tokens()).to_be_less_than(1000)
                expect(await traces.llm_calls()).to_equal(2)

            @test("too many tokens")
            async def many(agent, expect):
                result = await agent.run("Diagnose the payment service")
                trace = await result.traces.load()
                expect(trace.total_tokens).to_be_less_than(100)
            """,
        }
    )
    run = await run_cli(suite)
    assert run.by_name("few tokens")["status"] == "passed"
    many = run.by_name("too many tokens")
    assert many["status"] == "failed"
    assert many["signals"][0]["evidence"]["actual"] == 400
    assert run.code == 1
    assert len(fake.requests) == 2


OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"
FOREIGN: Docs = [
    # another trace, no run id: another run's model call
    span_doc(
        "x1",
        "chat gpt-4o",
        "x0",
        gen_ai__operation__name="chat",
        gen_ai__usage__input_tokens=9000,
        gen_ai__usage__output_tokens=1000,
    )
    | {"traceId": OTHER_TRACE},
    # this trace, but naming another run (an agent that reused the trace id)
    span_doc(
        "x2",
        "chat gpt-4o",
        "a1",
        gen_ai__operation__name="chat",
        agent_health__run_id="run-other",
        gen_ai__usage__input_tokens=5000,
        gen_ai__usage__output_tokens=500,
    ),
]
OURS_ELSEWHERE = span_doc(
    "y1",
    "execute_tool service_status",
    "a1",
    gen_ai__operation__name="execute_tool",
    gen_ai__tool__name="service_status",
    agent_health__run_id="run-42",
) | {"traceId": OTHER_TRACE}  # another trace, but it names this run: ours


async def test_the_source_drops_spans_of_other_runs(fake: FakeOpenSearch) -> None:
    fake.answers = [lambda body: [*TRACE, *FOREIGN, OURS_ELSEWHERE]]
    spans = await read_spans(opensearch.OpenSearchSource(cfg(fake.url)))
    assert sorted(s.span_id for s in spans) == ["a1", "c1", "c2", "t1", "y1"]


async def test_only_foreign_spans_is_no_trace_and_says_so(fake: FakeOpenSearch) -> None:
    fake.answers = [lambda body: FOREIGN]
    source = opensearch.OpenSearchSource(cfg(fake.url, wait_seconds=0))
    with pytest.raises(
        errors.TracesNotFound, match="2 spans of other runs were returned and dropped"
    ):
        await read_spans(source)


class OverReturning:
    """A remote source that returns whatever the backend had, other runs included."""

    name = "opensearch"
    remote = True
    run_id_attribute = "agent_health.run_id"

    async def spans(self, run_id: str, traceparent: str | None) -> list[Any]:
        return [opensearch.parse_span(d) for d in (*TRACE, *FOREIGN, OURS_ELSEWHERE)]

    async def logs(self, run_id: str, traceparent: str | None = None) -> list[Any]:
        mine = {"traceId": TRACE_ID, "body": "search_logs: upstream 503", "severityText": "ERROR"}
        theirs = {"traceId": OTHER_TRACE, "body": "another tenant's secret"}
        return [opensearch.parse_log(d) for d in (mine, theirs)]


async def test_the_view_trusts_no_backend() -> None:
    run = RunResult(run_id="run-42", prompt="p", traceparent=TRACEPARENT)
    traces = view.TracesView(run, [OverReturning()])
    snapshot = await traces.load()
    assert sorted(s.span_id for s in snapshot.spans) == ["a1", "c1", "c2", "t1", "y1"]
    assert snapshot.foreign == 2
    assert await traces.total_tokens() == 400  # the foreign 15,500 tokens are not counted
    assert await traces.tool_histogram() == {"search_logs": 1, "service_status": 1}
    assert [r.body for r in await traces.logs()] == ["search_logs: upstream 503"]
