"""The OpenSearch source against a loopback server answering recorded-shape ``_search`` replies.

There is no OpenSearch server on these machines: the real opensearch-py ``AsyncOpenSearch``
client talks HTTP to an aiohttp server on 127.0.0.1 that records each query and answers
with documents in the shape Data Prepper indexes OTel spans (``otel-v1-apm-span-*``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from agent_health.sdk.results import RunResult
from agent_health.traces import errors, opensearch, settings, view
from aiohttp import web
from helpers import run_cli

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
Docs = list[dict[str, Any]]


def span_doc(span_id: str, name: str, parent: str, **attrs: Any) -> dict[str, Any]:
    """One span as Data Prepper stores it (attribute dots written as '@')."""
    status = attrs.pop("status_code", 0)
    doc = {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "traceState": "",
        "parentSpanId": parent,
        "name": name,
        "kind": "SPAN_KIND_INTERNAL",
        "startTime": attrs.pop("start", "2026-01-05T10:00:00.000000000Z"),
        "endTime": attrs.pop("end", "2026-01-05T10:00:01.250000000Z"),
        "durationInNanos": 1_250_000_000,
        "serviceName": "triage-agent",
        "events": [],
        "links": [],
        "droppedAttributesCount": 0,
        "traceGroup": "invoke_agent triage",
        "traceGroupFields.endTime": "2026-01-05T10:00:03.000000000Z",
        "traceGroupFields.statusCode": 0,
        "traceGroupFields.durationInNanos": 3_000_000_000,
        "resource.attributes.service@name": "triage-agent",
        "status.code": status,
    }
    for key, value in attrs.items():
        doc["span.attributes." + key.replace("__", "@")] = value
    return doc


TRACE: Docs = [
    span_doc(
        "a1",
        "invoke_agent triage",
        "00f067aa0ba902b7",
        gen_ai__operation__name="invoke_agent",
        agent_health__run_id="run-42",
        start="2026-01-05T10:00:00.000000000Z",
        end="2026-01-05T10:00:03.000000000Z",
    ),
    span_doc(
        "c1",
        "chat gpt-4o-mini",
        "a1",
        gen_ai__operation__name="chat",
        gen_ai__request__model="gpt-4o-mini",
        gen_ai__usage__input_tokens=120,
        gen_ai__usage__output_tokens="30",
    ),
    span_doc(
        "t1",
        "execute_tool search_logs",
        "a1",
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name="search_logs",
        status_code=2,
    ),
    span_doc(
        "c2",
        "chat gpt-4o-mini",
        "a1",
        gen_ai__request__model="gpt-4o-mini",
        gen_ai__usage__input_tokens=200,
        gen_ai__usage__output_tokens=50,
        start="2026-01-05T10:00:02.123456789Z",
        end="2026-01-05T10:00:02.623456789Z",
    ),
]


@dataclass
class FakeOpenSearch:
    """Answers each ``_search`` with the next page of ``answers`` (the last one repeats)."""

    url: str = ""
    answers: list[Callable[[dict[str, Any]], Docs]] = field(default_factory=list)
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def search(self, request: web.Request) -> web.Response:
        body = json.loads(await request.text() or "{}")
        self.requests.append(
            {
                "method": request.method,
                "index": request.match_info["index"],
                "body": body,
                "auth": request.headers.get("Authorization"),
            }
        )
        if self.status != 200:
            return web.json_response(
                {"error": {"type": "security_exception", "reason": "no"}, "status": self.status},
                status=self.status,
            )
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        docs = answer(body)
        return web.json_response(
            {
                "took": 4,
                "timed_out": False,
                "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                "hits": {
                    "total": {"value": len(docs), "relation": "eq"},
                    "max_score": 1.0 if docs else None,
                    "hits": [
                        {
                            "_index": "otel-v1-apm-span-000001",
                            "_id": d.get("spanId", str(i)),
                            "_score": 1.0,
                            "_source": d,
                        }
                        for i, d in enumerate(docs)
                    ],
                },
            }
        )


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenSearch]:
    server = FakeOpenSearch(answers=[lambda body: TRACE])
    app = web.Application()
    app.router.add_route("*", "/{index}/_search", server.search)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()


def cfg(url: str, **kw: Any) -> settings.OpenSearchSettings:
    return settings.OpenSearchSettings(
        hosts=[url], **{"wait_seconds": 2, "poll_seconds": 0.05, **kw}
    )


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
    traces_cfg = settings.TracesSettings(
        opensearch=cfg(fake.url),
        prices={"gpt-4o-mini": settings.Price(input_per_mtok=0.15, output_per_mtok=0.6)},
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
        trace_id = next(
            c["term"]["traceId"] for c in body["query"]["bool"]["should"] if "traceId" in c["term"]
        )
        return [{**doc, "traceId": trace_id} for doc in TRACE]

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
