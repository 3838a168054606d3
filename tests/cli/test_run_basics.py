"""End to end through the CLI against the example agent on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from support.helpers import INPROC_CONFIG, run_cli, run_cli_sync


async def test_statuses_and_exit_code(write_suite: Any, triage_url: str) -> None:
    suite = write_suite(
        **{
            "test_a.py": """
            from agent_health import test

            @test("passes", labels=["smoke"])
            async def passes(agent, expect):
                result = await agent.run("Diagnose the payment service")
                expect(result).to_have_called_tool("search_logs")
                expect(result.output).to_match("db-primary")

            @test("fails")
            async def fails(agent, expect):
                result = await agent.run("Diagnose the payment service")
                expect(result).to_have_called_tool("restart_pod")

            @test("errors")
            async def errors(agent):
                await agent.run("one")
                await agent.run("two")
            """
        }
    )
    run = await run_cli(suite, "--agent", f"rest+{triage_url}")
    assert run.code == 1
    assert run.by_name("passes")["status"] == "passed"
    failed = run.by_name("fails")
    assert failed["status"] == "failed"
    assert failed["signals"][0]["evidence"]["actual"]["tools_called"] == [
        "search_logs",
        "service_status",
    ]
    errored = run.by_name("errors")
    assert errored["status"] == "errored"
    assert "second time" in errored["error"]
    summary = run.report["summary"]
    assert summary["pass_rate"] == 0.5  # errored excluded
    assert (summary["passed"], summary["failed"], summary["errored"]) == (1, 1, 1)


def test_agent_down_is_errored_not_failed(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_down.py": """
            from agent_health import test

            @test("down")
            async def down(agent):
                await agent.run("hello")
            """
        }
    )
    # Not looked for before the first test (--no-preflight; with the look, an agent down
    # from the start is a usage error: test_connectors_preflight.py).
    run = run_cli_sync(suite, "--agent", "rest+http://127.0.0.1:9/run", "--no-preflight")
    assert run.code == 3
    test = run.by_name("down")
    assert test["status"] == "errored"
    assert "cannot connect" in test["error"]


def test_unknown_agent_is_usage_error(write_suite: Any, capsys: Any) -> None:
    suite: Path = write_suite(
        **{"test_x.py": "from agent_health import test\n@test('x')\nasync def x():\n    pass\n"}
    )
    run = run_cli_sync(suite, "--agent", "nosuch")
    assert run.code == 2
    assert "unknown agent 'nosuch'" in capsys.readouterr().err


def test_colons_in_a_title_or_a_value_are_shown_as_written_not_as_emoji(
    write_suite: Any,
) -> None:
    # rich reads ":x:" as an emoji code by default: a test's title and its expected value
    # were shown as 👍 and ❌ on the terminal, unlike the JSON report and the source.
    suite = write_suite(
        **{
            "agent-health.config.py": INPROC_CONFIG,
            "test_colons.py": """
            from agent_health import test

            @test("ping :thumbs_up:")
            async def ping(agent, expect):
                result = await agent.run("ping")
                expect(result.output).to_equal("pong :x:")
            """,
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", str(suite), "--no-ledger"],
        cwd=suite,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_colons.py::ping :thumbs_up:" in done.stdout
    assert "to_equal('pong :x:')" in done.stdout
    assert "\N{THUMBS UP SIGN}" not in done.stdout
    assert "\N{CROSS MARK}" not in done.stdout
