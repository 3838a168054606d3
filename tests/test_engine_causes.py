"""Every errored test says whom it blames: the agent, the judge, the test or the infrastructure.

Run through the real CLI against the example agent (a real HTTP server on 127.0.0.1); the
unit tests at the end check the ranking rules of ``engine.grading``.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.connectors import errors as connector_errors
from agent_health.engine import grading
from agent_health.sdk import errors as sdk_errors
from helpers import run_cli
from hostile_support import free_port, hostile_target

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
    run = await run_cli(suite, "--agent", "rest+http://127.0.0.1:9/run", "--no-ledger")
    (test,) = run.report["tests"]
    assert (test["status"], test["cause"]) == ("errored", "test")


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
