"""Every errored test says whom it blames: the agent, the judge, the test or the infrastructure.

Run through the real CLI against the example agent (a real HTTP server on 127.0.0.1); the
unit tests at the end check the ranking rules of ``engine.outcome.grading``.
"""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlsplit

import pytest
from agent_health import cli
from agent_health.connectors import errors as connector_errors
from agent_health.engine.controller import cell
from agent_health.engine.outcome import grading
from agent_health.sdk import errors as sdk_errors
from support import cell_support
from support.helpers import run_cli
from support.hostile_support import free_port, hostile_target
from support.judge_servers import Answer

CAUSES = """
from agent_health import test


@test.extend(broken=lambda: {}["missing"])("a fixture that raises")
async def fixture_raises(broken, agent):
    await agent.run("check the auth service")


@test("the body raises after the agent answered")
async def body_raises(agent):
    result = await agent.run("check the auth service")
    int(result.output)  # a bug of the test: the answer is prose


@test("the body raises while handling the agent's failure")
async def body_wraps(agent):
    try:
        await agent.run("check the auth service", timeout=0.000001)
    except Exception as err:
        raise RuntimeError("could not run the agent") from err


@test("the body reads a field the agent's answer lacks")
async def reads_missing(agent):
    result = await agent.run("check the auth service")
    result.tool_calls()[0].tool_args["cluster"]


@test("the judge is unreachable")
async def judge_down(agent, judge):
    result = await agent.run("check the auth service")
    await judge(result, "names the expired certificate")


@test("the test's deadline expires in the body", timeout=0.5)
async def slow_body(agent):
    import asyncio

    await agent.run("check the auth service")
    await asyncio.sleep(30)
"""


async def test_each_errored_test_names_its_cause(
    write_suite: Any, triage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAUSES_JUDGE_KEY", "sk-test")
    suite = write_suite(
        **{
            "test_causes.py": CAUSES,
            "agent-health.config.py": f"""
from agent_health import define_config

config = define_config(
    agents={{"triage": {{"connector": "rest", "url": "{triage_url}"}}}},
    default_agent="triage",
    judge={{"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "CAUSES_JUDGE_KEY", "retry": {{"max_attempts": 1}}}},
)
""",
        }
    )
    run = await run_cli(suite, "--no-ledger", "--no-cache")
    causes = {t["name"]: (t["status"], t["cause"]) for t in run.report["tests"]}
    assert causes == {
        "a fixture that raises": ("errored", "test"),
        # The agent answered; what the body did with the answer is the test's own code.
        "the body raises after the agent answered": ("errored", "test"),
        # An agent error stays the agent's through ``raise ... from err``.
        "the body raises while handling the agent's failure": ("errored", "agent"),
        # A KeyError on the agent's own answer is a failed check, not the test's bug: the
        # agent cannot leave a check out of the pass rate by leaving out what it reads.
        "the body reads a field the agent's answer lacks": ("failed", None),
        "the judge is unreachable": ("errored", "judge"),
        "the test's deadline expires in the body": ("errored", "test"),
    }
    assert run.report["summary"]["errored_by_cause"] == {
        "agent": 1,
        "judge": 1,
        "test": 3,
        "infra": 0,
    }
    assert run.report["summary"]["pass_rate"] == 0.0  # 0 / (1 failed + 1 errored[agent])
    lacking = next(t for t in run.report["tests"] if "lacks" in t["name"])
    (check,) = [s for s in lacking["signals"] if s["name"] == "assert"]
    assert "the agent's answer has no key 'cluster'" in check["evidence"]["message"]
    judged = next(t for t in run.report["tests"] if t["name"] == "the judge is unreachable")
    assert "unreachable" in judged["error"]


async def test_a_deadline_that_expires_waiting_for_the_agent_is_the_agents(
    write_suite: Any, tmp_path: Any
) -> None:
    suite = write_suite(
        **{
            "test_hang.py": """
from agent_health import test


@test("waits for a hanging agent", timeout=1)
async def waits(agent):
    await agent.run("Diagnose the outage [hang]")
"""
        }
    )
    port = free_port()
    async with hostile_target(port, tmp_path / "r.jsonl", {}, answer="by-prompt", attacks=""):
        run = await run_cli(suite, "--agent", f"rest+http://127.0.0.1:{port}/run", "--no-ledger")
    (test,) = run.report["tests"]
    assert (test["status"], test["cause"]) == ("errored", "agent")
    assert test["error"] == "timed out after 1 s waiting for the agent"


async def test_a_failing_before_all_is_the_tests_and_a_bad_connector_spec_too(
    write_suite: Any,
) -> None:
    suite = write_suite(
        **{
            "test_setup.py": """
from agent_health import test


@test.before_all
def explode():
    raise ValueError("no database for the fixtures")


@test("needs the database")
async def needs(agent):
    await agent.run("hello")
""",
        }
    )
    # The agent is never reached (nor looked for): the before_all's failure is the cause.
    run = await run_cli(
        suite, "--agent", "rest+http://127.0.0.1:9/run", "--no-ledger", "--no-preflight"
    )
    (test,) = run.report["tests"]
    assert (test["status"], test["cause"]) == ("errored", "test")


FAILED_THEN = """
import asyncio
from agent_health import test


@test("a check fails, then the body raises")
async def check_then_crash(agent, expect):
    result = await agent.run("check the auth service")
    expect(result.output).to_contain("a certificate nobody mentions")
    raise RuntimeError("the helper blew up")


@test("a check fails, then the judge is unreachable")
async def check_then_judge(agent, expect, judge):
    result = await agent.run("check the auth service")
    expect(result).to_have_called_tool("restart_pod")
    await judge(result, "names the expired certificate")


@test("a check fails, then the deadline expires", timeout=0.5)
async def check_then_deadline(agent, expect):
    result = await agent.run("check the auth service")
    expect(result.output).to_contain("a certificate nobody mentions")
    await asyncio.sleep(30)


@test("the body raises with no check failed")
async def crash_only(agent, expect):
    result = await agent.run("check the auth service")
    expect(result.output).not_to_contain("a certificate nobody mentions")
    raise RuntimeError("the helper blew up")


@test("passes")
async def passes(agent, expect):
    result = await agent.run("check the auth service")
    expect(result.output).not_to_contain("a certificate nobody mentions")
"""


async def test_a_failed_check_wins_over_a_later_error_in_every_report_and_grade(
    write_suite: Any,
    triage_url: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A flaky helper (or agent, or judge) after a failed check must not turn the failure
    # into an error outside the pass rate: breaking a test never raises the grade.
    monkeypatch.setenv("CAUSES_JUDGE_KEY", "sk-test")
    suite = write_suite(
        **{
            "test_then.py": FAILED_THEN,
            "agent-health.config.py": f"""
from agent_health import define_config

config = define_config(
    agents={{"triage": {{"connector": "rest", "url": "{triage_url}"}}}},
    default_agent="triage",
    judge={{"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "CAUSES_JUDGE_KEY", "retry": {{"max_attempts": 1}}}},
)
""",
        }
    )
    ledger = tmp_path / "ledger"
    junit = tmp_path / "junit.xml"
    html = tmp_path / "html"
    run = await run_cli(
        suite, "--no-cache", "--ledger", f"file://{ledger}", "--reporter", f"junit:{junit}",
        "--reporter", f"html:{html}",
    )  # fmt: skip
    statuses = {t["name"]: (t["status"], t["cause"]) for t in run.report["tests"]}
    assert statuses == {
        "a check fails, then the body raises": ("failed", None),
        "a check fails, then the judge is unreachable": ("failed", None),
        "a check fails, then the deadline expires": ("failed", None),
        "the body raises with no check failed": ("errored", "test"),
        "passes": ("passed", None),
    }
    assert run.code == 1
    # Each failed test keeps the error that came after its check.
    crashed = run.by_name("a check fails, then the body raises")
    assert crashed["error"] == "RuntimeError: the helper blew up (at test_then.py:10)"
    judged = run.by_name("a check fails, then the judge is unreachable")
    assert "unreachable" in judged["error"]
    late = run.by_name("a check fails, then the deadline expires")
    assert late["error"] == "timed out after 0.5 s"
    summary = run.report["summary"]
    assert (summary["passed"], summary["failed"], summary["errored"]) == (1, 3, 1)
    assert summary["pass_rate"] == 0.25  # was 100 %: 1 / (1 passed + 0 failed)

    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "a check fails, then the body raises (" in x)
    assert line.startswith("✗ failed")
    assert line.endswith("— then: RuntimeError: the helper blew up (at test_then.py:10)")
    listed = out.split("FAILED test_then.py::a check fails, then the body raises", 1)[1]
    listed = listed.split("\n\n", 1)[0]
    assert "✗ to_contain('a certificate nobody mentions')" in listed
    assert "then: RuntimeError: the helper blew up" in listed

    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failure = cases["a check fails, then the body raises"].find("failure")
    assert failure is not None
    assert cases["a check fails, then the body raises"].find("error") is None
    assert failure.get("message") == (
        "to_contain('a certificate nobody mentions'); then: RuntimeError: the helper blew up "
        "(at test_then.py:10)"
    )
    assert "then: RuntimeError: the helper blew up" in (failure.text or "")
    page = (html / "index.html").read_text()
    assert "RuntimeError: the helper blew up (at test_then.py:10)" in page

    # The operator's grading of the same ledger (`agent-health grade`) decides the same.
    regraded = tmp_path / "regraded.json"
    code = await asyncio.to_thread(
        cli.main, ["grade", f"file://{ledger}", "--reporter", f"json:{regraded}"]
    )
    assert code == 1
    again = json.loads(regraded.read_text())["tests"]
    assert {t["name"]: (t["status"], t["cause"]) for t in again} == statuses


async def test_a_cell_whose_body_raises_after_a_failed_check_is_graded_failed(
    tmp_path: Any, triage_url: str
) -> None:
    port = urlsplit(triage_url).port
    assert port is not None
    async with cell_support.judge_service(tmp_path, Answer(True, 1.0, "ok")) as (judge_url, _):
        proxy = await cell_support.cell_gateway(tmp_path, port, judge_url)
        suite = """
        from agent_health import test

        @test("diagnoses the payment outage")
        async def diagnoses(agent, expect):
            result = await agent.run("Diagnose why the payment service is failing.")
            expect(result.output).to_contain("a certificate nobody mentions")
            raise RuntimeError("the helper blew up")
        """
        try:
            code, result = await cell.run_cell(cell_support.cell_settings(tmp_path, proxy, suite))
        finally:
            await proxy.stop()
    assert result is not None
    assert (code, result.status, result.cause) == (1, "failed", None)  # the controller's word
    assert result.error == "RuntimeError: the helper blew up (at test_cell.py:8)"
    graded = await cell_support.grade(tmp_path)  # the operator's, from the ledger
    assert (graded.status, graded.cause, graded.discrepancy) == ("failed", None, None)
    assert graded.error == result.error
    assert graded.score == 0.0


def test_the_agent_keeps_the_blame_and_otherwise_the_first_cause_wins() -> None:
    assert grading.cause([]) is None
    assert grading.cause(["judge", "test"]) == "judge"
    assert grading.cause(["test", "infra", "agent"]) == "agent"
    unreachable = connector_errors.AgentUnreachable("refused")
    assert grading.cause_of(unreachable) == "agent"
    assert grading.cause_of(connector_errors.ConnectorConfigError("no url")) == "test"
    assert grading.cause_of(ValueError("body bug")) == "test"
    wrapped = sdk_errors.AgentHealthError("before_each hook failed")
    wrapped.__cause__ = unreachable  # what ``raise ... from err`` sets
    assert grading.cause_of(wrapped) == "agent"
    asserted = sdk_errors.JudgeError("judge errored on 'x'", cause="judge")
    assert grading.cause_of(asserted) == "judge"
