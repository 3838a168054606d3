"""The judge's trace_query tools read OpenSearch when the run's traces come from there.

A real run through the CLI: the example agent on loopback, the OpenSearch stand-in
(``tests/support/opensearch_support.py``) holding this run's OTel spans plus another run's, and a
scripted OpenAI-compatible judge that calls every tool of the pack. What the judge got back
must be the OpenSearch spans (never ``step-N`` spans made from the trajectory), and only
this run's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli
from support.judge_servers import Answer, Calls, ScriptedModel
from support.opensearch_support import TRACE, Docs, queried, serving, span_doc

LOG_INDEX = "logs-otel-v1-*"
TESTS = """
from agent_health import test

@test("agentic judge over OpenSearch")
async def agentic(agent, judge, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result.traces.source).to_equal("opensearch")
    await judge(result, "the log search failed and the agent said so", tools=["trace_query"])
    expect(await result.traces.total_tokens()).to_equal(400)
"""


def _other_runs(body: dict[str, Any]) -> Docs:
    """This run's trace, plus a span of another trace and one naming another run."""
    foreign = span_doc(
        "zz",
        "chat gpt-4o",
        "q0",
        gen_ai__operation__name="chat",
        gen_ai__usage__input_tokens=9000,
        gen_ai__usage__output_tokens=900,
    ) | {"traceId": "0af7651916cd43dd8448eb211c80319c"}
    theirs = span_doc("yy", "execute_tool secrets", "a1", agent_health__run_id="run-other")
    ours = queried(body, [*TRACE, theirs])
    return [*ours[:-1], ours[-1] | {"span.attributes.agent_health@run_id": "run-other"}, foreign]


def _logs(body: dict[str, Any]) -> Docs:
    trace_id = queried(body, TRACE)[0]["traceId"]
    return [
        {"traceId": trace_id, "spanId": "t1", "severityText": "ERROR", "body": "logs-api 503"},
        {"traceId": "0af7651916cd43dd8448eb211c80319c", "body": "another run's log"},
    ]


@pytest.mark.slow
async def test_the_tool_pack_reads_opensearch(
    write_suite: Any, triage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = await ScriptedModel.start(
        "openai",
        script=[
            Calls((("get_spans", {}),)),
            Calls((("query", {"text": "search_logs"}), ("metrics", {}))),
            Calls((("get_logs", {"level": "error"}),)),
            Calls((("submit_verdict", {"passed": True, "score": 1.0, "reasoning": "t1"}),)),
        ],
        default=Answer(True),
    )
    monkeypatch.setenv("SCRIPTED_JUDGE_KEY", "sk-scripted")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    try:
        async with serving() as fake:
            # Spans and logs live in two indexes; a log query filters on log attributes.
            fake.answers = [
                lambda body: (
                    _logs(body) if "log.attributes." in json.dumps(body) else _other_runs(body)
                )
            ]
            config = f"""
from agent_health import define_config

config = define_config(
    agents={{"triage": {{"connector": "rest", "url": "{triage_url}"}}}},
    judge={{"model": "scripted-judge", "base_url": "{judge.url}",
            "api_key_env": "SCRIPTED_JUDGE_KEY"}},
    traces={{"opensearch": {{"hosts": ["{fake.url}"], "logs_index": "{LOG_INDEX}",
                             "wait_seconds": 5, "poll_seconds": 0.05}}}},
)
"""
            suite = write_suite(**{"agent-health.config.py": config, "test_os.py": TESTS})
            run = await run_cli(suite)
            indexes = [r["index"] for r in fake.requests]
    finally:
        await judge.close()
    test = run.by_name("agentic judge over OpenSearch")
    assert test["status"] == "passed", (test["error"], test["signals"])
    assert LOG_INDEX in indexes
    # The last request carries the whole conversation: every tool answer, in order.
    answers = [m["content"] for m in judge.requests[-1].body["messages"] if m["role"] == "tool"]
    spans = json.loads(answers[0])
    assert [s["span_id"] for s in spans] == ["a1", "c1", "t1", "c2"]  # no step-N, no foreign
    assert not any(s["span_id"].startswith("step-") for s in spans)
    assert {s["kind"] for s in spans} == {"invoke_agent", "chat", "execute_tool"}
    queried_spans, metrics = json.loads(answers[1]), json.loads(answers[2])
    assert [r["span_id"] for r in queried_spans] == ["t1"]
    assert metrics["trace"]["source"] == "opensearch"
    assert metrics["trace"]["total_tokens"] == 400  # not 10,300 with the foreign span
    assert metrics["trace"]["tool_histogram"] == {"search_logs": 1}
    assert metrics["tool_calls"] == 2  # the derived metrics are there too
    logs = json.loads(answers[3])
    assert [(r["message"], r["level"]) for r in logs] == [("logs-api 503", "error")]
    everything = json.dumps([r.body for r in judge.requests])
    assert "another run's log" not in everything
    assert "execute_tool secrets" not in everything
