"""A simulated user: an LLM (here the deterministic simulator server, or a scripted model)
with a goal and facts plays the user of a conversation, through the real CLI, against the
example support agent on loopback; asked through the judge's provider and cache."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import simulated_user_server
import support_agent
from agent_health import judging
from agent_health.judging import errors as judging_errors
from agent_health.judging import service, simulating
from agent_health.sdk import simulated
from support.helpers import run_cli
from support.judge_servers import ScriptedModel, Text

CONFIG = """
from agent_health import define_config

config = define_config(
    judge={{
        "provider": "openai",
        "model": "simulated-user",
        "base_url": {base!r},
        "cache_path": {cache!r},
        "input_cost_per_mtok": 1.0,
        "output_cost_per_mtok": 2.0,
        "retry": {{"max_attempts": 1}},
    }},
)
"""

SUITE = """
from agent_health import expect, simulated_user, test

customer = simulated_user(
    goal="find out whether my refund went through",
    persona="a busy customer who writes short messages",
    facts={"order number": "5678"},
    stop_when="the agent says what happened to order 5678",
)


@test("refund")
async def refund(agent):
    result = await agent.run("Did my refund go through?", user=customer)
    assert [t.user for t in result.turns] == [
        "Did my refund go through?", "My order number is 5678."
    ], result.turns
    assert result.ended.reason == "goal-met", result.ended
    assert "5678" in result.ended.detail
    expect(result.turn(2)).to_have_called_tool("lookup_order", {"order_id": "5678"})
"""

GIVES_UP = """
from agent_health import simulated_user, test


@test("no number")
async def no_number(agent):
    nobody = simulated_user(goal="find my parcel", facts={"name": "Ada"}, max_turns=4)
    result = await agent.run("Where is my parcel?", user=nobody)
    assert result.ended.reason == "gave-up", result.ended
    assert len(result.turns) == 1
"""


@pytest.fixture
async def simulator() -> AsyncIterator[str]:
    runner, url = await simulated_user_server.start()
    try:
        yield url
    finally:
        await runner.cleanup()


async def _completions(base: str) -> int:
    async with httpx.AsyncClient() as client:
        stats = await client.get(base.removesuffix("/v1") + "/stats")
    return int(stats.json()["completions"])


def _suite(write_suite: Any, tmp_path: Path, base: str, **files: str) -> Path:
    cache = str(tmp_path / "cache" / "judge.sqlite")
    return write_suite(**{"agent-health.config.py": CONFIG.format(base=base, cache=cache), **files})


async def test_a_simulated_user_talks_until_its_goal_is_met(
    write_suite: Any, tmp_path: Path, support_url: str, simulator: str
) -> None:
    files = {"test_refund.py": SUITE, "test_gives_up.py": GIVES_UP}
    suite = _suite(write_suite, tmp_path, simulator, **files)
    run = await run_cli(suite, "--agent", support_url)
    refund = run.by_name("refund")
    assert refund["status"] == "passed", (refund.get("error"), refund["signals"])
    assert refund["ended"]["reason"] == "goal-met"
    assert [t["user"] for t in refund["turns"]] == [
        "Did my refund go through?",
        "My order number is 5678.",
    ]
    asked = [s for s in refund["signals"] if (s.get("evidence") or {}).get("simulated_user")]
    assert [s["name"] for s in asked] == [
        "simulated user after turn 1",
        "simulated user after turn 2",
    ]
    assert all(s["role"] == "neutral" and s["passed"] is None for s in asked)
    assert asked[1]["evidence"]["stop"] == "goal-met"
    # Its model calls are judge spend: tokens and cost in the run's judge usage.
    spent = sum(s["evidence"]["input_tokens"] + s["evidence"]["output_tokens"] for s in asked)
    assert spent > 0
    usage = run.report["summary"]["judge_tokens"]
    assert usage["calls"] == 3  # two in "refund", one in "no number"
    assert usage["cached"] == 0
    assert usage["total_tokens"] >= spent
    assert usage["cost_usd"] > 0
    gave_up = run.by_name("no number")
    assert gave_up["status"] == "passed", gave_up.get("error")
    assert gave_up["ended"]["reason"] == "gave-up"
    assert "order number" in gave_up["ended"]["detail"]
    assert await _completions(simulator) == 3


async def test_a_replay_asks_the_simulated_user_through_the_cache_and_a_changed_one_diverges(
    write_suite: Any, tmp_path: Path, simulator: str
) -> None:
    runner, url = await support_agent.start()
    try:
        suite = _suite(write_suite, tmp_path, simulator, **{"test_refund.py": SUITE})
        first = await run_cli(suite, "--agent", url)
    finally:
        await runner.cleanup()  # the replays below have no agent to call
    assert first.by_name("refund")["status"] == "passed", first.by_name("refund").get("error")
    asked_before = await _completions(simulator)
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps(first.report))

    again = await run_cli(suite, "--replay", str(recorded))
    now = again.by_name("refund")
    assert (now["status"], now["replayed"]) == ("passed", True), now.get("error")
    assert now["turns"] == first.by_name("refund")["turns"]
    assert await _completions(simulator) == asked_before  # zero model calls
    usage = again.report["summary"]["judge_tokens"]
    assert (usage["calls"], usage["cached"], usage["total_tokens"]) == (2, 2, 0)

    # Another fact: the simulated user says something else at turn 2, and the replay says so.
    (suite / "test_refund.py").write_text(
        (suite / "test_refund.py").read_text().replace('"5678"}', '"1234"}')
    )
    changed = await run_cli(suite, "--replay", str(recorded))
    diverged = changed.by_name("refund")
    assert (diverged["status"], diverged["cause"]) == ("errored", "test")
    assert "differs from the recording at turn 2" in diverged["error"]
    assert "My order number is 1234." in diverged["error"]


async def test_an_unusable_answer_errors_with_cause_judge(
    write_suite: Any, tmp_path: Path, support_url: str
) -> None:
    async with ScriptedModel.serving(
        "openai", default=Text("Sure! I will ask for my refund.")
    ) as model:
        suite = _suite(write_suite, tmp_path, model.url, **{"test_refund.py": SUITE})
        run = await run_cli(suite, "--agent", support_url)
    refund = run.by_name("refund")
    assert (refund["status"], refund["cause"]) == ("errored", "judge")
    assert "simulated user could not answer after turn 1" in refund["error"]
    assert "not a usable reply (not one JSON object)" in refund["error"]
    assert "Sure! I will ask" in refund["error"]
    assert len(model.requests) == 2  # asked once more with the reason, then errored
    assert [t["number"] for t in refund["turns"]] == [1]  # the turn answered is kept
    retry = model.requests[1].body["messages"][-1]["content"]
    assert retry.startswith("That is not a usable reply (not one JSON object)")


async def test_no_simulate_skips_before_the_agent_is_called(
    write_suite: Any, tmp_path: Path, support_url: str, simulator: str
) -> None:
    suite = _suite(write_suite, tmp_path, simulator, **{"test_refund.py": SUITE})
    run = await run_cli(suite, "--agent", support_url, "--no-simulate")
    refund = run.by_name("refund")
    assert refund["status"] == "skipped"
    assert simulated.NO_SIMULATE in json.dumps(refund)
    assert refund["turns"] == []  # the agent was never asked
    assert refund["output"] is None
    assert run.report["summary"]["passed"] == 0
    assert await _completions(simulator) == 0


async def test_without_a_judge_model_the_simulated_user_skips_its_test(
    write_suite: Any, support_url: str
) -> None:
    suite = write_suite(**{"test_refund.py": SUITE})
    run = await run_cli(suite, "--agent", support_url)
    refund = run.by_name("refund")
    assert refund["status"] == "skipped"
    assert "no judge is configured" in json.dumps(refund)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"message": "hi"}', None),
        ('```json\n{"stop": "goal-met", "reason": "done"}\n```', None),
        ('{"stop": "gave-up"}', None),
        ("hello", "not one JSON object"),
        ('Here: {"message": "hi"}', "not one JSON object"),
        ('["hi"]', "a JSON list, not an object"),
        ('{"message": "hi", "mood": "ok"}', "unknown keys ['mood']"),
        ('{"message": "hi", "stop": "goal-met"}', "both a message and a stop"),
        ('{"stop": "done"}', "stop is 'done'"),
        ('{"message": ""}', "neither a non-empty message nor a stop"),
        ('{"message": "hi", "reason": "x"}', "a reason belongs to a stop"),
        ('{"stop": "gave-up", "reason": 3}', "reason is not a string"),
    ],
)
def test_the_answer_is_read_strictly(raw: str, why: str | None) -> None:
    if why is None:
        line = simulating.parse(raw)
        assert (line.message, line.stop) != (None, None)
        return
    with pytest.raises(judging_errors.UnparseableAnswer, match="not a usable reply") as err:
        simulating.parse(raw)
    assert why in str(err.value)


def test_simulated_user_refuses_bad_arguments() -> None:
    from agent_health import AgentRunError, simulated_user

    with pytest.raises(AgentRunError, match="needs a goal"):
        simulated_user("")
    with pytest.raises(AgentRunError, match="facts maps"):
        simulated_user("g", facts=["5678"])  # type: ignore[arg-type]
    with pytest.raises(AgentRunError, match="at least 2"):
        simulated_user("g", max_turns=1)


async def test_the_judge_service_answers_a_cells_simulated_user(tmp_path: Path) -> None:
    """``/api/judge/user``: asked through the service's provider and shared cache, and its
    spend reported per caller as a verdict's is."""
    sim, base = await simulated_user_server.start()
    spent: list[tuple[str | None, int, int]] = []
    from agent_health.sdk.config import Config, JudgeConfig
    from aiohttp import web

    judge = JudgeConfig(
        model="simulated-user", base_url=base, cache_path=str(tmp_path / "c.sqlite")
    )
    try:
        async with judging.backend(judge, Config()) as backend:
            assert backend is not None

            async def resolve(token: str | None) -> judging.Judging | None:
                return backend if token == "controller" else None

            app = service.serving(resolve, lambda t, i, o: spent.append((t, i, o)))
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            ask = simulated.UserAsk(
                goal="a refund",
                facts={"order number": "5678"},
                conversation=(
                    {"role": "user", "content": "refund?"},
                    {"role": "agent", "content": "What is your order number?"},
                ),
                turn=1,
            )
            try:
                from agent_health.judging import remote

                async with remote.remote_backend(url, "controller") as cell:
                    first = await cell.simulate(ask)
                    second = await cell.simulate(ask)
                async with remote.remote_backend(url, "stranger") as other:
                    refused = await other.simulate(ask)
            finally:
                await runner.cleanup()
    finally:
        await sim.cleanup()
    assert (first.message, first.cached) == ("My order number is 5678.", False)
    assert (second.message, second.cached) == ("My order number is 5678.", True)
    assert [who for who, _, _ in spent] == ["controller"]
    assert spent[0][1] > 0
    assert refused.errored
    assert "401" in (refused.error or "")


def test_a_cells_simulated_user_may_ask_only_its_runspecs_models() -> None:
    from agent_health.cluster.judge_service import limits

    held = limits.Limits("RunSpec ns/talk", frozenset({"judge-model"}), 1024)
    assert held.problem(limits.USER_PATH, {"model": None, "goal": "g"}) is None
    assert held.problem(limits.USER_PATH, {"model": "judge-model"}) is None
    why = held.problem(limits.USER_PATH, {"model": "gpt-huge"})
    assert why is not None
    assert "simulated_user(model=...) 'gpt-huge'" in why
    assert "spec.judge.models" in why


async def test_no_judge_skips_judge_calls_but_the_simulated_user_still_plays(
    write_suite: Any, tmp_path: Path, support_url: str, simulator: str
) -> None:
    judged = (
        SUITE
        + """

@test("judged")
async def judged(agent, judge):
    result = await agent.run("Where is my parcel?")
    await judge(result, "asks for the order number")
"""
    )
    suite = _suite(write_suite, tmp_path, simulator, **{"test_refund.py": judged})
    run = await run_cli(suite, "--agent", support_url, "--no-judge")
    refund = run.by_name("refund")
    assert refund["status"] == "passed", refund.get("error")
    assert run.by_name("judged")["status"] == "skipped"  # its only gate was a judge call
    assert await _completions(simulator) == 2  # only the simulated user's questions


async def test_the_simulated_users_tokens_count_in_the_run_budget(
    write_suite: Any, tmp_path: Path, support_url: str, simulator: str
) -> None:
    """The conversation's agent tokens alone (35) stay under --max-tokens 100; with its
    simulated user's it is over, so the next test never starts."""
    later = """
from agent_health import test

@test("later")
async def later(agent):
    await agent.run("Where is my parcel?")
"""
    files = {"test_a_refund.py": SUITE, "test_b_later.py": later}
    suite = _suite(write_suite, tmp_path, simulator, **files)
    run = await run_cli(suite, "--agent", support_url, "-j", "1", "--max-tokens", "100")
    assert run.by_name("refund")["status"] == "passed"
    assert run.by_name("later")["status"] == "skipped"
    budget = run.report["summary"]["budget"]
    assert budget["exhausted"] == "max_tokens"
    assert budget["spent"]["agent_tokens"] == 35
    assert budget["spent"]["judge_tokens"] > 65
