"""Insights as the RFC has them: a per-test override, signals/metrics/tools by name, a
run-level rollup that synthesises (one judge-model call, or a deterministic grouping), the
judge cache behind ``llm``, and the ledger keeping them for ``agent-health grade``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine.reports import rollup
from agent_health.sdk.results import Signal, TestResult
from support.helpers import run_cli
from support.judge_servers import USAGE_IN, USAGE_OUT, Action, ScriptedModel, Text, prompt_text

CONFIG = """
from agent_health import define_config

async def explain(result, llm):
    why = await llm(f"why did {result.title} end {result.status}?") if llm else None
    tips = ["retry search_logs when it fails"] if result.status == "failed" else []
    return {"summary": f"config says {result.status}", "why": why, "recommendations": tips}

config = define_config(
    agents={"triage": {"connector": "rest", "url": "URL"}},
    JUDGE
    insights=explain,
)
"""

TESTS = """
from agent_health import test

async def own(signals, metrics, tools):
    spans = await tools.get_spans(kind="tool_call")
    failed = [s.name for s in signals if s.passed is False]
    return {
        "summary": f"{metrics['tool_calls']} tool calls, {len(spans)} tool spans",
        "why": "; ".join(failed) or None,
        "recommendations": ["Retry search_logs on failure"] if failed else [],
    }

@test("own insights", insights=own)
async def with_own(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("restart_pod")

@test("config insights")
async def with_config(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("restart_pod")

@test("no insights", insights=False)
async def without(agent):
    await agent.run("Diagnose the payment service")
"""

ROLLUP = {
    "summary": "The agent never restarts the failing pod.",
    "recommendations": [
        {
            "text": "Restart the pod after diagnosing it",
            "tests": ["test_i.py::own insights", "test_i.py::config insights", "not a test"],
        }
    ],
}


def _answer(body: Mapping[str, Any]) -> Action:
    text = prompt_text(body)
    if "## TESTS" in text:
        return Text(json.dumps(ROLLUP))
    return Text(f"because: {text}")


def _suite(write_suite: Any, triage_url: str, judge: str = "") -> Path:
    config = CONFIG.replace("URL", triage_url).replace("JUDGE", judge)
    return write_suite(**{"agent-health.config.py": config, "test_i.py": TESTS})  # type: ignore[no-any-return]


async def test_per_test_insights_take_signals_metrics_and_tools(
    write_suite: Any, triage_url: str
) -> None:
    run = await run_cli(_suite(write_suite, triage_url))
    own = run.by_name("own insights")["insights"]
    assert own["summary"] == "2 tool calls, 2 tool spans"  # tools: the run's trace_query pack
    assert own["why"] == "to_have_called_tool('restart_pod')"
    config = run.by_name("config insights")["insights"]
    assert config == {
        "summary": "config says failed",
        "why": None,  # no judge model: llm is None
        "recommendations": ["retry search_logs when it fails"],
    }
    assert run.by_name("no insights")["insights"] is None
    # Without a model the rollup groups: the two wordings are one recommendation.
    summary = run.report["summary"]
    assert summary["insights"]["source"] == "grouped"
    [item] = summary["insights"]["recommendations"]
    assert item["tests"] == ["test_i.py::config insights", "test_i.py::own insights"]
    assert summary["recommendations"] == [{"text": item["text"], "tests": 2}]
    assert (
        "to_have_called_tool('restart_pod') failed in 2 of 3 tests"
        in (summary["insights"]["patterns"])
    )


def test_a_bad_insights_option_is_a_load_error(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{
            "test_bad.py": """
            from agent_health import test

            @test("wrong", insights="explain")
            async def wrong(agent):
                pass
            """
        }
    )
    assert cli.main(["list", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "test 'wrong': insights= takes a function (or False for none)" in " ".join(err.split())


@pytest.mark.slow
async def test_rollup_synthesises_once_and_identical_runs_ask_nothing_new(
    write_suite: Any, triage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = await ScriptedModel.start("openai", default=_answer)
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
    judge = f'judge={{"provider": "openai", "model": "m", "base_url": "{model.url}"}},'
    ledger = tmp_path / "ledger"
    try:
        suite = _suite(write_suite, triage_url, judge)
        first = await run_cli(suite, "--ledger", f"file://{ledger}")
        asked = len(model.requests)
        second = await run_cli(suite)
    finally:
        await model.close()
    # One question per test that uses llm (the config's function) and one for the rollup.
    assert asked == 2
    assert sum("## TESTS" in prompt_text(r.body) for r in model.requests) == 1
    # The identical second run was answered from the judge cache: no new model call.
    assert len(model.requests) == asked
    assert second.report["summary"]["insights"] == first.report["summary"]["insights"]
    # The questions are the run's judge usage (no judge() call here): spent, then cached.
    spent = first.report["summary"]["judge_tokens"]
    assert (spent["calls"], spent["asks"], spent["asks_cached"]) == (2, 2, 0)
    assert (spent["input_tokens"], spent["output_tokens"]) == (2 * USAGE_IN, 2 * USAGE_OUT)
    again = second.report["summary"]["judge_tokens"]
    assert (again["asks"], again["asks_cached"], again["total_tokens"]) == (2, 2, 0)
    assert (
        second.by_name("config insights")["insights"]
        == (first.by_name("config insights")["insights"])
    )
    insights = first.report["summary"]["insights"]
    assert (insights["source"], insights["summary"], insights["error"]) == (
        "llm",
        ROLLUP["summary"],
        None,
    )
    # A test id the model made up is dropped; the real ones are kept.
    assert insights["recommendations"] == [
        {
            "text": "Restart the pod after diagnosing it",
            "tests": ["test_i.py::config insights", "test_i.py::own insights"],
        }
    ]
    assert first.by_name("config insights")["insights"]["why"].startswith(
        "because: why did config insights end failed?"
    )
    # The ledger keeps each test's insights: a re-grade reports them as the run did.
    out = tmp_path / "regraded.json"
    argv = ["grade", f"file://{ledger}", "--key-file", f"{ledger}.key", "--reporter", f"json:{out}"]
    assert await asyncio.to_thread(cli.main, argv) == first.code
    regraded = {t["name"]: t["insights"] for t in json.loads(out.read_text())["tests"]}
    assert regraded == {t["name"]: t["insights"] for t in first.report["tests"]}
    assert regraded["no insights"] is None


def _result(test_id: str, status: str = "failed", **fields: Any) -> TestResult:
    return TestResult(
        id=test_id,
        name=test_id,
        title=test_id,
        file="t.py",
        line=1,
        status=status,  # type: ignore[arg-type]
        cause="agent" if status == "errored" else None,
        run_id="r",
        **fields,
    )


def _insights(*tips: str) -> dict[str, Any]:
    return {"summary": "s", "why": None, "recommendations": list(tips)}


def test_grouping_merges_wordings_and_reads_signals_and_metrics() -> None:
    failed = Signal(kind="deterministic", role="gate", name="to_equal(1)", passed=False)
    results = [
        _result("a", insights=_insights("Retry search_logs when it fails", "cache results"),
                signals=(failed,), metrics={"redundant_tool_calls": 2,
                                            "tool_histogram": {"search_logs": 4}}),
        _result("a", insights=_insights("retry search_logs on failure"), repeat=1),
        _result("b", insights=_insights("retry the search_logs tool on failures"),
                signals=(failed,), metrics={"redundant_tool_calls": 1,
                                            "tool_histogram": {"search_logs": 3}}),
        _result("c", status="passed", insights={"error": "boom"}),
        _result("d", status="skipped"),
    ]  # fmt: skip
    found = rollup.group(results)
    assert found is not None
    assert found.source == "grouped"
    # Three wordings, one recommendation: the most common wording (here all are made by
    # one test each, so the shortest) stands for them.
    assert [(i.text, i.tests) for i in found.recommendations] == [
        ("retry search_logs on failure", ["a", "b"]),
        ("cache results", ["a"]),
    ]
    assert found.patterns == [
        "to_equal(1) failed in 2 of 3 tests",
        "2 of 3 tests made redundant tool calls (3 in all)",
        "the agent over-calls search_logs: 3+ calls in 2 of 3 tests",
    ]
    assert found.summary.startswith("2 of 3 tests explained; 2 failed or errored")
    assert rollup.group([_result("x", insights={"error": "boom"})]) is None


async def test_synthesis_falls_back_to_grouping_and_says_why() -> None:
    results = [_result("a", insights=_insights("retry search_logs"))]
    asked: list[str] = []

    async def prose(text: str) -> str:
        asked.append(text)
        return "The agent should retry."

    found = await rollup.synthesise(results, prose)
    assert found is not None
    assert (found.source, len(asked)) == ("grouped", 1)
    assert "not the JSON asked for" in (found.error or "")

    async def down(text: str) -> str:
        raise ConnectionError("judge unreachable")

    found = await rollup.synthesise(results, down)
    assert found is not None
    assert found.error == "the judge model could not roll up: ConnectionError: judge unreachable"

    async def fenced(text: str) -> str:
        return "```json\n" + json.dumps({"summary": "ok", "recommendations": []}) + "\n```"

    found = await rollup.synthesise(results, fenced)
    assert found is not None
    assert (found.source, found.summary) == ("llm", "ok")
    # The question holds no run ids or timings: identical runs ask identical questions.
    again = [_result("a", insights=_insights("retry search_logs"), duration_ms=99.0)]
    assert rollup.prompt(results) == rollup.prompt(again)
