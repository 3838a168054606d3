"""The subprocess connector: real commands, their process groups, and every error path."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agent_health import connectors
from agent_health.connectors import errors, subprocess
from support.loopback import request

CLI_AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "triage_cli.py"


def script(tmp_path: Path, source: str, name: str = "agent.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


async def run(*command: str, timeout: float = 60.0, **fields: Any) -> connectors.AgentReply:
    spec = connectors.ConnectorSpec(connector="subprocess", command=command, timeout=timeout)
    conn = connectors.create(spec)
    try:
        return await conn.run(request(**fields))
    finally:
        await conn.aclose()


def _exited(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie has exited; its new parent reaps it


def _pid_in(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


async def gone(pid: int) -> None:
    """Wait until ``pid`` has exited."""
    while True:
        if await asyncio.to_thread(_exited, pid):
            return
        await asyncio.sleep(0.01)


async def appears(path: Path) -> int:
    """Wait until a command has written its pid to ``path``."""
    while True:
        pid = await asyncio.to_thread(_pid_in, path)
        if pid is not None:
            return pid
        await asyncio.sleep(0.01)


async def test_example_cli_agent_json_lines() -> None:
    reply = await run("python", str(CLI_AGENT))
    assert "db-primary" in reply.output
    assert [s.type for s in reply.trajectory] == [
        "thinking",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
        "assistant",
    ]
    assert reply.trajectory[1].tool_args == {"service": "payment", "level": "error"}
    assert reply.trajectory[2].status == "ok"
    assert reply.token_usage.total > 0


async def test_example_cli_agent_single_json_answer() -> None:
    reply = await run("python", str(CLI_AGENT), "--json", prompt="Why are logins failing on auth?")
    assert "expired TLS certificate" in reply.output
    assert [s.tool_name for s in reply.trajectory if s.type == "tool_call"] == [
        "search_logs",
        "service_status",
    ]


async def test_request_on_stdin_and_in_the_environment(tmp_path: Path) -> None:
    agent = script(
        tmp_path,
        """
        import json, os, sys
        body = json.load(sys.stdin)
        print(json.dumps({
            "output": os.environ["AGENT_HEALTH_PROMPT"],
            "stdin": body,
            "seen": [os.environ[k] for k in ("AGENT_HEALTH_RUN_ID", "TRACEPARENT", "REGION")],
            "cwd": os.getcwd(),
        }))
        """,
    )
    reply = await run(
        "python",
        agent,
        context=[{"description": "log", "value": "refused"}],
        env={"REGION": "eu"},
    )
    assert reply.output == "Diagnose the payment service"
    extra = reply.model_extra or {}
    assert extra["stdin"] == {
        "prompt": "Diagnose the payment service",
        "context": [{"description": "log", "value": "refused"}],
        "run_id": "run-1",
        "env": {"REGION": "eu"},
    }
    assert extra["seen"][0] == "run-1"
    assert extra["seen"][1].startswith("00-aaaa")
    assert extra["seen"][2] == "eu"


async def test_runs_in_the_spec_cwd(tmp_path: Path) -> None:
    agent = script(tmp_path, "import json, os\nprint(json.dumps({'output': os.getcwd()}))\n")
    spec = connectors.ConnectorSpec(
        connector="subprocess", command=("python", agent), cwd=str(tmp_path)
    )
    conn = connectors.create(spec)
    reply = await conn.run(request())
    await conn.aclose()
    assert Path(reply.output) == tmp_path


async def test_non_zero_exit_quotes_stderr() -> None:
    with pytest.raises(
        errors.AgentRunFailed, match=r"exited with 3: triage_cli: simulated failure \(FAIL=exit\)"
    ):
        await run("python", str(CLI_AGENT), env={"FAIL": "exit"})


async def test_killed_by_a_signal(tmp_path: Path) -> None:
    agent = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(errors.AgentRunFailed, match="was killed by SIGKILL"):
        await run("python", agent)


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    # The command exits at once, but a child it started keeps stdout open, so the run can
    # only end by the timeout; the child must die with the group.
    pidfile = tmp_path / "child.pid"
    agent = script(
        tmp_path,
        f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started a child", file=sys.stderr, flush=True)
        """,
    )
    with pytest.raises(errors.AgentTimeout, match=r"within 2 s \(its process group was killed\)"):
        await run("python", agent, timeout=2.0)
    pid = _pid_in(pidfile)
    assert pid is not None
    await gone(pid)


async def test_cancelled_run_kills_the_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "agent.pid"
    agent = script(
        tmp_path,
        f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """,
    )
    task = asyncio.create_task(run("python", agent))
    pid = await appears(pidfile)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gone(pid)


async def test_aclose_stops_running_commands(tmp_path: Path) -> None:
    pidfile = tmp_path / "agent.pid"
    agent = script(
        tmp_path,
        f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """,
    )
    conn = connectors.create(connectors.ConnectorSpec.parse(f"cmd:python {agent}"))
    task = asyncio.create_task(conn.run(request()))
    pid = await appears(pidfile)
    await conn.aclose()
    with pytest.raises(errors.AgentRunFailed, match="was killed by SIGTERM"):
        await task
    await gone(pid)


@pytest.mark.parametrize(
    ("stdout", "error", "message"),
    [
        ("", errors.AgentProtocolError, "printed nothing on stdout"),
        (
            '{"type": "thinking", "content": "hm"}\nnot json\n{"output": "x"}',
            errors.AgentProtocolError,
            "stdout line 2 that is not JSON: not json",
        ),
        (
            '{"type": "flying"}\n{"output": "x"}',
            errors.AgentProtocolError,
            "step on stdout line 1 that is not a REST protocol v1 step: type",
        ),
        ('[1, 2]\n{"output": "x"}', errors.AgentProtocolError, "neither a step"),
        ('{"type": "thinking", "content": "hm"}', errors.AgentStreamIncomplete, "1 steps but no"),
        ('{"output": 5}', errors.AgentProtocolError, "its JSON answer is not REST protocol v1"),
    ],
)
async def test_malformed_stdout(
    tmp_path: Path, stdout: str, error: type[Exception], message: str
) -> None:
    agent = script(tmp_path, f"import sys\nsys.stdout.write({stdout!r})\n")
    with pytest.raises(error, match=message):
        await run("python", agent)


def test_json_lines_and_whole_answers_parse_alike() -> None:
    lines = (
        '{"type": "tool_call", "tool_name": "t", "tool_args": {"a": 1}}\n'
        '\n{"output": "done", "token_usage": {"prompt": 2, "completion": 3}}\n'
    )
    whole = (
        '{"output": "done", "trajectory": [{"type": "tool_call", "tool_name": "t", '
        '"tool_args": {"a": 1}}], "token_usage": {"prompt": 2, "completion": 3}}'
    )
    assert subprocess.parse(lines, "x") == subprocess.parse(whole, "x")
    assert subprocess.parse(lines, "x").token_usage.total == 5


async def test_command_that_cannot_start() -> None:
    with pytest.raises(errors.ConnectorConfigError, match="cannot start agent command"):
        await run("/no/such/agent-binary")


def test_cmd_form_uses_this_interpreter() -> None:
    conn = connectors.create(connectors.ConnectorSpec.parse("cmd:python agent.py --fast"))
    assert isinstance(conn, subprocess.SubprocessConnector)
    assert conn.argv == [sys.executable, "agent.py", "--fast"]
    with pytest.raises(errors.ConnectorConfigError, match="needs a command"):
        connectors.create(connectors.ConnectorSpec(connector="subprocess"))
