"""Matchers over a conversation — to_finish_within_turns, to_have_asked_for (a regex, or the
judge), to_meet_user_goal — and the judge's view of a conversation, turn by turn; through
the real CLI against the example support agent on loopback."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from agent_health.judging import prompt
from agent_health.sdk import context, declare, errors, matchers, turns
from agent_health.sdk.context import JudgeRequest
from agent_health.sdk.results import RunResult
from support.helpers import run_cli
from support.judge_servers import Answer, ScriptedModel, prompt_text

SUITE = """
import re

from agent_health import Stop, expect, test


@test("short")
async def short(agent):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234"])
    expect(result).to_finish_within_turns(2)
    expect(result).to_have_asked_for(r"order number")
    expect(result).to_have_asked_for(re.compile(r"arrives on \\w+day"))


@test("too long")
async def too_long(agent):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234"])
    expect(result).to_finish_within_turns(1)


@test("never asked")
async def never_asked(agent):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234"])
    expect(result).to_have_asked_for(r"(?i)credit card")


@test("cut off")
async def cut_off(agent):
    result = await agent.run("Hello", user=lambda c: "still no number", max_turns=3)
    expect(result).to_finish_within_turns(5)


@test("goal met")
async def goal_met(agent):
    def customer(conversation):
        if "order number" in conversation.last_output:
            return "It is 5678"
        return Stop.goal_met("got the refund status")

    result = await agent.run("Did my refund go through?", user=customer)
    expect(result).to_meet_user_goal()


@test("gave up")
async def gave_up(agent):
    result = await agent.run("Hi", user=lambda c: Stop.gave_up("it only asks questions"))
    expect(result).to_meet_user_goal()


@test("single run has no user")
async def single(agent):
    result = await agent.run("Where is my parcel?")
    expect(result).to_meet_user_goal()


@test("asked, says the judge")
async def judged(agent, expect):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234"])
    verdict = await expect(result).to_have_asked_for("the order number", judge=True)
    assert verdict.passed
    await judge(result, "the user's goal was met")


from agent_health import judge  # noqa: E402
"""

CONFIG = """
from agent_health import define_config

config = define_config(judge={{"provider": "openai", "model": "m", "base_url": {url!r},
                               "cache": False}})
"""


def _sees_the_conversation(body: Mapping[str, Any]) -> Answer:
    """A judge that passes only when its evidence holds every turn of the conversation."""
    text = prompt_text(body)
    evidence = json.loads(text.split("<evidence>\n", 1)[1].split("\n</evidence>", 1)[0])
    said = [(t["turn"], t["user"]) for t in evidence.get("conversation", {}).get("turns", [])]
    ok = said == [(1, "Where is my parcel?"), (2, "It is order 1234")]
    return Answer(ok, 1.0 if ok else 0.0, f"saw {said}")


async def test_conversation_matchers(write_suite: Any, support_url: str) -> None:
    async with ScriptedModel.serving("openai", default=_sees_the_conversation) as judge:
        suite = write_suite(
            **{"test_talk.py": SUITE, "agent-health.config.py": CONFIG.format(url=judge.url)}
        )
        run = await run_cli(suite, "--agent", support_url)

    def status(name: str) -> str:
        return str(run.by_name(name)["status"])

    def signal(name: str, matcher: str) -> dict[str, Any]:
        return next(s for s in run.by_name(name)["signals"] if s["name"].startswith(matcher))

    assert status("short") == "passed", run.by_name("short")["signals"]
    asked = signal("short", "to_have_asked_for('order number')")
    assert asked["evidence"]["actual"]["turns"] == [1]
    assert status("too long") == "failed"
    long = signal("too long", "to_finish_within_turns")
    assert long["evidence"]["actual"]["turns"] == 2
    assert status("never asked") == "failed"
    never = signal("never asked", "to_have_asked_for")
    assert never["evidence"]["actual"]["turns"] == []
    assert [a["turn"] for a in never["evidence"]["actual"]["answers"]] == [1, 2]
    assert status("cut off") == "failed"  # within 5, but it ran out of turns at 3
    cut = signal("cut off", "to_finish_within_turns")
    assert cut["evidence"]["actual"]["ended"]["reason"] == "max-turns"
    assert status("goal met") == "passed"
    assert status("gave up") == "failed"
    gave = signal("gave up", "to_meet_user_goal")
    assert gave["evidence"]["actual"] == {
        "reason": "gave-up",
        "detail": "it only asks questions",
        "turns": 1,
    }
    single = run.by_name("single run has no user")
    assert (single["status"], single["cause"]) == ("errored", "test")
    assert "needs a conversation with a user" in single["error"]
    judged = run.by_name("asked, says the judge")
    assert judged["status"] == "passed", (judged.get("error"), judged["signals"])
    criteria = [s["name"] for s in judged["signals"] if s["kind"] == "judge"]
    assert criteria == [
        "At some turn of the conversation, the agent asked the user for the order number.",
        "the user's goal was met",
    ]


def test_a_single_runs_judge_evidence_is_as_it_was() -> None:
    """A conversation adds its turns to the judge's evidence; a single run's evidence, and
    so its cache key, does not change."""
    single = RunResult(run_id="r", prompt="p", output="o")
    request = JudgeRequest(
        result=single,
        text=None,
        criteria="c",
        role="gate",
        context=("trajectory", "output"),
        tools=(),
        evaluator=None,
        model=None,
        repeat=0,
        test_id="t",
    )
    assert set(prompt.evidence(request)) == {"prompt", "output", "trajectory"}
    talk = single.model_copy(
        update={
            "conversation": (
                turns.Turn(number=1, user="p", output="which order?"),
                turns.Turn(number=2, user="1234", output="o"),
            ),
            "ended": turns.ConversationEnd(reason="turns-done"),
        }
    )
    parts = prompt.evidence(JudgeRequest(**{**request.__dict__, "result": talk}))
    assert parts["conversation"] == {
        "turns": [
            {"turn": 1, "user": "p", "agent": "which order?", "steps": []},
            {"turn": 2, "user": "1234", "agent": "o", "steps": []},
        ],
        "ended": {"reason": "turns-done", "detail": ""},
    }


def test_matchers_refuse_what_they_cannot_check() -> None:
    case = declare.TestCase(
        name="t", describe_path=(), fn=lambda: None, params=(), fixtures={}, file="f.py", line=1
    )
    info = context.TestInfo(
        id="f.py::t", title="t", name="t", file="f.py", labels=(), repeat=0, run_id="r",
        timeout=None,
    )  # fmt: skip
    ctx = context.TestContext(case=case, info=info, agent_caller=None, judge_backend=None)
    result = RunResult(run_id="r", prompt="p", output="o")
    expect = matchers.BoundExpect(ctx)
    with pytest.raises(errors.MatcherUsageError, match="whole number of turns"):
        expect(result).to_finish_within_turns(0)
    with pytest.raises(errors.MatcherUsageError, match="needs a RunResult"):
        expect("o").to_have_asked_for("x")
    with pytest.raises(errors.MatcherUsageError, match="not a regular expression"):
        expect(result).to_have_asked_for("(")
    with pytest.raises(errors.MatcherUsageError, match="in words"):
        expect(result).to_have_asked_for("", judge=True)
    assert expect(result).to_finish_within_turns(1).passed  # a single run is one turn
    assert ctx.signals[-1].evidence["actual"] == {"turns": 1, "ended": None}
