"""Run budgets through the real CLI against a real agent on loopback: --max-tokens,
--max-cost, --max-duration, unknown spend, the exit code and the report's spend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.cli import common
from support import budget_support
from support.helpers import run_cli

FIVE = """
from agent_health import test

def declare(n):
    @test(f"spends {n}")
    async def spends(agent, expect):
        result = await agent.run(f"prompt {n}", env={"TOKENS": TOKENS.get(n, "100")})
        expect(result.output).to_equal("ok")

for n in range(1, 6):
    declare(n)
"""


@pytest.fixture
async def agent() -> AsyncIterator[budget_support.MeteredAgent]:
    served = await budget_support.start()
    try:
        yield served
    finally:
        await served.close()


def five(write_suite: Any, tokens: dict[int, str] | None = None, **extra: str) -> Path:
    """Five tests, each asking the agent to report ``tokens[n]`` prompt tokens (100: 120 in
    all); ``extra`` adds files (a config)."""
    source = f"TOKENS = {tokens or {}!r}\n" + FIVE.replace("\nfrom", "from", 1)
    return write_suite(**{"test_spend.py": source}, **extra)  # type: ignore[no-any-return]


def statuses(report: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(t["name"], t["status"], t.get("skip_reason")) for t in report["tests"]]


async def test_max_tokens_stops_starting_tests_and_skips_the_rest(
    write_suite: Any, agent: budget_support.MeteredAgent
) -> None:
    suite = five(write_suite)
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "-j", "1", "--max-tokens", "300")
    # 120 tokens a test: after the third, 360 >= 300, so the fourth never starts
    assert statuses(run.report) == [
        ("spends 1", "passed", None),
        ("spends 2", "passed", None),
        ("spends 3", "passed", None),
        ("spends 4", "skipped", "budget"),
        ("spends 5", "skipped", "budget"),
    ]
    assert sum(agent.calls.values()) == 3
    assert run.code == common.EXIT_BUDGET == 4
    budget = run.report["summary"]["budget"]
    assert budget["exhausted"] == "max_tokens"
    assert budget["limits"]["max_tokens"] == 300
    assert budget["spent"]["tokens"] == 360
    assert budget["spent"]["agent_tokens"] == 360
    assert budget["skipped"] == 2
    assert budget["reason"] == "--max-tokens 300 reached: 360 tokens spent"


async def test_tests_already_running_finish(
    write_suite: Any, agent: budget_support.MeteredAgent
) -> None:
    suite = five(write_suite)
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "-j", "3", "--max-tokens", "1")
    # three workers take a test each before any ends: all three finish, none is cut short
    assert [s for _, s, _ in statuses(run.report)] == ["passed"] * 3 + ["skipped"] * 2
    assert run.report["summary"]["budget"]["spent"]["tokens"] == 360


async def test_a_failed_test_wins_over_the_budget_exit_code(
    write_suite: Any, agent: budget_support.MeteredAgent
) -> None:
    suite = write_suite(
        **{
            "test_fail.py": """
        from agent_health import test

        @test("fails")
        async def fails(agent, expect):
            result = await agent.run("x", env={"TOKENS": "100"})
            expect(result.output).to_equal("something else")

        @test("never starts")
        async def later(agent):
            await agent.run("y")
        """
        }
    )
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "-j", "1", "--max-tokens", "50")
    assert statuses(run.report)[1] == ("never starts", "skipped", "budget")
    assert run.code == common.EXIT_FAILED


async def test_unknown_spend_is_estimated_from_the_largest_known_test(
    write_suite: Any, agent: budget_support.MeteredAgent
) -> None:
    # test 2 reports no usage: charged like test 1 (120), so after it 240 >= 200
    suite = five(write_suite, {2: "none"})
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "-j", "1", "--max-tokens", "200")
    assert [s for _, s, _ in statuses(run.report)] == ["passed"] * 2 + ["skipped"] * 3
    spent = run.report["summary"]["budget"]["spent"]
    assert (spent["tokens"], spent["tokens_unknown"], spent["tokens_estimated"]) == (120, 1, 240)
    assert "1 of them estimated" in run.report["summary"]["budget"]["reason"]


async def test_unknown_spend_with_nothing_to_estimate_from_stops_the_run(
    write_suite: Any, agent: budget_support.MeteredAgent, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = five(write_suite, {1: "none"})
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "-j", "1", "--max-tokens", "100000")
    assert [s for _, s, _ in statuses(run.report)] == ["passed"] + ["skipped"] * 4
    budget = run.report["summary"]["budget"]
    assert budget["exhausted"] == "max_tokens"
    assert budget["spent"]["tokens_estimated"] is None
    assert "unknown spend is not zero" in budget["reason"]
    out = capsys.readouterr().out
    assert "budget: unknown (1 tests reported no usage) of 100,000 tokens" in out
    assert "stopped by the budget" in out


async def test_max_cost_counts_agent_and_judge_with_their_prices(
    write_suite: Any, agent: budget_support.MeteredAgent
) -> None:
    from support.judge_servers import Answer, ScriptedModel

    async with ScriptedModel.serving("openai", default=Answer(True, 1.0, "fine")) as judge:
        suite = write_suite(
            **{
                "agent-health.config.py": f"""
                from agent_health import define_config

                config = define_config(
                    agents={{"metered": {{"connector": "rest", "url": "{agent.url}"}}}},
                    prices={{"default": {{"input_per_mtok": 1000.0, "output_per_mtok": 1000.0}}}},
                    judge={{"provider": "openai", "model": "m", "base_url": "{judge.url}",
                            "api_key_env": "BUDGET_TEST_KEY", "cache": False,
                            "input_cost_per_mtok": 1000.0, "output_cost_per_mtok": 1000.0}},
                )
                """,
                "test_judged.py": """
                from agent_health import test

                def declare(n):
                    @test(f"judged {n}")
                    async def judged(agent, judge):
                        result = await agent.run(f"p{n}", env={"TOKENS": "100"})
                        await judge(result, "says ok")

                for n in range(4):
                    declare(n)
                """,
            }
        )
        import os

        os.environ["BUDGET_TEST_KEY"] = "k"
        try:
            run = await run_cli(suite, "-j", "1", "--max-cost", "0.45")
        finally:
            del os.environ["BUDGET_TEST_KEY"]
    # a test: agent 120 tokens ($0.12) + judge 120 tokens ($0.12) = $0.24; two reach $0.48
    assert [t["status"] for t in run.report["tests"]] == ["passed"] * 2 + ["skipped"] * 2
    spent = run.report["summary"]["budget"]["spent"]
    assert spent["agent_cost_usd"] == pytest.approx(0.24)
    assert spent["judge_cost_usd"] == pytest.approx(0.24)
    assert spent["judge_tokens"] == 240
    assert spent["agent_tokens"] == 240
    assert run.report["summary"]["budget"]["exhausted"] == "max_cost_usd"
    assert run.code == common.EXIT_BUDGET


async def test_max_duration_starts_no_test_after_the_time(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_slow.py": """
        import asyncio
        from agent_health import test

        def declare(n):
            @test(f"slow {n}")
            async def slow():
                await asyncio.sleep(0.4)

        for n in range(4):
            declare(n)
        """
        }
    )
    run = await run_cli(suite, "--no-ledger", "-j", "1", "--max-duration", "0.5")
    # the second test starts at >= 0.4 s, the third at >= 0.8 s: never
    got = [t["status"] for t in run.report["tests"]]
    assert got[:2] == ["passed", "passed"]
    assert set(got[2:]) == {"skipped"}
    assert run.report["summary"]["budget"]["exhausted"] == "max_duration_s"
    assert run.code == common.EXIT_BUDGET


async def test_within_budget_exits_0_and_shows_the_spend(
    write_suite: Any, agent: budget_support.MeteredAgent, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = five(write_suite)
    run = await run_cli(suite, "--agent", f"rest+{agent.url}", "--max-tokens", "10000")
    assert run.code == 0
    assert run.report["summary"]["budget"]["exhausted"] is None
    out = capsys.readouterr().out
    assert "budget: 600 of 10,000 tokens (known: agent 600 tokens, judge 0 tokens)" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-tokens", "0"], "--max-tokens must be positive"),
        (["--max-duration", "-1"], "--max-duration must be positive"),
        (["--max-cost", "1"], "--max-cost needs the agent's prices"),
    ],
)
def test_bad_budgets_are_usage_errors(
    write_suite: Any, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    suite = write_suite(
        **{"test_x.py": "from agent_health import test\n@test('x')\nasync def x(): pass\n"}
    )
    code = cli.main(["run", str(suite), "--no-ledger", *args])
    err = capsys.readouterr().err
    assert code == common.EXIT_USAGE
    assert says in err
    assert "Traceback" not in err
