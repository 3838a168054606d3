"""The SDK side of judge(): roles, skip modes, no judge configured, backend errors, scores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from agent_health.engine.loading import loader
from agent_health.engine.running import runner, session
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import TestResult
from agent_health.sdk.verdict import Verdict
from support.helpers import run_cli_sync

SUITE = """
from agent_health import test, judge

@test("gate passes")
async def gate_passes(judge):
    v = await judge("the answer is 42", "states a number")
    assert v.skipped or (v.passed and v.role == "gate")

@test("gate fails")
async def gate_fails(judge):
    await judge("hello", "FAIL: says goodbye", weight=3)

@test("observe never gates")
async def observe(judge, expect):
    v = await judge.observe("hello", "FAIL: says goodbye")
    expect(v.role).to_equal("observe")  # a skipped observe verdict keeps its role

@test("gate=False observes")
async def gate_false(judge):
    await judge("hello", "FAIL: anything", gate=False)

@test("module-level judge and to_pass")
async def module_level():
    (await judge("x", "FAIL: impossible")).to_pass()

@test("backend error is errored")
async def backend_error(judge):
    await judge("x", "RAISE")

@test("per-test skip", skip_judge=True)
async def per_test_skip(judge):
    v = await judge("x", "FAIL: would fail")
    assert v.skipped and v.passed is None
"""


class ScriptedBackend:
    """Passes unless the criteria start with FAIL; raises on RAISE."""

    def __init__(self) -> None:
        self.requests: list[JudgeRequest] = []

    async def __call__(self, request: JudgeRequest) -> Verdict:
        self.requests.append(request)
        if request.criteria == "RAISE":
            raise ConnectionError("judge endpoint unreachable")
        failed = request.criteria.startswith("FAIL")
        return Verdict(
            criteria=request.criteria,
            passed=not failed,
            score=0.25 if failed else 0.9,
            reasoning="scripted",
            role=request.role,
        )


async def _run(tmp_path: Path, backend: Any, skip: bool = False) -> dict[str, TestResult]:
    (tmp_path / "test_j.py").write_text(SUITE)
    suite = loader.load([tmp_path])
    env = runner.RunEnv(judge_backend=backend, skip_judge=skip)
    outcome = await session.run(suite.cases, suite.hooks, env)
    return {r.name: r for r in outcome.results}


async def test_roles_and_statuses(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    results = await _run(tmp_path, backend)
    assert results["gate passes"].status == "passed"
    fails = results["gate fails"]
    assert fails.status == "failed"
    assert fails.score == 0.25
    assert fails.signals[0].weight == 3
    assert results["observe never gates"].status == "passed"
    assert results["observe never gates"].signals[0].role == "observe"
    assert results["gate=False observes"].status == "passed"
    module_level = results["module-level judge and to_pass"]
    assert module_level.status == "failed"
    errored = results["backend error is errored"]
    assert errored.status == "errored"
    assert "ConnectionError: judge endpoint unreachable" in (errored.error or "")
    assert errored.score is None
    # Its only gate was a skipped judge call: nothing was checked, so it did not pass.
    assert results["per-test skip"].status == "skipped"
    assert results["per-test skip"].skip_reason == "judge skipped: nothing else checked"
    assert results["per-test skip"].signals[0].role == "neutral"
    assert "RAISE" in [r.criteria for r in backend.requests]
    assert all(r.criteria != "FAIL: would fail" for r in backend.requests)


async def test_skip_mode_makes_every_verdict_neutral(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    results = await _run(tmp_path, backend, skip=True)
    assert backend.requests == []
    for name in ("gate fails", "backend error is errored", "observe never gates"):
        judged = [s for s in results[name].signals if s.kind == "judge"]
        assert judged
        assert all(s.role == "neutral" and s.passed is None for s in judged)
    # Skipped judges checked nothing: a test they were the only gates of is skipped; one
    # with a check beside them (expect(...).to_equal) is decided by that check.
    for name in ("gate fails", "backend error is errored"):
        assert results[name].status == "skipped", name
        assert results[name].skip_reason == "judge skipped: nothing else checked"
        assert results[name].score is None
    assert results["observe never gates"].status == "passed"


def test_no_judge_configured_skips_with_a_hint(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "test_j.py").write_text(SUITE)
    run = run_cli_sync(tmp_path)
    assert run.by_name("gate fails")["status"] == "skipped"
    assert run.by_name("gate fails")["signals"][0]["role"] == "neutral"
    out = capsys.readouterr().out
    assert out.count("hint: no judge configured") == 1


def test_env_skip_judge_hides_the_hint(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_j.py").write_text(SUITE)
    monkeypatch.setenv("AGENT_HEALTH_SKIP_JUDGE", "1")
    run = run_cli_sync(tmp_path)
    assert run.code == 0
    assert "hint: no judge configured" not in capsys.readouterr().out
    assert os.environ["AGENT_HEALTH_SKIP_JUDGE"] == "1"


async def test_judge_needs_criteria(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text(
        "from agent_health import test\n"
        "@test('no criteria')\nasync def c(judge):\n    await judge('x')\n"
    )
    suite = loader.load([tmp_path])
    outcome = await session.run(suite.cases, suite.hooks, runner.RunEnv())
    assert outcome.results[0].status == "errored"
    assert "judge() needs the criteria" in (outcome.results[0].error or "")
