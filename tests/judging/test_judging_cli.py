"""End to end: the CLI runs suites whose judge() calls reach a scripted model on loopback."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.helpers import run_cli
from support.judge_servers import ScriptedModel, Status, quoted_rule

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
from agent_health import define_config

async def has_host(result, criteria):
    return "db-primary" in result.output

config = define_config(
    judge={"model": "placeholder", "retry": {"max_attempts": 2, "initial_wait": 0.001,
                                             "max_wait": 0.01, "max_time": 10}},
    evaluators={"has_host": has_host},
)
"""

SUITE = """
from agent_health import test

@test("judged pass")
async def judged_pass(agent, judge):
    result = await agent.run("Diagnose the payment service")
    await judge(result, 'says "db-primary"')

@test("judged fail")
async def judged_fail(agent, judge):
    result = await agent.run("Diagnose the payment service")
    await judge(result, 'says "kubernetes upgrade"')

@test("observed")
async def observed(agent, judge):
    result = await agent.run("Diagnose the payment service")
    await judge.observe(result, 'says "a haiku"')

@test("agentic")
async def agentic(agent, judge):
    result = await agent.run("Diagnose the payment service")
    await judge(result, 'says "db-primary"', tools=["trace_query"])

@test("custom")
async def custom(agent, judge):
    result = await agent.run("Diagnose the payment service")
    await judge(result, "names the host", evaluator="has_host")

@test("no judge at all")
async def plain(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result.output).to_contain("db-primary")
"""


def _judge_env(monkeypatch: pytest.MonkeyPatch, server: ScriptedModel, cache: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_PROVIDER", "openai")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_MODEL", "scripted-judge")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_BASE_URL", server.url)
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_API_KEY_ENV", "SCRIPTED_JUDGE_KEY")
    monkeypatch.setenv("SCRIPTED_JUDGE_KEY", "sk-scripted")
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(cache))
    monkeypatch.delenv("AGENT_HEALTH_SKIP_JUDGE", raising=False)


def _judge_signal(test: dict[str, Any]) -> dict[str, Any]:
    [signal] = [s for s in test["signals"] if s["kind"] == "judge"]
    return signal


@pytest.mark.slow
async def test_judged_suite_then_cached_rerun(
    write_suite: Any, triage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedModel.serving(
        "openai", default=quoted_rule, api_key="sk-scripted"
    ) as server:
        suite = write_suite(**{"agent-health.config.py": CONFIG, "test_judged.py": SUITE})
        _judge_env(monkeypatch, server, tmp_path / "cache" / "judge.sqlite")
        agent = ("--agent", f"rest+{triage_url}")
        first = await run_cli(suite, *agent)
        calls_after_first = len(server.requests)
        second = await run_cli(suite, *agent)
        calls_after_second = len(server.requests)
        bypass = await run_cli(suite, *agent, "--no-cache")

    assert first.code == 1  # "judged fail" failed
    statuses = {t["name"]: t["status"] for t in first.report["tests"]}
    assert statuses == {
        "judged pass": "passed",
        "judged fail": "failed",
        "observed": "passed",
        "agentic": "passed",
        "custom": "passed",
        "no judge at all": "passed",
    }
    passed = _judge_signal(first.by_name("judged pass"))
    assert passed["role"] == "gate"
    assert passed["passed"] is True
    assert "'db-primary' found" in passed["reasoning"]
    assert passed["evidence"]["cached"] is False
    assert passed["evidence"]["model"] == "scripted-judge"
    failed = _judge_signal(first.by_name("judged fail"))
    assert (failed["passed"], failed["score"]) == (False, 0.0)
    observed = _judge_signal(first.by_name("observed"))
    assert (observed["role"], observed["passed"]) == ("observe", False)
    assert first.by_name("observed")["score"] == 0.0  # scored, but it does not gate
    assert _judge_signal(first.by_name("custom"))["evidence"]["model"] is None
    # contextual x3 (one call each) + agentic (get_spans, then submit_verdict)
    assert calls_after_first == 5
    usage = first.report["summary"]["judge_tokens"]
    assert usage["calls"] == 5
    assert usage["cached"] == 0
    assert usage["total_tokens"] == 5 * 120
    assert first.report["summary"]["tokens"] != usage["total_tokens"]

    assert second.code == 1
    assert calls_after_second == calls_after_first  # every verdict came from the cache
    for test in second.report["tests"]:
        if test["name"] != "no judge at all":
            assert _judge_signal(test)["evidence"]["cached"] is True, test["name"]
        assert test["status"] == statuses[test["name"]]
    assert second.report["summary"]["judge_tokens"]["cached"] == 5
    assert second.report["summary"]["judge_tokens"]["total_tokens"] == 0
    assert second.report["summary"]["judge_tokens"]["saved_tokens"] == 5 * 120

    assert bypass.report["summary"]["judge_tokens"]["cached"] == 0
    assert all(
        _judge_signal(t)["evidence"]["cached"] is False
        for t in bypass.report["tests"]
        if t["name"] != "no judge at all"
    )


@pytest.mark.slow
async def test_judge_down_makes_tests_errored_and_the_run_goes_on(
    write_suite: Any, triage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedModel.serving("openai", default=Status(500, "model is on fire")) as server:
        suite = write_suite(**{"agent-health.config.py": CONFIG, "test_judged.py": SUITE})
        _judge_env(monkeypatch, server, tmp_path / "judge.sqlite")
        run = await run_cli(suite, "--agent", f"rest+{triage_url}")
        again = await run_cli(suite, "--agent", f"rest+{triage_url}")
    assert run.code == 3  # errored only: nothing failed
    for name in ("judged pass", "judged fail", "agentic"):
        test = run.by_name(name)
        assert test["status"] == "errored", name
        assert "HTTP 500: model is on fire" in test["error"]
        assert "gave up after 2 attempts" in test["error"]
        assert test["score"] is None
    # An observation never changes the gate: the unreachable judge is recorded on the
    # verdict, and the test (no gates of its own) stays passed.
    observed = run.by_name("observed")
    assert (observed["status"], observed["error"], observed["score"]) == ("passed", None, None)
    verdict = _judge_signal(observed)
    assert (verdict["role"], verdict["passed"], verdict["evidence"]["errored"]) == (
        "observe",
        None,
        True,
    )
    assert "HTTP 500: model is on fire" in verdict["error"]
    assert run.by_name("custom")["status"] == "passed"  # needs no model
    assert run.by_name("no judge at all")["status"] == "passed"
    summary = run.report["summary"]
    assert (summary["passed"], summary["failed"], summary["errored"]) == (3, 0, 3)
    assert summary["pass_rate"] == 1.0
    assert summary["judge_tokens"]["errored"] == 4
    # errored verdicts were not cached: the second run asked the model again
    assert again.by_name("judged pass")["status"] == "errored"
    assert len(server.requests) == 2 * 4 * 2


@pytest.mark.slow
async def test_a_missing_judge_key_errors_the_judge_calls_and_the_run_goes_on(
    write_suite: Any,
    triage_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with ScriptedModel.serving("openai", default=quoted_rule) as server:
        suite = write_suite(**{"agent-health.config.py": CONFIG, "test_judged.py": SUITE})
        _judge_env(monkeypatch, server, tmp_path / "judge.sqlite")
        monkeypatch.delenv("SCRIPTED_JUDGE_KEY")
        run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--no-cache")
    assert run.code == 3  # errored only: the deterministic test still ran and passed
    assert run.by_name("no judge at all")["status"] == "passed"
    assert run.by_name("custom")["status"] == "passed"  # needs no model
    for name in ("judged pass", "judged fail", "agentic"):
        test = run.by_name(name)
        assert (test["status"], test["cause"]) == ("errored", "judge"), name
        assert "SCRIPTED_JUDGE_KEY is not set" in test["error"]
        assert "--no-judge" in test["error"]
    assert server.requests == []  # nothing was sent without credentials
    out = capsys.readouterr().out
    assert "hint: judge calls errored (cause judge), the other checks ran" in out
    assert "--no-judge" in out


@pytest.mark.slow
async def test_example_02_runs_against_the_scripted_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = tmp_path / "examples"
    await _copy(ROOT / "examples" / "02-judge", example / "02-judge")
    await _copy(ROOT / "examples" / "agents", example / "agents")
    async with ScriptedModel.serving("openai", default=quoted_rule, api_key="sk-example") as server:
        monkeypatch.setenv("AGENT_HEALTH_JUDGE_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
        monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))
        monkeypatch.chdir(example / "02-judge")
        run = await run_cli(example / "02-judge")
    assert run.code == 0, run.report
    assert {t["status"] for t in run.report["tests"]} == {"passed"}
    assert {r.body["model"] for r in server.requests} == {"gpt-4o-mini"}
    usage = run.report["summary"]["judge_tokens"]
    assert usage["calls"] == 4
    assert usage["cost_usd"] == pytest.approx(
        (usage["input_tokens"] * 0.15 + usage["output_tokens"] * 0.60) / 1e6
    )


async def _copy(source: Path, target: Path) -> None:
    await asyncio.to_thread(
        shutil.copytree, source, target, ignore=shutil.ignore_patterns("__pycache__", ".*")
    )
