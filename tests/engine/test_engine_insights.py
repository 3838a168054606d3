"""Insights after the body, metric signals, and result.traces inside a real run."""

from __future__ import annotations

from typing import Any

from agent_health.engine.reports import insights
from agent_health.sdk.results import TestResult
from support.helpers import run_cli

CONFIG = """
from agent_health import define_config

async def explain(result, traces, llm):
    if "boom" in result.title:
        raise RuntimeError("insights crashed")
    if "bad" in result.title:
        return "not a dict"
    tools = await traces.tool_histogram() if traces else {{}}
    return {{
        "summary": f"{{result.status}} with {{result.metrics.get('tool_calls')}} tool calls",
        "why": None if result.status == "passed" else "a gate failed",
        "recommendations": [f"look at {{name}}" for name in sorted(tools)],
        "llm_available": llm is not None,
    }}

config = define_config(
    agents={{"triage": {{"connector": "rest", "url": "{url}"}}}},
    prices={{"default": {{"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}},
    insights=explain,
    {extra}
)
"""

TESTS = """
from agent_health import test

@test("ok", labels=["smoke"])
async def ok(agent, expect):
    result = await agent.run("Diagnose the payment service")
    metrics = await result.traces.metrics()
    expect(metrics["tool_calls"]).to_be_less_than(5)

@test("fails")
async def fails(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("restart_pod")

@test("boom")
async def boom(agent):
    await agent.run("Diagnose the payment service")

@test("bad answer")
async def bad(agent):
    await agent.run("Diagnose the payment service")
"""


async def test_insights_run_after_the_body_and_never_change_the_status(
    write_suite: Any, triage_url: str
) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": CONFIG.format(url=triage_url, extra=""),
            "test_x.py": TESTS,
        }
    )
    run = await run_cli(suite)
    ok = run.by_name("ok")
    assert ok["status"] == "passed"
    assert ok["insights"] == {
        "summary": "passed with 2 tool calls",
        "why": None,
        "recommendations": ["look at search_logs", "look at service_status"],
        "llm_available": False,
    }
    fails = run.by_name("fails")
    assert fails["status"] == "failed"
    assert fails["insights"]["why"] == "a gate failed"
    boom = run.by_name("boom")
    assert boom["status"] == "passed"
    assert boom["insights"] == {
        "error": "insights function explain raised RuntimeError: insights crashed"
    }
    bad = run.by_name("bad answer")
    assert bad["status"] == "passed"
    assert "returned str, not {summary, why, recommendations}" in bad["insights"]["error"]
    # derived metrics are on every test, also as observe-role metric signals
    metric_signals = {s["name"]: s for s in ok["signals"] if s["kind"] == "metric"}
    assert set(metric_signals) >= {"total_tokens", "cost_usd", "redundant_tool_calls"}
    assert all(s["role"] == "observe" and s["passed"] is None for s in metric_signals.values())
    assert metric_signals["tool_calls"]["evidence"] == {"value": 2}
    assert ok["metrics"]["cost_usd"] > 0
    assert run.report["summary"]["cost_usd"] > 0
    assert run.code == 1


async def test_traces_disabled_for_the_agent_is_a_clear_error(
    write_suite: Any, triage_url: str
) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": CONFIG.format(
                url=triage_url, extra='traces={"enabled": ["another-agent"]},'
            ),
            "test_x.py": """
            from agent_health import test

            @test("reads traces")
            async def reads(agent, expect):
                result = await agent.run("Diagnose the payment service")
                expect(await result.traces.total_tokens()).to_be_less_than(10)

            @test("metrics without traces")
            async def metrics_only(agent):
                await agent.run("Diagnose the payment service")
            """,
        }
    )
    run = await run_cli(suite)
    reads = run.by_name("reads traces")
    assert reads["status"] == "errored"
    assert reads["error"] == (
        "traces not enabled for agent triage; set traces.enabled in agent-health.config.py "
        "(True, or a list of agent names)"
    )
    assert reads["insights"]["summary"].startswith("errored")  # traces passed as None
    other = run.by_name("metrics without traces")
    assert other["status"] == "passed"
    assert other["metrics"]["tool_histogram"] == {"search_logs": 1, "service_status": 1}


async def test_traces_fixture_before_the_run_and_a_metric_gate(
    write_suite: Any, triage_url: str
) -> None:
    suite = write_suite(
        **{
            "test_x.py": """
            from agent_health import test

            @test("too early")
            async def early(traces):
                await traces.spans()

            @test("token gate")
            async def gate(agent, expect, traces):
                await agent.run("Diagnose the payment service")
                spans = await traces.spans()
                expect([s.operation for s in spans][0]).to_equal("invoke_agent")
                expect(await traces.total_tokens()).to_be_less_than(5)
            """,
        }
    )
    run = await run_cli(suite, "--agent", f"rest+{triage_url}")
    early = run.by_name("too early")
    assert early["status"] == "errored"
    assert "exist only after agent.run()" in early["error"]
    gate = run.by_name("token gate")
    assert gate["status"] == "failed"
    failed = [s for s in gate["signals"] if s["role"] == "gate" and s["passed"] is False]
    assert failed[0]["name"] == "to_be_less_than(5)"
    assert failed[0]["evidence"]["actual"] == gate["metrics"]["total_tokens"]
    assert gate["insights"] is None  # off by default


def result(**kw: Any) -> TestResult:
    base: dict[str, Any] = {
        "id": "f::t",
        "name": "t",
        "title": "t",
        "file": "f",
        "line": 1,
        "status": "passed",
        "run_id": "r",
    }
    return TestResult(**{**base, **kw})


async def test_explain_passes_parameters_by_name_and_reports_errors() -> None:
    async def only_result(result: TestResult) -> dict[str, Any]:
        return {"summary": result.status}

    found = await insights.explain(
        only_result, result(), run=None, traces=None, llm=None, timeout=5
    )
    assert found == {"summary": "passed", "why": None, "recommendations": []}

    async def with_llm(result: TestResult, llm: Any) -> dict[str, Any]:
        return {"summary": await llm(f"explain {result.id}")}

    async def echo(prompt: str) -> str:
        return prompt.upper()

    found = await insights.explain(with_llm, result(), run=None, traces=None, llm=echo, timeout=5)
    assert found["summary"] == "EXPLAIN F::T"

    def wrong(outcome: Any) -> dict[str, Any]:
        return {}

    found = await insights.explain(wrong, result(), run=None, traces=None, llm=None, timeout=5)
    assert "unknown parameter 'outcome'" in found["error"]

    def no_summary(result: TestResult) -> dict[str, Any]:
        return {"why": "x"}

    found = await insights.explain(no_summary, result(), run=None, traces=None, llm=None, timeout=5)
    assert "summary: Field required" in found["error"]


async def test_insights_ask_the_judge_model_through_llm(
    write_suite: Any, triage_url: str, monkeypatch: Any, tmp_path: Any
) -> None:
    from support.judge_servers import ScriptedModel, Text

    model = await ScriptedModel.start("openai", default=Text("the log tool was slow"))
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    try:
        config = """
from agent_health import define_config

async def explain(result, llm):
    why = await llm(f"why did {result.title} end {result.status}?")
    return {"summary": result.status, "why": why, "recommendations": []}

config = define_config(
    agents={"triage": {"connector": "rest", "url": "URL"}},
    judge={"provider": "openai", "model": "m", "base_url": "BASE"},
    insights=explain,
)
""".replace("URL", triage_url).replace("BASE", model.url)
        suite = write_suite(**{"agent-health.config.py": config, "test_x.py": TESTS})
        run = await run_cli(suite, "--grep", "^ok$")
    finally:
        await model.close()
    assert run.by_name("ok")["insights"]["why"] == "the log tool was slow"
    # The test's question first; then the one run-level rollup question.
    assert "why did ok end passed?" in str(model.requests[0].body)
    assert len(model.requests) == 2
