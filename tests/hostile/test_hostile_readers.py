"""What a person or a CI system reads is what happened, whatever the agent sends (issue 24).

The hostile agent (``tests/support/hostile_agent.py``, its own process on 127.0.0.1) answers one
test with HTTP 500 and a body of terminal escapes (``--answer rewrite``: move up, erase the line,
print a fake "✓ passed", set the window title, write the clipboard) and characters XML
forbids; another with a wrong answer carrying the same in its output, tool names, arguments
and results (``garble``). A case file adds a title and a label made of the same. Before, on
an 80-column terminal the escapes turned the live "✗ failed" into "✓ passed", erased the
"ERRORED" heading and set the title to "all tests passed"; the JUnit file did not parse.
Now every reader shows the characters as escapes (``\\x1b``), and the JSON report and the
ledger keep the text unchanged.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support import junit_support
from support.hostile_agent import REWRITE
from support.hostile_support import free_port, hostile_target
from support.terminal_support import Terminal, run_in_terminal

SUITE = """
from agent_health import test

PROMPT = "Diagnose why the payment service is failing."


@test("a wrong answer", labels=["difficulty:hard"])
async def wrong(agent, expect):
    result = await agent.run(PROMPT + " [bad]")
    expect(result.output).to_contain("db-primary")


@test("answers 500", labels=["difficulty:medium"])
async def answers_500(agent, expect):
    result = await agent.run(PROMPT + " [rewrite]")
    expect(result.output).to_contain("db-primary")


@test("garbles", labels=["difficulty:easy"])
async def garbles(agent, expect):
    result = await agent.run(PROMPT + " [garble]")
    print(result.output)
    expect(result).to_have_called_tool("search_logs")
"""
# A case file's title and label are outside text too: the same escapes, in JSON.
CASES = [
    {
        "name": "case \x1b]0;all tests passed\x07\x1b[2K\u202edessap",
        "category": "RCA\x1b[1A",
        "difficulty": "Hard",
        "initialPrompt": "Diagnose why the payment service is failing. [bad]",
        "expectedTrajectory": [{"step": 1, "description": "logs", "requiredTools": ["search"]}],
    }
]
# What only the agent sends: none of these may reach a terminal raw (rich's own live display
# moves the cursor up and erases lines too, so those escapes are read on the screen instead).
RAW = (b"\x1b]", b"\x07", b"\x00", b"\x01", b"\xc2\x9b", "\u202e".encode())


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_demo.py").write_text(SUITE)
    (folder / "test_hostile.cases.json").write_text(json.dumps(CASES))
    return folder


async def _in_terminal(suite: Path, tmp_path: Path, *args: str) -> Terminal:
    port = free_port()
    async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="by-prompt", attacks=""):
        return await asyncio.to_thread(
            run_in_terminal,
            ["run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run", "-j", "1", *args],
            tmp_path,
        )


async def test_an_agent_cannot_rewrite_the_terminal(suite: Path, tmp_path: Path) -> None:
    seen = await _in_terminal(suite, tmp_path, "--no-ledger")
    assert seen.code == 1, seen.text
    # only agent-health's own styling reached the terminal
    for raw in RAW:
        assert raw not in seen.raw, (raw, seen.text)
    assert seen.title == ""  # not "all tests passed"
    screen = seen.text
    # the live line of the failed test is still there, and no fake pass took its place
    assert re.search(r"^✗ failed  test_demo\.py › a wrong answer \(\d+ ms\)$", screen, re.M)
    assert not re.search(r"^✓ passed", screen, re.M), screen
    # the errored line shows what the agent sent, as escapes
    assert "answered HTTP 500: \\x1b[1A\\x1b[2K" in screen
    assert "\\x1b]0;all tests passed\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07" in screen
    assert "\\u202edessap\\u202c" in screen
    # the failure list keeps its headings, and the case file's title is shown as written
    assert "\nERRORED test_demo.py::answers 500\n" in screen
    assert "\nFAILED test_demo.py::garbles\n" in screen
    assert "FAILED test_hostile.cases.json::case \\x1b]0;all tests passed\\x07" in screen
    # what the body printed is shown, escapes visible, under its failure
    assert "    No idea.\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed  test_demo.py" in screen
    # the label from the case file, as written
    assert "category:RCA\\x1b[1A" in screen


async def test_results_fit_80_columns(suite: Path, tmp_path: Path) -> None:
    seen = await _in_terminal(suite, tmp_path, "--no-ledger")
    lines = seen.lines
    assert max(len(line) for line in lines) <= 80
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["test", "result"])
    rows = lines[head + 2 : head + 6]
    # one line per test, its title cut rather than wrapped: its status and time on its line,
    # and the line after the four rows is not the rest of a row
    assert not lines[head + 6].strip(), lines[head : head + 7]
    for status in ("✗ failed", "! errored (agent)"):
        found = [line for line in rows if status in line]
        assert found, (status, rows)
        assert all(re.search(r"\d\.\d\ds$", line) for line in found), found
    # three labels that share a prefix stay three
    for label in ("difficulty:easy", "difficulty:hard", "difficulty:medium"):
        assert label in seen.text, seen.text


def _values(data: Any) -> list[str]:
    """Every string in JSON data, keys included."""
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in (k, *_values(v))]
    if isinstance(data, list):
        return [s for v in data for s in _values(v)]
    return [data] if isinstance(data, str) else []


async def test_junit_parses_and_the_json_report_and_ledger_keep_the_text(
    suite: Path, tmp_path: Path
) -> None:
    port = free_port()
    junit, report, ledger = tmp_path / "junit.xml", tmp_path / "r.json", tmp_path / "ledger"
    args = [
        "run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run",
        "--reporter", f"junit:{junit}", "--reporter", f"json:{report}",
        "--ledger", f"file://{ledger}",
    ]  # fmt: skip
    async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="by-prompt", attacks=""):
        code = await asyncio.to_thread(cli.main, args)
    assert code == 1
    junit_support.check(junit)  # well-formed XML 1.0, in the schema's order, no None
    text = junit.read_text(encoding="utf-8")
    assert "\x1b" not in text
    assert "\x00" not in text
    assert "answered HTTP 500: \\x1b[1A\\x1b[2K" in text
    assert 'value="None"' not in text
    # the JSON report keeps what the agent sent, unchanged (the lone surrogate too)
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    assert "\x1b[1A\x1b[2K" in tests["answers 500"]["error"]
    garbled = tests["garbles"]
    assert garbled["output"] == f"No idea.{REWRITE}"
    assert garbled["trajectory"][0]["tool_name"] == f"search{REWRITE}"
    # (the connector's JSON parser reads a lone surrogate in a key as U+FFFD; values keep it)
    assert list(garbled["trajectory"][0]["tool_args"].values()) == [REWRITE]
    # and so does the ledger
    recorded = [
        s
        for path in ledger.rglob("*.jsonl")
        for line in path.read_text().splitlines()
        for s in _values(json.loads(line))
    ]
    assert any(s == f"No idea.{REWRITE}" for s in recorded)


def test_list_shows_a_case_files_title_as_written(
    suite: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["list", str(suite)]) == 0
    out = capfd.readouterr().out
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "case \\x1b]0;all tests passed\\x07\\x1b[2K\\u202edessap" in out
    assert "category:RCA\\x1b[1A]" in out  # the label, escaped, closes the list


async def test_compare_and_report_show_the_text_as_written(
    suite: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    async with hostile_target(port, tmp_path / "good.jsonl", {}, answer="good", attacks=""):
        await asyncio.to_thread(
            cli.main,
            ["run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run", "--no-ledger",
             "--reporter", f"json:{base}"],
        )  # fmt: skip
    port = free_port()
    async with hostile_target(port, tmp_path / "bad.jsonl", {}, answer="by-prompt", attacks=""):
        await asyncio.to_thread(
            cli.main,
            ["run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run", "--no-ledger",
             "--reporter", f"json:{new}"],
        )  # fmt: skip
    capfd.readouterr()
    assert cli.main(["compare", str(base), str(new)]) == 1
    compared = capfd.readouterr()
    assert "answered HTTP 500: \\x1b[1A" in compared.out
    assert cli.main(["report", str(new), "--reporter", f"junit:{tmp_path / 'again.xml'}"]) == 0
    reported = capfd.readouterr()
    for out in (compared.out + compared.err, reported.out + reported.err):
        for raw in RAW:
            assert raw.decode("utf-8", "replace") not in out, raw
    assert "ERRORED test_demo.py::answers 500" in reported.out
