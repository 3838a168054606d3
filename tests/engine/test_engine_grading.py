"""A pass that checked nothing is not a pass: judge-only tests with judging off are skipped.

Real judge-less runs of a suite through the CLI (the example triage agent on loopback, case
files in agent-health's established format and Python tests), then the same run's ledger
graded again as the operator grades it (``agent-health grade``, the EvaluationRun tally),
and one cell with ``skipJudge``. Every reader says the same: ``skipped`` with the reason
``judge skipped: nothing else checked``, outside the pass rate, and how many.
"""

from __future__ import annotations

import asyncio
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from agent_health import cli, ledger
from agent_health.cluster.grading import grading, regrade
from agent_health.engine.controller import cell
from agent_health.engine.outcome import grading as engine_grading
from agent_health.ledger import backends, keys
from agent_health.sdk.results import Signal
from support import cell_support
from support.helpers import run_cli
from support.judge_servers import Answer
from support.status_support import Clock, running_tally

REASON = "judge skipped: nothing else checked"
CASES = [
    {"name": "judged only", "category": "RCA", "difficulty": "Easy",
     "initialPrompt": "Why is the payment service failing?",
     "expectedOutcomes": ["names the database as the cause"]},
    {"name": "a tool and a judge", "category": "RCA", "difficulty": "Easy",
     "initialPrompt": "Why is the payment service failing?",
     "expectedOutcomes": ["names the database as the cause"],
     "expectedTrajectory": [{"step": 1, "requiredTools": ["search_logs"]}]},
    {"name": "a missing tool and a judge", "category": "RCA", "difficulty": "Easy",
     "initialPrompt": "Why is the payment service failing?",
     "expectedOutcomes": ["names the database as the cause"],
     "expectedTrajectory": [{"step": 1, "requiredTools": ["restart_pod"]}]},
]  # fmt: skip
PYTHON = """
from agent_health import test

@test("two judged claims")
async def two_claims(agent, judge):
    result = await agent.run("Why is the payment service failing?")
    await judge(result, "names the database")
    (await judge(result, "suggests a next step")).to_pass()

@test("observes only")
async def observes(agent, judge):
    result = await agent.run("Why is the payment service failing?")
    await judge.observe(result, "is polite")

@test("pure data")
async def pure(expect):
    expect(2 + 2).to_equal(4)
"""
STATUSES = {
    "judged only": "skipped",
    "a tool and a judge": "passed",  # a deterministic gate passed beside the skipped judge
    "a missing tool and a judge": "failed",
    "two judged claims": "skipped",
    # Asked for no gate: what the rule has always said of a test that gates nothing.
    "observes only": "passed",
    "pure data": "passed",
}


def _suite(tmp_path: Path, triage_url: str) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "rca.cases.json").write_text(json.dumps(CASES))
    (suite / "test_more.py").write_text(PYTHON)
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n"
        f"config = define_config(agents={{'triage': {{'connector': 'rest', 'url': "
        f"'{triage_url}'}}}}, default_agent='triage')\n"
    )
    return suite


def _statuses(report: dict[str, Any]) -> dict[str, str]:
    return {t["name"]: t["status"] for t in report["tests"]}


@pytest.mark.parametrize("how", ["--no-judge", "no judge configured"])
async def test_a_judge_less_run_skips_what_only_judges_would_have_checked(
    tmp_path: Path, triage_url: str, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    suite = _suite(tmp_path, triage_url)
    flags = ["--no-judge"] if how == "--no-judge" else []
    junit, html = tmp_path / "junit.xml", tmp_path / "html"
    run = await run_cli(
        suite,
        *flags,
        "--ledger",
        f"file://{tmp_path / 'ledger'}",
        "--reporter",
        f"junit:{junit}",
        "--reporter",
        f"html:{html}",
    )
    assert run.code == 1, "the missing tool fails the run"
    assert _statuses(run.report) == STATUSES
    judged = run.by_name("judged only")
    assert judged["skip_reason"] == REASON
    assert judged["score"] is None
    assert judged["output"]  # it ran: what the agent did is kept
    assert [s["kind"] for s in judged["signals"] if s["kind"] != "metric"] == ["judge"]
    assert judged["signals"][0]["evidence"]["asked_role"] == "gate"
    assert run.by_name("observes only")["signals"][0]["evidence"]["asked_role"] == "observe"
    summary = run.report["summary"]
    assert (summary["passed"], summary["failed"], summary["skipped"]) == (3, 1, 2)
    assert summary["judge_only"] == 2
    assert summary["pass_rate"] == pytest.approx(3 / 4)  # the two skipped are left out

    out = capsys.readouterr().out
    assert "3 passed, 1 failed, 0 errored, 2 skipped (2 judge only) — pass rate 75%" in out
    hint = "hint: 2 tests checked nothing but judge() calls, and judging was off"
    assert out.count(hint) == 1
    assert out.count("hint: no judge configured") == (1 if how != "--no-judge" else 0)
    assert "- skipped rca.cases.json › judged only" in out

    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    skipped = cases["judged only"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == REASON
    assert cases["a tool and a judge"].find("skipped") is None
    page = (html / "index.html").read_text()
    assert re.search(r'"judge_only":\s*2\b', page)
    assert page.count(REASON) >= 2  # each skipped test carries its reason

    # The operator's grading of the same ledger (`agent-health grade`) decides the same.
    regraded = tmp_path / "regraded.json"
    code = await asyncio.to_thread(
        cli.main, ["grade", f"file://{tmp_path / 'ledger'}", "--reporter", f"json:{regraded}"]
    )
    assert code == 1
    again = json.loads(regraded.read_text())
    agent_tests = {k: v for k, v in STATUSES.items() if k != "pure data"}  # only cells
    assert _statuses(again) == agent_tests
    assert {t["name"]: t["skip_reason"] for t in again["tests"]}["judged only"] == REASON
    assert again["summary"]["judge_only"] == 2
    assert "2 skipped (2 judge only)" in capsys.readouterr().out


async def test_the_evaluation_run_counts_a_judge_only_cell_as_skipped(
    tmp_path: Path, triage_url: str
) -> None:
    suite = _suite(tmp_path, triage_url)
    url = f"file://{tmp_path / 'ledger'}"
    run = await run_cli(suite, "--no-judge", "--ledger", url)
    assert run.by_name("judged only")["status"] == "skipped"
    key, _ = ledger.find_key(url, None)
    backend = backends.from_url(url)
    grades = []  # each cell graded as the operator grades a finished cell
    for name in await backend.cells():
        lines = await backend.read(name)
        sealed_with = keys.sealing_key(key, name, lines)
        expected = regrade.expected_from(name, lines)
        grades.append(grading.grade_lines(name, lines, sealed_with, expected))
    await backend.close()
    tally = running_tally(Clock(), [g.cell for g in grades])
    for g in grades:
        tally.record(g)
    got = tally.status()
    assert (got.counts.passed, got.counts.failed, got.counts.skipped) == (2, 1, 2)
    assert got.pass_rate == pytest.approx(2 / 3)
    tests_passed = next(c for c in got.conditions if c.type == "TestsPassed")
    assert tests_passed.message == "1 failed and 0 errored of 5 cells"
    # ended without a failure, the run says what the cells that did not pass were
    ok = [g for g in grades if g.status != "failed"]
    tally = running_tally(Clock(), [g.cell for g in ok])
    for g in ok:
        tally.record(g)
    tests_passed = next(c for c in tally.status().conditions if c.type == "TestsPassed")
    assert tests_passed.message == "2 of 4 cells passed, 2 skipped (2 judge only)"


async def test_a_cell_with_skip_judge_reports_and_grades_a_judge_only_test_skipped(
    tmp_path: Path, triage_url: str
) -> None:
    port = urlsplit(triage_url).port
    assert port is not None
    async with cell_support.judge_service(tmp_path, Answer(True, 1.0, "ok")) as (
        judge_url,
        model,
    ):
        proxy = await cell_support.cell_gateway(tmp_path, port, judge_url)
        suite = """
        from agent_health import test

        @test("diagnoses the payment outage")
        async def diagnoses(agent, judge):
            result = await agent.run("Diagnose why the payment service is failing.")
            await judge(result, "names the database as the cause")
        """
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, suite)
            code, result = await cell.run_cell(
                cell.CellSettings(**{**settings.__dict__, "skip_judge": True})
            )
        finally:
            await proxy.stop()
    assert model.requests == []  # skipJudge: the judge was never asked
    assert code == 0
    assert result is not None
    assert (result.status, result.skip_reason) == ("skipped", REASON)
    graded = await cell_support.grade(tmp_path)
    assert (graded.status, graded.result.skip_reason) == ("skipped", REASON)
    assert graded.discrepancy is None
    assert graded.score is None


def _judge(role: str, **evidence: Any) -> Signal:
    return Signal(
        kind="judge", role="neutral", name="claim", passed=None,
        evidence={"skipped": True, **({"asked_role": role} if role else {}), **evidence},
    )  # fmt: skip


def _gate(passed: bool) -> Signal:
    return Signal(kind="deterministic", role="gate", name="check", passed=passed)


@pytest.mark.parametrize(
    ("signals", "status"),
    [
        ([_judge("gate")], "skipped"),
        ([_judge("gate"), _judge("gate")], "skipped"),
        ([_judge("")], "skipped"),  # recorded before asked_role was kept: judge() gates
        ([_judge("gate"), _gate(True)], "passed"),
        ([_judge("gate"), _gate(False)], "failed"),
        ([_judge("observe")], "passed"),  # asked for no gate
        ([], "passed"),  # a pure data test that recorded nothing: the rule as it was
    ],
)
def test_decide_skips_only_when_every_gate_asked_for_was_a_skipped_judge(
    signals: list[Signal], status: str
) -> None:
    assert engine_grading.decide(signals, [], False) == status
    assert engine_grading.skip_reason(status, signals) == (REASON if status == "skipped" else None)
    # An error after a failed gate leaves the test failed (it never leaves the pass rate).
    failed = any(s.role == "gate" and s.passed is False for s in signals)
    assert engine_grading.decide(signals, ["boom"], False) == ("failed" if failed else "errored")
