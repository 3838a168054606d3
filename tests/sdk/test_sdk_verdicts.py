"""Verdicts in the body: expect(verdict).to_pass(), or_throw() counted once, roles kept,
and an observation that can never move the gate (locally and when a cell is graded)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_health.cluster.grading import grading
from agent_health.engine.loading import loader
from agent_health.engine.running import runner, session
from agent_health.ledger import chain, filestore, records
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import Signal, TestResult
from agent_health.sdk.verdict import Verdict

SUITE = """
from agent_health import test

@test("expect(gate verdict).to_pass() counts once")
async def gate_to_pass(judge, expect):
    verdict = await judge("hello", "FAIL: says goodbye")
    signal = expect(verdict).to_pass()
    expect(signal.kind).to_equal("judge")

@test("expect(observe verdict).to_pass() gates")
async def observe_to_pass(judge, expect):
    expect(await judge.observe("hello", "FAIL: says goodbye")).to_pass()

@test("expect(passing observe verdict).to_pass()")
async def observe_passes(judge, expect):
    expect(await judge.observe("hello", "says hello")).to_pass()

@test("matcher or_throw counts once")
async def matcher_or_throw(expect, test_info):
    expect(1).to_equal(1)
    expect(1).to_equal(2).or_throw()
    test_info.annotate("after", "reached")

@test("verdict or_throw counts once")
async def verdict_or_throw(judge, expect, test_info):
    expect(1).to_equal(1)
    (await judge("hello", "FAIL: says goodbye")).or_throw()
    test_info.annotate("after", "reached")

@test("to_pass on an observe verdict counts once")
async def observe_verdict_to_pass(judge):
    (await judge.observe("hello", "FAIL: says goodbye")).to_pass()

@test("observe judge unreachable")
async def observe_unreachable(judge, expect):
    verdict = await judge.observe("hello", "RAISE")
    expect(verdict.errored).to_be_truthy()
    expect("hello").to_contain("hell")

@test("gate judge unreachable")
async def gate_unreachable(judge):
    await judge("hello", "RAISE")

@test("expect(...).to_pass() needs a verdict")
async def wrong_value(expect):
    expect("hello").to_pass()
"""

SKIPPED = """
from agent_health import test

@test("skipped observe keeps its role")
async def skipped_observe(judge, expect):
    verdict = await judge.observe("hello", "says hello")
    expect((verdict.skipped, verdict.role)).to_equal((True, "observe"))
    expect(verdict).to_pass()

@test("skipped gate keeps its role")
async def skipped_gate(judge, expect):
    verdict = await judge("hello", "says hello")
    expect((verdict.skipped, verdict.role)).to_equal((True, "gate"))
"""


class Scripted:
    """Fails criteria starting with FAIL, raises (an unreachable endpoint) on RAISE."""

    async def __call__(self, request: JudgeRequest) -> Verdict:
        if request.criteria == "RAISE":
            raise ConnectionError("judge endpoint 127.0.0.1:9 unreachable")
        failed = request.criteria.startswith("FAIL")
        return Verdict(
            criteria=request.criteria,
            passed=not failed,
            score=0.0 if failed else 1.0,
            reasoning="scripted",
            role=request.role,
        )


async def _run(tmp_path: Path, source: str, **env: object) -> dict[str, TestResult]:
    (tmp_path / "test_v.py").write_text(source)
    suite = loader.load([tmp_path])
    outcome = await session.run(suite.cases, suite.hooks, runner.RunEnv(**env))  # type: ignore[arg-type]
    return {r.name: r for r in outcome.results}


def _gates(result: TestResult) -> list[Signal]:
    return [s for s in result.signals if s.role == "gate"]


async def test_expect_verdict_to_pass(tmp_path: Path) -> None:
    results = await _run(tmp_path, SUITE, judge_backend=Scripted())
    gate = results["expect(gate verdict).to_pass() counts once"]
    assert gate.status == "failed"
    # The judge's own gate signal is what to_pass() returns: one failure, one signal.
    assert [(s.kind, s.passed) for s in _gates(gate)] == [("judge", False), ("deterministic", True)]
    observed = results["expect(observe verdict).to_pass() gates"]
    assert observed.status == "failed"
    assert [(s.kind, s.role, s.passed) for s in observed.signals] == [
        ("judge", "observe", False),
        ("deterministic", "gate", False),
    ]
    assert results["expect(passing observe verdict).to_pass()"].status == "passed"
    wrong = results["expect(...).to_pass() needs a verdict"]
    assert wrong.status == "errored"
    assert "to_pass needs a Verdict" in (wrong.error or "")


async def test_or_throw_counts_a_failure_once(tmp_path: Path) -> None:
    results = await _run(tmp_path, SUITE, judge_backend=Scripted())
    for name in ("matcher or_throw counts once", "verdict or_throw counts once"):
        result = results[name]
        assert result.status == "failed", name
        assert [s.passed for s in _gates(result)] == [True, False], name
        assert result.score == 0.5, name  # one pass, one failure — not 1/3
        assert not [s for s in result.signals if s.name == "assert"], name
    # An observe verdict asserted with to_pass() fails the test, counted once, as a gate.
    observe = results["to_pass on an observe verdict counts once"]
    assert observe.status == "failed"
    assert [(s.role, s.name) for s in _gates(observe)] == [("gate", "assert")]


async def test_an_unreachable_observe_judge_never_changes_the_gate(tmp_path: Path) -> None:
    results = await _run(tmp_path, SUITE, judge_backend=Scripted())
    observe = results["observe judge unreachable"]
    assert observe.status == "passed", observe.error
    assert (observe.error, observe.cause) == (None, None)
    verdict = next(s for s in observe.signals if s.kind == "judge")
    assert (verdict.role, verdict.passed, verdict.score) == ("observe", None, None)
    assert (verdict.evidence or {})["errored"] is True
    assert "judge endpoint 127.0.0.1:9 unreachable" in (verdict.error or "")
    gate = results["gate judge unreachable"]
    assert (gate.status, gate.cause) == ("errored", "judge")


async def test_skipped_verdicts_keep_their_role(tmp_path: Path) -> None:
    for env in ({"skip_judge": True}, {}):  # --no-judge, and no judge configured
        results = await _run(tmp_path, SKIPPED, **env)
        for name, result in results.items():
            assert result.status == "passed", (name, env, result.signals)
            judged = [s for s in result.signals if s.kind == "judge"]
            assert all(s.role == "neutral" and s.passed is None for s in judged), name


@pytest.mark.parametrize("role", ["observe", "gate"])
async def test_grading_a_cell_keeps_an_errored_observation_out_of_the_gate(
    tmp_path: Path, role: str
) -> None:
    key = b"k" * 32
    backend = filestore.FileBackend(tmp_path / "ledger")
    errored = Signal(
        kind="judge",
        role=role,  # type: ignore[arg-type]
        name="names the outage",
        passed=None,
        error="ProviderError: judge service unreachable",
        evidence={"errored": True, "skipped": False, "cached": False},
    )
    passed = Signal(kind="deterministic", role="gate", name="ok", passed=True, score=1.0)
    status = "passed" if role == "observe" else "errored"
    # No message of the controller's own: the grade reads the judge signals themselves.
    end = records.CellEnd(
        status=status,  # type: ignore[arg-type]
        cause=None if role == "observe" else "judge",
    )
    items: list[records.Record] = [
        records.CellMeta(test_id="t.py::x", repeat=0, run_id="r1"),
        records.SignalRecord(signal=passed.model_dump(mode="json")),
        records.SignalRecord(signal=errored.model_dump(mode="json")),
        end,
    ]
    await chain.Writer(backend, "c1", key).append(*items)
    expected = grading.ExpectedCell(test_id="t.py::x", repeat=0, run_id="r1")
    graded = await grading.grade_cell(backend, "c1", key, expected)
    assert graded.status == status, graded.error
    assert graded.discrepancy is None
    if role == "gate":
        assert "judge service unreachable" in (graded.error or "")
