"""Cost that adds up, through the real CLI against real agents on loopback: the model every
connector carries is read (AG-UI's ``RUN_FINISHED`` usage, an OpenAI-compatible answer's
``model``, a REST or subprocess reply's ``model``), each model's tokens are priced at that
model's price, and tokens spent on a model with no price are said once, in the summary and
the JSON report, instead of silently leaving the cost out.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from aiohttp import web
from support.helpers import run_cli
from support.loopback import event, run_finished, run_started, serving, sse_handler

PRICES = {
    "gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
    "gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
}
# The AG-UI agent's run: one call to each model, as RUN_FINISHED.usage reports them.
USAGE = [
    {"provider": "openai", "model": "gpt-4o", "inputTokens": 1000, "outputTokens": 200},
    {"provider": "openai", "model": "gpt-4o-mini", "inputTokens": 3000, "outputTokens": 100},
]
BIG = 1000 * 2.5e-6 + 200 * 10e-6  # gpt-4o's part
SMALL = 3000 * 0.15e-6 + 100 * 0.6e-6  # gpt-4o-mini's part
TWO_TESTS = """
from agent_health import test

@test("first")
async def first(agent, expect):
    expect((await agent.run("one")).output).to_equal("ok")

@test("second")
async def second(agent, expect):
    expect((await agent.run("two")).output).to_equal("ok")
"""


def config(agent: dict[str, Any], prices: dict[str, Any]) -> str:
    return f"""
from agent_health import define_config

config = define_config(agents={{"it": {agent!r}}}, prices={prices!r})
"""


def agui_frames(usage: list[dict[str, Any]], **result: Any) -> tuple[bytes, ...]:
    return (
        run_started(),
        event("TEXT_MESSAGE_START", messageId="m", role="assistant"),
        event("TEXT_MESSAGE_CONTENT", messageId="m", delta="ok"),
        event("TEXT_MESSAGE_END", messageId="m"),
        run_finished(result={"output": "ok", **result}, usage=usage),
    )


def costs(report: dict[str, Any]) -> list[float | None]:
    return [t["metrics"]["cost_usd"] for t in report["tests"]]


async def test_an_agui_agents_usage_is_priced_per_model_it_names(write_suite: Any) -> None:
    async with serving(sse_handler(*agui_frames(USAGE))) as url:
        suite = write_suite(
            **{
                "agent-health.config.py": config({"connector": "agui", "url": url}, PRICES),
                "test_two.py": TWO_TESTS,
            }
        )
        run = await run_cli(suite)
    assert run.code == 0, run.report
    assert costs(run.report) == [pytest.approx(BIG + SMALL)] * 2
    summary = run.report["summary"]
    assert summary["cost_usd"] == pytest.approx(2 * (BIG + SMALL))
    assert (summary["unpriced"], summary["unpriced_models"]) == (0, [])
    (first, _) = run.report["tests"]
    assert first["metrics"]["usage_by_model"] == [
        {"model": "gpt-4o", "prompt": 1000, "completion": 200, "total": 1200},
        {"model": "gpt-4o-mini", "prompt": 3000, "completion": 100, "total": 3100},
    ]
    assert first["metrics"]["total_tokens"] == 4300


async def test_tokens_on_a_model_without_a_price_are_named_once_not_silently_uncosted(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serving(sse_handler(*agui_frames(USAGE))) as url:
        suite = write_suite(
            **{
                "agent-health.config.py": config(
                    {"connector": "agui", "url": url}, {"gpt-4o": PRICES["gpt-4o"]}
                ),
                "test_two.py": TWO_TESTS,
            }
        )
        capsys.readouterr()
        run = await run_cli(suite)
    summary = run.report["summary"]
    # Part of each run's tokens has no price: its cost is unknown, not gpt-4o's part alone.
    assert costs(run.report) == [None, None]
    assert summary["cost_usd"] is None
    assert summary["unpriced"] == 2
    assert summary["unpriced_models"] == [{"model": "gpt-4o-mini", "runs": 2, "tokens": 6200}]
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "no price for" in line]
    assert len(lines) == 1, out
    assert "'gpt-4o-mini' (6,200 tokens, 2 runs)" in lines[0]
    assert "prices=" in lines[0]


async def test_an_agui_run_that_names_its_model_beside_its_usage_is_priced(
    write_suite: Any,
) -> None:
    unnamed = [{"inputTokens": 1000, "outputTokens": 200}]
    async with serving(sse_handler(*agui_frames(unnamed, model="gpt-4o"))) as url:
        suite = write_suite(
            **{
                "agent-health.config.py": config({"connector": "agui", "url": url}, PRICES),
                "test_two.py": TWO_TESTS,
            }
        )
        run = await run_cli(suite)
    assert costs(run.report) == [pytest.approx(BIG)] * 2
    assert run.report["tests"][0]["metrics"]["model"] == "gpt-4o"


async def test_an_openai_compatible_agent_is_priced_at_the_model_that_answered(
    write_suite: Any,
) -> None:
    async def chat(request: web.Request) -> web.Response:
        asked = await request.json()
        assert asked["model"] == "agent"  # what the config asks for: not what answered
        return web.json_response(
            {
                "model": "gpt-4o-mini",
                "choices": [{"message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 3000, "completion_tokens": 100},
            }
        )

    async with serving(chat, "/v1/chat/completions") as url:
        base = url.removesuffix("/chat/completions")
        suite = write_suite(
            **{
                "agent-health.config.py": config({"connector": "openai", "url": base}, PRICES),
                "test_two.py": TWO_TESTS,
            }
        )
        run = await run_cli(suite)
    assert run.code == 0, run.report
    assert costs(run.report) == [pytest.approx(SMALL)] * 2


async def test_a_conversation_prices_each_turn_at_its_own_models_price(write_suite: Any) -> None:
    # A REST agent that answers its first turn with gpt-4o and its second with gpt-4o-mini.
    async def rest(request: web.Request) -> web.Response:
        body = await request.json()
        big = body.get("turn", 1) == 1
        return web.json_response(
            {
                "output": "ok",
                "model": "gpt-4o" if big else "gpt-4o-mini",
                "token_usage": {"prompt": 1000, "completion": 200}
                if big
                else {"prompt": 3000, "completion": 100},
            }
        )

    async with serving(rest) as url:
        suite = write_suite(
            **{
                "agent-health.config.py": config({"connector": "rest", "url": url}, PRICES),
                "test_talk.py": """
                from agent_health import test

                @test("talks")
                async def talks(agent, expect):
                    result = await agent.run("one", turns=["two"])
                    expect(result.output).to_equal("ok")
                """,
            }
        )
        run = await run_cli(suite)
    assert run.code == 0, run.report
    assert costs(run.report) == [pytest.approx(BIG + SMALL)]


async def test_a_rest_reply_may_split_its_tokens_by_model_and_must_add_up(
    write_suite: Any,
) -> None:
    answers = {
        "splits": {
            "output": "ok",
            "usage_by_model": [
                {"model": "gpt-4o", "prompt": 1000, "completion": 200},
                {"model": "gpt-4o-mini", "prompt": 3000, "completion": 100},
            ],
        },
        "does not add up": {
            "output": "ok",
            "token_usage": {"prompt": 10, "completion": 2},
            "usage_by_model": [{"model": "gpt-4o", "prompt": 1000, "completion": 200}],
        },
    }

    async def rest(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(answers[body["prompt"]])

    async with serving(rest) as url:
        suite = write_suite(
            **{
                "agent-health.config.py": config({"connector": "rest", "url": url}, PRICES),
                "test_split.py": f"""
                from agent_health import test

                def declare(prompt):
                    @test(prompt)
                    async def asks(agent, expect):
                        expect((await agent.run(prompt)).output).to_equal("ok")

                for prompt in {list(answers)!r}:
                    declare(prompt)
                """,
            }
        )
        run = await run_cli(suite)
    by_name = {t["name"]: t for t in run.report["tests"]}
    assert by_name["splits"]["status"] == "passed"
    assert by_name["splits"]["metrics"]["cost_usd"] == pytest.approx(BIG + SMALL)
    assert by_name["splits"]["metrics"]["total_tokens"] == 4300
    broken = by_name["does not add up"]
    assert (broken["status"], broken["cause"]) == ("errored", "agent")
    assert "usage_by_model adds up to 1000 prompt tokens" in broken["error"]


async def test_a_subprocess_agents_model_is_priced_and_an_unnamed_one_is_said(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = """
import json, os, sys
json.load(sys.stdin)
named = os.environ["AGENT_HEALTH_PROMPT"] == "one"
answer = {"output": "ok", "token_usage": {"prompt": 1000, "completion": 200}}
print(json.dumps({**answer, "model": "gpt-4o"} if named else answer))
"""
    suite = write_suite(
        **{
            "agent.py": agent,
            "agent-health.config.py": config(
                {"connector": "subprocess", "command": [sys.executable, "agent.py"]}, PRICES
            ),
            "test_two.py": TWO_TESTS,
        }
    )
    capsys.readouterr()
    run = await run_cli(suite)
    assert costs(run.report) == [pytest.approx(BIG), None]
    assert run.report["summary"]["unpriced_models"] == [{"model": None, "runs": 1, "tokens": 1200}]
    out = capsys.readouterr().out
    assert "no price for a model the agent did not name (1,200 tokens, 1 run)" in out
    json.dumps(run.report)  # the report as written
