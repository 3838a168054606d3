"""A timed-out test says what the agent had sent before the timeout, in every reader (issue 24).

The hostile agent (``tests/support/hostile_agent.py``, its own process on 127.0.0.1, ``--answer
stall``) starts a 200 answer whose JSON holds terminal escapes, a right-to-left override and
characters XML forbids, then sends nothing more; an AG-UI agent (a scripted SSE server)
streams a message, a tool call and its result, then stalls inside a second message and call.
Through the real CLI: the JSON report keeps what came as it came (``tests[].partial``), the
terminal's failure list shows its first lines with the escapes made visible, and JUnit's
``system-out`` holds it escaped in a file a CI system parses. The HTML page is read in
Chromium by ``tests/engine/test_engine_html_browser.py``.
"""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine import visible
from support import loopback
from support.hostile_agent import REWRITE, _raw
from support.hostile_support import free_port, hostile_target
from support.terminal_support import run_in_terminal

SUITE = """
from agent_health import test


@test("stalls")
async def stalls(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing. [stall]", timeout=1)
    expect(result.output).to_contain("db-primary")
"""
SENT = b'{"output": "' + _raw(REWRITE)
"""What the stalling agent sends before it stops (hostile_agent.stall)."""
RAW = (b"\x1b]", b"\x07", b"\x00", b"\x01", b"\xc2\x9b", "\u202e".encode())


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_stall.py").write_text(SUITE)
    return folder


def _system_out(junit: Path, name: str) -> str:
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == name)
    out = case.find("system-out")
    assert out is not None
    assert out.text is not None
    return out.text


async def test_a_stalled_answer_reaches_the_json_report_the_terminal_and_junit(
    suite: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    report, junit = tmp_path / "r.json", tmp_path / "junit.xml"
    async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="stall", attacks=""):
        seen = await asyncio.to_thread(
            run_in_terminal,
            ["run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run",
             "--reporter", f"json:{report}", "--reporter", f"junit:{junit}"],
            tmp_path,
        )  # fmt: skip
    assert seen.code == 3, seen.text  # errored only: the agent timed out
    # the JSON report keeps what came, as it came (decoded: the lone surrogate's bytes are
    # not UTF-8, so they read as U+FFFD)
    (test,) = json.loads(report.read_text())["tests"]
    assert test["cause"] == "agent"
    assert "did not answer within 1 s" in test["error"]
    assert (test["output"], test["trajectory"], test["truncated"]) == (None, [], [])
    text = SENT.decode("utf-8", "replace")
    assert test["partial"] == {
        "source": "body",
        "bytes": len(SENT),
        "text": text,
        "truncated": False,
        "events": None,
        "trajectory": [],
    }
    # the terminal shows its first lines, the escapes visible; nothing of it acts on the screen
    for raw in RAW:
        assert raw not in seen.raw, (raw, seen.text)
    assert seen.title == ""
    screen = seen.text
    assert f"  before the timeout the agent had sent {len(SENT)} bytes of its answer:" in screen
    assert '    {"output": "\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed  test_demo.py' in screen
    assert "    \\x1b]0;all tests passed\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07" in screen
    assert not any(line.startswith("✓ passed") for line in seen.lines), screen
    # JUnit's system-out holds it, escaped (the file parses: conftest checks every JUnit file)
    out = _system_out(junit, "stalls")
    heading = f"before the timeout the agent had sent {len(SENT)} bytes of its answer"
    assert f"[partial] {heading}:\n" in out
    assert visible.block(text) in out
    assert "\x1b" not in junit.read_text(encoding="utf-8")
    # a saved report with it reads back: report re-renders it, compare reads it
    again = tmp_path / "again.xml"
    capfd.readouterr()
    assert cli.main(["report", str(report), "--reporter", f"junit:{again}"]) == 0
    reported = capfd.readouterr().out
    assert "before the timeout the agent had sent" in reported
    assert '{"output": "\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed' in reported
    for raw in RAW:
        assert raw.decode("utf-8", "replace") not in reported, raw
    assert _system_out(again, "stalls") == out
    assert cli.main(["compare", str(report), str(report)]) == 0


AGUI_SUITE = """
from agent_health import test


@test("stalls mid-call")
async def stalls(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.", timeout=1)
    expect(result).to_have_called_tool("service_status")
"""
SAID = "It cannot reach db-pri\x1b[2K\u202e"


async def test_an_agui_agent_that_stalls_shows_the_events_so_far(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_agui.py").write_text(AGUI_SUITE)
    report, junit = tmp_path / "r.json", tmp_path / "junit.xml"
    frames = loopback.half_a_run(SAID)
    async with loopback.serving(loopback.stalling_sse(frames)) as url:
        code = await asyncio.to_thread(
            cli.main,
            ["run", str(suite), "--agent", f"agui+{url}", "--reporter", f"json:{report}",
             "--reporter", f"junit:{junit}"],
        )  # fmt: skip
    assert code == 3
    (test,) = json.loads(report.read_text())["tests"]
    partial: dict[str, Any] = test["partial"]
    assert (partial["source"], partial["events"]) == ("events", len(frames))
    assert partial["bytes"] == sum(map(len, frames))
    assert partial["text"] == f"Checking the logs.\n{SAID}"
    steps = [(s["type"], s.get("tool_name")) for s in partial["trajectory"]]
    assert steps == [
        ("assistant", None),
        ("tool_call", "search_logs"),
        ("tool_result", "search_logs"),
        ("assistant", None),
        ("tool_call", "service_status"),
    ]
    assert partial["trajectory"][4]["tool_args"] == {"_raw": '{"name": "db-'}
    heading = (
        f"before the timeout the agent had sent {len(frames)} AG-UI events, "
        f"{partial['bytes']:,} bytes; tool calls: search_logs, service_status"
    )
    out = capfd.readouterr().out
    shown = "It cannot reach db-pri\\x1b[2K\\u202e"
    assert f"  {heading}:\n    Checking the logs.\n    {shown}\n" in out
    assert "\x1b" not in out
    assert "\u202e" not in out
    system_out = _system_out(junit, "stalls mid-call")
    assert f"[partial] {heading}:\nChecking the logs.\n{shown}" in system_out
