"""No silent zeros (issue 13): what the agent did not report is unknown, and a gate on it fails.

The agent is the hostile one, as its own process: ``silent`` answers with an ``output`` and
nothing else — no trajectory, no token usage. Before, ``to_use_at_most_tokens(10)`` passed
on "total_tokens 0" and ``not_to_have_called_tool`` passed on an empty trajectory. ``zero``
reports zero tokens and no steps explicitly: those are real zeros, and the gates pass.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support.helpers import run_cli
from support.hostile_support import free_port, hostile_target

SUITE = """
from agent_health import test


@test("gates on what the agent reports")
async def gates(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_use_at_most_tokens(10)
    expect(result).not_to_have_called_tool("restart_database")
    expect(result).to_have_called_tool("search_logs", times=0)
    expect(result).to_have_no_tool_errors()
    expect(result.output).to_contain("db-primary")
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_zeros.py").write_text(SUITE)
    return tmp_path / "suite"


async def _run(tmp_path: Path, suite: Path, answer: str, *args: str) -> tuple[int, Any]:
    port = free_port()
    async with hostile_target(port, tmp_path / f"{answer}.jsonl", {}, answer=answer, attacks=""):
        done = await run_cli(suite, "--agent", f"rest+http://127.0.0.1:{port}/run", *args)
    return done.code, done.report


async def test_gates_on_what_the_agent_did_not_report_fail_saying_what_was_missing(
    tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = await _run(tmp_path, suite, "silent", "--no-ledger")
    assert code == 1
    (test,) = report["tests"]
    assert test["status"] == "failed"
    signals = {s["name"]: s for s in test["signals"] if s["kind"] == "deterministic"}
    tokens = signals["to_use_at_most_tokens(10)"]
    assert tokens["passed"] is False  # before: passed on "actual total_tokens 0"
    assert tokens["evidence"]["actual"] == {"total_tokens": None}
    assert "reported no token usage" in tokens["evidence"]["missing"]
    for name in (
        "not_to_have_called_tool('restart_database')",
        "to_have_called_tool('search_logs', times=0)",
        "to_have_no_tool_errors()",
    ):
        assert signals[name]["passed"] is False, name
        assert "reported no trajectory" in signals[name]["evidence"]["missing"]
    assert signals["to_contain('db-primary')"]["passed"] is True
    metrics = test["metrics"]
    for key in ("total_tokens", "input_tokens", "output_tokens", "cost_usd", "tool_calls"):
        assert metrics[key] is None, key  # unknown, never 0
    for key in ("llm_calls", "tool_histogram", "redundant_tool_calls", "ignored_tool_errors"):
        assert metrics[key] is None, key
    summary = report["summary"]
    assert (summary["tokens"], summary["tokens_unreported"]) == (None, 1)
    assert "tokens not reported" in capsys.readouterr().out


async def test_zeros_the_agent_reported_are_real_and_pass(tmp_path: Path, suite: Path) -> None:
    code, report = await _run(tmp_path, suite, "zero", "--no-ledger")
    (test,) = report["tests"]
    assert (code, test["status"]) == (0, "passed")
    assert (test["metrics"]["total_tokens"], test["metrics"]["tool_calls"]) == (0, 0)
    assert (report["summary"]["tokens"], report["summary"]["tokens_unreported"]) == (0, 0)


async def test_a_regraded_ledger_keeps_what_was_not_reported_unknown(
    tmp_path: Path, suite: Path
) -> None:
    ledger = tmp_path / "ledger"
    await _run(tmp_path, suite, "silent", "--ledger", f"file://{ledger}")
    out = tmp_path / "regraded.json"
    key = ledger.parent / f"{ledger.name}.key"
    args = ["grade", str(ledger), "--key-file", str(key), "--reporter", f"json:{out}"]
    assert await asyncio.to_thread(cli.main, args) == 1
    (test,) = json.loads(out.read_text())["tests"]
    assert test["status"] == "failed"
    assert (test["metrics"]["total_tokens"], test["metrics"]["tool_calls"]) == (None, None)
