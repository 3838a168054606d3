"""A Pydantic AI agent (examples/agents/mcp_agent.py) whose MCP server is the real
mcp-server-git from PyPI, on a temporary repository, run over stdio behind the bridge as a
local run's peer: its git_log call is read by the gateway and the test is held to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "mcp_agent.py"

CONFIG = """
import sys
from agent_health import define_config

config = define_config(
    agents={{"git-agent": {{
        "connector": "agui",
        "url": "http://127.0.0.1:{{port}}/agent",
        "command": [sys.executable, {agent!r}, "--port", "{{port}}"],
        "ready_url": "http://127.0.0.1:{{port}}/healthz",
    }}}},
    peers={{"git": {{
        "command": [sys.executable, "-m", "mcp_server_git", "--repository", {repo!r}],
    }}}},
)
"""

SUITE = """
from agent_health import test

REPO = {repo!r}


@test("reads the last commits with the git server")
async def reads_commits(agent, expect):
    result = await agent.run(f"What are the latest commits in {{REPO}}?")
    expect(result).to_have_called_tool("git_log", {{"repo_path": REPO}}, server="git")
    expect(result.output).to_contain("first commit")


@test("claims a repository the agent never read")
async def claims_other(agent, expect):
    result = await agent.run(f"What are the latest commits in {{REPO}}?")
    expect(result).to_have_called_tool("git_log", {{"repo_path": "/elsewhere"}})
"""


@pytest.mark.slow
def test_a_framework_agent_calls_mcp_server_git_and_is_held_to_the_call(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "agent-health.config.py").write_text(CONFIG.format(agent=str(AGENT), repo=str(repo)))
    (suite / "test_git.py").write_text(SUITE.format(repo=str(repo)))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", "-j", "1", "--reporter",
         f"json:{report}"],
        cwd=suite, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    reads = tests["reads the last commits with the git server"]
    assert reads["status"] == "passed", reads
    [called] = [s for s in reads["signals"] if s["name"].startswith("to_have_called_tool")]
    assert called["evidence"]["source"] == "gateway"
    assert [c["name"] for c in reads["mcp_calls"] if c["method"] == "tools/call"] == ["git_log"]
    assert reads["mcp_calls"][-1]["server"] == "peer:git"
    # The agent's own trajectory has the call, but with other arguments than the test asks:
    # failed on the agent's word already, and on the gateway's.
    other = tests["claims a repository the agent never read"]
    assert other["status"] == "failed"
