"""Every timeout is finite and at most a day, at every door it comes in by (a case file,
``@test(timeout=)``, ``agent.run(timeout=)``, ``--timeout``, the config), and every JSON
the CLI prints is JSON: through the real CLI, against a REST agent on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_health import cli
from aiohttp import web
from support.helpers import run_cli
from support.loopback import serving

CASE = {
    "name": "payment outage",
    "category": "RCA",
    "difficulty": "Easy",
    "initialPrompt": "Diagnose why the payment service is failing.",
    "expectedTrajectory": [{"step": 1, "description": "logs", "requiredTools": ["search_logs"]}],
}


async def _answer(request: web.Request) -> web.Response:
    await request.json()
    return web.json_response(
        {
            "output": "db-primary refuses connections",
            "trajectory": [{"type": "tool_call", "tool_name": "search_logs", "tool_args": {}}],
        }
    )


def _strict(text: str) -> Any:
    """``text`` as JSON, refusing the ``NaN`` / ``Infinity`` Python's json would take."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the output: not JSON")

    return json.loads(text, parse_constant=refuse)


def _errors(capsys: Any, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    return code, capsys.readouterr().err


async def test_a_case_files_infinite_timeout_is_refused_over_the_timeout_flag(
    write_suite: Any,
) -> None:
    # 1e999 reads as infinity: the test ran with no deadline at all, whatever --timeout said.
    text = json.dumps([{**CASE, "timeout": 30}], indent=1).replace("30", "1e999")
    suite = write_suite(**{"slow.cases.json": text})
    async with serving(_answer) as url:
        run = await run_cli(suite, "--agent", f"rest+{url}", "--timeout", "2", "--no-ledger")
    assert run.code == 2
    [error] = run.report["summary"]["load_errors"]
    assert error.startswith("slow.cases.json:")
    assert "case [0] 'payment outage': timeout: is infinite" in error
    assert "a timeout is seconds, a finite number above 0 and at most 86,400 (a day)" in error
    assert run.report["tests"] == []
    # A day and no more: 86,401 s is refused too; a finite, bounded timeout runs.
    for seconds, runs in ((86_401, False), (86_400, True)):
        write_suite(**{"slow.cases.json": json.dumps([{**CASE, "timeout": seconds}])})
        async with serving(_answer) as url:
            run = await run_cli(suite, "--agent", f"rest+{url}", "--no-ledger")
        assert (run.code == 0) is runs, run.report["summary"]


@pytest.mark.parametrize("value", ['float("inf")', 'float("nan")', "0", "-1", "86_401", '"30"'])
async def test_a_code_tests_timeout_is_checked_where_it_is_declared(
    write_suite: Any, value: str
) -> None:
    suite = write_suite(
        **{
            "test_slow.py": f"""
            from agent_health import test

            @test("waits", timeout={value})
            async def waits(expect):
                expect(1).to_equal(1)
            """
        }
    )
    run = await run_cli(suite, "--no-ledger")
    assert run.code == 2
    [error] = run.report["summary"]["load_errors"]
    assert "test 'waits': timeout= is " in error
    assert "a timeout is seconds, a finite number above 0 and at most 86,400 (a day)" in error


async def test_agent_runs_timeout_is_checked_when_it_is_called(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_run.py": """
            from agent_health import test

            @test("runs without end")
            async def runs(agent, expect):
                await agent.run("Diagnose", timeout=float("inf"))
            """
        }
    )
    async with serving(_answer) as url:
        run = await run_cli(suite, "--agent", f"rest+{url}", "--no-ledger")
    entry = run.by_name("runs without end")
    assert (entry["status"], entry["cause"]) == ("errored", "test")
    assert "agent.run(timeout=...) is infinite" in entry["error"]


@pytest.mark.parametrize("value", ["inf", "nan", "1e999", "0", "86401"])
def test_the_timeout_flag_is_finite_and_at_most_a_day(
    write_suite: Any, capsys: Any, value: str
) -> None:
    suite = write_suite(**{"test_data.py": "from agent_health import test\n"})
    code, err = _errors(capsys, "run", str(suite), "--timeout", value)
    assert code == 2
    assert "--timeout is " in err
    assert "at most 86,400 (a day)" in err


@pytest.mark.parametrize("flag", ["--max-cost", "--max-duration"])
def test_a_budget_is_a_finite_number(write_suite: Any, capsys: Any, flag: str) -> None:
    suite = write_suite(**{"test_data.py": "from agent_health import test\n"})
    for value in ("nan", "inf"):
        code, err = _errors(capsys, "run", str(suite), flag, value)
        assert code == 2
        assert f"{flag} must be positive and finite" in err


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("timeout=float('inf')", "timeout"),
        ("agents={'a': {'url': 'http://127.0.0.1:9/run', 'timeout': float('nan')}}", "timeout"),
        ("agents={'a': {'url': 'http://127.0.0.1:9/run', 'ready_timeout': 1e999}}", "ready"),
        ("judge={'model': 'm', 'timeout': float('inf')}", "judge.timeout"),
        ("judge={'model': 'm', 'retry': {'max_time': 1e9}}", "judge.retry.max_time"),
        ("otlp={'endpoint': 'http://127.0.0.1:9', 'timeout': float('inf')}", "otlp.timeout"),
    ],
)
def test_the_configs_timeouts_are_finite_and_at_most_a_day(
    write_suite: Any, capsys: Any, config: str, field: str
) -> None:
    suite = write_suite(
        **{
            "agent-health.config.py": (
                f"from agent_health import define_config\nconfig = define_config({config})\n"
            ),
            "test_data.py": "from agent_health import test\n",
        }
    )
    code, err = _errors(capsys, "list", str(suite))
    assert code == 2
    assert field in err
    assert "a timeout is seconds, a finite number" in err


def test_list_json_is_json_whatever_a_code_test_declares(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(
        **{
            "test_meta.py": """
            from agent_health import test

            @test("odd", expected_trajectory=[{"step": 1, "weight": float("nan")}],
                  context=[{"description": "d", "value": "v"}])
            async def odd(expect):
                expect(1).to_equal(1)
            """
        }
    )
    capsys.readouterr()
    assert cli.main(["list", "--json", str(suite)]) == 0
    [entry] = _strict(capsys.readouterr().out)
    assert entry["expected_trajectory"] == [{"step": 1, "weight": None}]
