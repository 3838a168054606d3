"""A local run's MCP peers: the config's stdio server (mcp-server-time behind the bridge) and a
test's mock server, each behind the run's in-process gateway; every call an agent makes to
them is an ``mcp`` record in the calling test's ledger cell, and the mock holds the agent to
its tools (no unknown tool, no decoy)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_health.ledger import objects

SUITE = Path(__file__).parents[1] / "data" / "mcp_suite"


@pytest.mark.slow
def test_mcp_calls_are_recorded_in_the_calling_tests_cell(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    shutil.copytree(SUITE, suite)
    report, ledger = tmp_path / "report.json", tmp_path / "ledger"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", "-j", "3",
         "--reporter", f"json:{report}", "--ledger", f"file://{ledger}"],
        cwd=suite, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "belongs to no single test" not in proc.stdout + proc.stderr
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    assert tests["asks the time and the tickets"]["status"] == "passed"
    decoy = tests["calls the decoy"]
    assert decoy["status"] == "failed"
    [gate] = [s for s in decoy["signals"] if s["passed"] is False]
    assert gate["name"] == "mock MCP server tickets: no decoy tool called"
    unknown = tests["calls a tool the server does not have"]
    [gate] = [s for s in unknown["signals"] if s["passed"] is False]
    assert gate["name"] == "mock MCP server tickets: only its tools called"
    assert gate["evidence"]["actual"] == ["drop_tables"]
    lies = tests["claims a call it never made"]
    assert lies["status"] == "failed"
    server, never = [s for s in lies["signals"] if s["name"].startswith("to_have_called_tool")]
    assert (server["passed"], server["evidence"]["source"]) == (True, "gateway")
    assert never["passed"] is False
    assert never["evidence"]["problem"] == "claimed by the agent, not seen by the gateway"
    hides = tests["hides a tool error"]
    assert hides["status"] == "failed"
    [no_errors] = [s for s in hides["signals"] if s["name"] == "to_have_no_tool_errors()"]
    assert no_errors["evidence"]["problem"] == "the gateway saw the MCP server answer isError"
    assert hides["metrics"]["ignored_tool_errors"] == 1
    calls: dict[str, list[tuple[str, str, bool | None]]] = {}
    run_ids = {t["run_id"]: name for name, t in tests.items()}
    lines = (ledger / "run.jsonl").read_text().splitlines()
    recorded = [json.loads(line).get("record", {}) for line in lines]
    # Each call rides in its exchange's record (version 5), or is a record alone.
    assert any(r.get("kind") == "exchange" and r.get("mcp") for r in recorded)
    for record in objects.unfold(recorded):
        if record.get("kind") == "mcp" and record["method"] == "tools/call":
            calls.setdefault(run_ids[record["run_id"]], []).append(
                (record["server"], record["name"], record["is_error"])
            )
    assert calls == {
        "asks the time and the tickets": [
            ("peer:time", "get_current_time", False),
            ("peer:tickets", "search", False),
        ],
        "calls the decoy": [
            ("peer:time", "get_current_time", False),
            ("peer:tickets", "search", False),
            ("peer:tickets", "close_all", False),
        ],
        "calls a tool the server does not have": [
            ("peer:time", "get_current_time", False),
            ("peer:tickets", "search", False),
            ("peer:tickets", "drop_tables", None),
        ],
        "claims a call it never made": [
            ("peer:time", "get_current_time", False),
            ("peer:tickets", "search", False),
        ],
        "hides a tool error": [
            ("peer:time", "get_current_time", False),
            ("peer:tickets", "search", False),
            ("peer:tickets", "page_oncall", True),
        ],
    }
    verified = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "ledger", "verify", f"file://{ledger}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_peer_needs_a_url_or_a_command_and_a_dns_name() -> None:
    from agent_health import define_config
    from agent_health.sdk import errors

    with pytest.raises(errors.ConfigError, match="give the server's url, or"):
        define_config(peers={"time": {}})
    with pytest.raises(errors.ConfigError, match="protocol must be mcp"):
        define_config(peers={"time": {"protocol": "http", "command": "x"}})
    with pytest.raises(errors.ConfigError, match=r"peers\.Time"):
        define_config(peers={"Time": {"url": "http://127.0.0.1:1/mcp"}})


def test_a_peer_that_cannot_listen_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "agent-health.config.py").write_text(
            "from agent_health import define_config\n"
            f"config = define_config(peers={{'docs': {{'url': 'http://127.0.0.1:9/mcp', "
            f"'listen': '127.0.0.1:{port}'}}}})\n"
        )
        (tmp_path / "test_x.py").write_text(
            "from agent_health import test\n\n@test('t')\nasync def t(expect):\n"
            "    expect(1).to_equal(1)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-m", "agent_health.cli", "run", "--no-ledger"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"peers.docs: cannot listen on 127.0.0.1:{port}" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
