"""Conversations everywhere a result goes (issue 26): the terminal, JUnit, the JSON report's
metrics and summary, insights and the cluster's status counts, each through the real CLI
against the example support agent (``examples/agents/support_agent.py``) on loopback, and
the hostile agent (its own process) for what an agent's text must not do to a reader.

The HTML inspector's chat view is read in Chromium by
``tests/engine/test_engine_html_conversation.py``; ``compare`` by
``tests/conversations/test_conversation_compare.py``.
"""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health.cluster.grading import grading, regrade
from agent_health.cluster.reconcile import status
from agent_health.engine import visible
from agent_health.ledger import backends, chain, keys
from support.helpers import run_cli
from support.hostile_agent import REWRITE
from support.hostile_support import free_port, hostile_target
from support.terminal_support import run_in_terminal

SUITE = """
from agent_health import Stop, test


@test("asks, then looks the order up")
async def scripted(agent, expect):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234", "thanks"])
    expect(result.turn(2)).to_have_called_tool("lookup_order", {"order_id": "1234"})


@test("a wrong number")
async def wrong_number(agent, expect):
    result = await agent.run("Where is my parcel?", turns=["It is order 4444", "thanks"])
    expect(result.turn(2)).to_have_no_tool_errors()


@test("a refund")
async def refund(agent, expect):
    def customer(conversation):
        if "order number" in conversation.last_output:
            return "It is 5678"
        if "refunded" in conversation.last_output:
            return Stop.goal_met("got the refund status")
        return Stop.gave_up("no answer")

    result = await agent.run("Did my refund go through?", user=customer, max_turns=4)
    expect(result.output).to_contain("refunded")
"""


def _case(junit: Path, name: str) -> ET.Element:
    return next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == name)


async def test_the_terminal_junit_and_json_report_read_a_conversation_turn_by_turn(
    tmp_path: Path, support_url: str
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_talk.py").write_text(SUITE)
    report, junit = tmp_path / "r.json", tmp_path / "junit.xml"
    seen = await asyncio.to_thread(
        run_in_terminal,
        ["run", str(suite), "--agent", support_url, "--reporter", f"json:{report}",
         "--reporter", f"junit:{junit}"],
        tmp_path,
        columns=120,
    )  # fmt: skip
    assert seen.code == 1, seen.text
    screen = seen.text
    # each test's line and table row: how many turns, why it ended
    assert "test_talk.py › a refund" in screen
    line = next((x for x in seen.lines if "✗ failed  test_talk.py › a wrong number (" in x), "")
    assert line.endswith("3 turns, turns-done"), screen
    row = next((x for x in seen.lines if "✓ passed  test_talk.py › a refund" in x), "")
    assert row.endswith("2 goal-met"), screen
    # the failure block: the turn it went wrong at, that turn's user message and answer
    block = screen.split("FAILED test_talk.py::a wrong number", 1)[1]
    assert "  conversation: 3 turns, turns-done\n" in block
    assert "  went wrong at turn 2: lookup_order returned an error\n" in block
    assert "  turn 2 user:\n    It is order 4444\n" in block
    assert "  turn 2 agent:\n    I cannot find order 4444. Could you check the number?" in block
    # the JSON report: the check on turn 2 names it; the metrics go turn by turn
    tests = {t["name"]: t for t in json.loads(report.read_text())["tests"]}
    wrong = tests["a wrong number"]
    (gate,) = [s for s in wrong["signals"] if s["kind"] == "deterministic"]
    assert (gate["passed"], gate["evidence"]["turn"]) == (False, 2)
    m = wrong["metrics"]
    assert m["turns"] == 3
    assert m["tool_calls_per_turn"] == [0, 1, 0]
    assert m["first_tool_error_turn"] == 2
    assert len(m["tokens_per_turn"]) == 3
    assert all(isinstance(n, int) for n in m["tokens_per_turn"])
    assert sum(m["tokens_per_turn"]) == m["total_tokens"]
    assert m["latency_per_turn_ms"] == [t["duration_ms"] for t in wrong["turns"]]
    slowest = max(wrong["turns"], key=lambda t: t["duration_ms"])["number"]
    assert m["slowest_turn"] == slowest
    assert tests["a refund"]["metrics"]["first_tool_error_turn"] is None
    # JUnit: turns and ended as properties, the conversation readable in system-out
    case = _case(junit, "a wrong number")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (props["turns"], props["ended"], props["metric.first_tool_error_turn"]) == (
        "3",
        "turns-done",
        "2",
    )
    out = case.findtext("system-out") or ""
    assert (
        "[conversation] 3 turns, turns-done\n"
        "[conversation] went wrong at turn 2: lookup_order returned an error\n"
        "[turn 1] user: Where is my parcel?\n"
        "[turn 1] agent: I can help with that. What is your order number?\n"
        "[turn 2] user: It is order 4444\n"
        '[turn 2] tool call lookup_order {"order_id": "4444"}\n'
        '[turn 2] tool result lookup_order (error): {"error": "no such order"}\n'
        "[turn 2] agent: I cannot find order 4444. Could you check the number?\n"
        "[turn 3] user: thanks\n"
        "[turn 3] agent: You're welcome. Goodbye!"
    ) in out
    refund = {p.get("name"): p.get("value") for p in _case(junit, "a refund").iter("property")}
    assert (refund["turns"], refund["ended"]) == ("2", "goal-met")


HOSTILE_SUITE = """
from agent_health import Stop, test


@test("talks to a hostile agent")
async def hostile(agent, expect):
    result = await agent.run(
        "Where is my parcel?", user=lambda c: Stop.gave_up("it said: " + c.last_output),
        max_turns=2,
    )
    expect(result.output).to_contain("db-primary")
"""
RAW = (b"\x1b]", b"\x07", b"\x00", b"\x01", b"\xc2\x9b", "\u202e".encode())


async def test_a_hostile_agents_turns_are_shown_escaped(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_hostile.py").write_text(HOSTILE_SUITE)
    junit = tmp_path / "junit.xml"
    port = free_port()
    async with hostile_target(port, tmp_path / "agent.jsonl", {}, answer="garble", attacks=""):
        seen = await asyncio.to_thread(
            run_in_terminal,
            ["run", str(suite), "--agent", f"rest+http://127.0.0.1:{port}/run",
             "--reporter", f"junit:{junit}"],
            tmp_path,
            columns=400,
        )  # fmt: skip
    assert seen.code == 1, seen.text
    for raw in RAW:
        assert raw not in seen.raw, (raw, seen.text)
    assert seen.title == ""
    assert not any(line.startswith("✓ passed") for line in seen.lines), seen.text
    screen = seen.text
    # the user's stop detail (which quotes the agent) and the failing turn's answer, escaped
    assert "  conversation: 1 turn, gave-up (it said: No idea.\\x1b[1A\\x1b[2K\\r" in screen
    assert "  went wrong at turn 1: search" in screen  # its tool result failed
    assert "    No idea.\\x1b[1A\\x1b[2K\\r\\x1b[32m✓ passed  test_demo.py" in screen
    # JUnit holds the conversation, escaped; conftest validates the file against the schema
    out = _case(junit, "talks to a hostile agent").findtext("system-out") or ""
    assert f"[turn 1] agent: {visible.block('No idea.' + REWRITE)}" in out
    assert "\x1b" not in junit.read_text(encoding="utf-8")


REPEATS = """
from agent_health import Stop, test


@test("refund over repeats")
async def refund(agent, expect, test_info):
    number = "9012" if test_info.repeat == 2 else "5678"

    def customer(conversation):
        if "order number" in conversation.last_output:
            return f"It is {number}"
        if "refunded" in conversation.last_output:
            return Stop.goal_met("got the refund status")
        return Stop.gave_up("no refund status")

    result = await agent.run("Did my refund go through?", user=customer, max_turns=4)
    expect(result.ended.reason).to_equal("goal-met")


@test("one question")
async def single(agent):
    await agent.run("Hello")
"""


async def test_pass_hat_k_and_how_each_repeat_of_a_conversation_ended(
    write_suite: Any, support_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_repeats.py": REPEATS})
    run = await run_cli(suite, "--agent", support_url, "--repeat", "3")
    out = capfd.readouterr().out
    s = run.report["summary"]
    talk = s["per_test"]["test_repeats.py::refund over repeats"]
    assert (talk["passed"], talk["failed"]) == (2, 1)
    assert (talk["pass_at_k"], talk["pass_hat_k"]) == (1.0, 0.0)
    assert talk["ended"] == {"gave-up": 1, "goal-met": 2}
    assert s["per_test"]["test_repeats.py::one question"]["ended"] == {}
    assert (
        "conversations over 3 repeats: test_repeats.py::refund over repeats "
        "gave-up 1/3, goal-met 2/3"
    ) in out


INSIGHTS_CONFIG = """
from agent_health import define_config

def explain(result, metrics):
    return {"summary": f"{result.status}, tool errors in turn {metrics['first_tool_error_turn']}"}

config = define_config(insights=explain)
"""
TWO_WRONG = """
from agent_health import test


@test("wrong number a")
async def a(agent, expect):
    result = await agent.run("Where is my parcel?", turns=["It is order 4444", "thanks"])
    expect(result).to_have_no_tool_errors()


@test("wrong number b")
async def b(agent, expect):
    result = await agent.run("Where is my order?", turns=["Order 7777 please"])
    expect(result).to_have_no_tool_errors()
"""


async def test_insights_name_the_turn_where_a_conversation_went_wrong(
    write_suite: Any, support_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"agent-health.config.py": INSIGHTS_CONFIG, "test_wrong.py": TWO_WRONG})
    run = await run_cli(suite, "--agent", support_url)
    out = capfd.readouterr().out
    for name in ("wrong number a", "wrong number b"):
        found = run.by_name(name)["insights"]
        assert found["summary"] == "failed, tool errors in turn 2"
        assert found["went_wrong"] == {"turn": 2, "why": "lookup_order returned an error"}
    assert "  went wrong at turn 2: lookup_order returned an error" in out
    patterns = run.report["summary"]["insights"]["patterns"]
    assert "2 of 2 tests: conversations went wrong at turn 2" in patterns


async def test_the_cluster_status_counts_conversation_cells_and_goals_met(
    write_suite: Any, support_url: str, tmp_path: Path
) -> None:
    suite = write_suite(**{"test_talk.py": SUITE, "test_single.py": REPEATS})
    ledger = tmp_path / "ledger"
    run = await run_cli(suite, "--agent", support_url, "--ledger", f"file://{ledger}")
    assert len(run.report["tests"]) == 5
    key = chain.load_key(tmp_path / "ledger.key")
    backend = backends.from_url(f"file://{ledger}")
    tally = status.RunTally()
    try:
        for cell in sorted(await backend.cells()):
            lines = await backend.read(cell)
            # graded as the operator grades a cell: from its ledger, chain checked
            sealed_with = keys.sealing_key(key, cell, lines)
            expected = regrade.expected_from(cell, lines)
            tally.record(grading.grade_lines(cell, lines, sealed_with, expected))
    finally:
        await backend.close()
    assert [g.status for g in tally.grades].count("errored") == 0
    counts = tally.status().counts
    assert counts.total == 5
    # the three of SUITE and "refund over repeats" talk; "one question" is a single run;
    # the refunds met their goal (repeat 0 of "refund over repeats" gives 5678)
    assert (counts.conversations, counts.goal_met) == (4, 2)
    dumped = tally.status().wire()["counts"]
    assert (dumped["conversations"], dumped["goalMet"]) == (4, 2)
