"""``agent-health compare`` on conversations: two real runs against the example support agent
(loopback), the second with customers who give other order numbers, compared through the
CLI. A conversation that took more turns, ended otherwise or called other tools in a turn is
named; ``--max-conversations-worse`` gates on the ones that got worse."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support.helpers import run_cli

# The customers' order numbers come from the environment, so both runs run the same tests
# (same content hash): what moves is the conversation, not the test.
SUITE = """
import os

from agent_health import Stop, test

REFUND = os.environ.get("REFUND_ORDER", "5678")
PARCEL = os.environ.get("PARCEL_ORDER", "1234")


@test("refund")
async def refund(agent, expect):
    said = []

    def customer(conversation):
        if "refunded" in conversation.last_output:
            return Stop.goal_met("got the refund status")
        if len(said) == 2:
            return Stop.gave_up("no refund status")
        said.append(f"It is {REFUND}")
        return said[-1]

    await agent.run("Did my refund go through?", user=customer, max_turns=5)


@test("parcel")
async def parcel(agent, expect):
    result = await agent.run("Where is my parcel?", turns=[f"It is order {PARCEL}", "thanks"])
    expect(result.turn(1)).not_to_have_called_tool("lookup_order")


@test("unchanged")
async def unchanged(agent, expect):
    await agent.run("Where is my parcel?", turns=["It is order 1234"])
"""


async def test_compare_names_conversations_that_moved_turn_by_turn(
    write_suite: Any,
    support_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    suite = write_suite(**{"test_talk.py": SUITE})
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    first = await run_cli(suite, "--agent", support_url)
    base.write_text(json.dumps(first.report))
    monkeypatch.setenv("REFUND_ORDER", "9012")  # not a refund: the customer gives up
    monkeypatch.setenv("PARCEL_ORDER", "9012")
    second = await run_cli(suite, "--agent", support_url)
    new.write_text(json.dumps(second.report))
    assert [t["status"] for t in second.report["tests"]] == ["passed"] * 3
    assert second.by_name("refund")["ended"]["reason"] == "gave-up"
    capsys.readouterr()

    code = await asyncio.to_thread(cli.main, ["compare", str(base), str(new)])
    out = capsys.readouterr().out
    assert code == 0, out  # every test still passes: named, not gated
    assert "conversation changes: 4\n" in out
    assert "  worse  test_talk.py::refund: took 3 turns, was 2\n" in out
    assert "  worse  test_talk.py::refund: ended gave-up, was goal-met\n" in out
    assert (
        '  moved  test_talk.py::refund: turn 2 called lookup_order {"order_id":"9012"}, '
        'was lookup_order {"order_id":"5678"}\n'
    ) in out
    assert (
        '  moved  test_talk.py::parcel: turn 2 called lookup_order {"order_id":"9012"}, '
        'was lookup_order {"order_id":"1234"}\n'
    ) in out
    assert "test_talk.py::unchanged" not in out
    assert "changed tests" not in out  # the same tests: only the conversations moved

    code = await asyncio.to_thread(
        cli.main, ["compare", str(base), str(new), "--max-conversations-worse", "0", "--json"]
    )
    found = json.loads(capsys.readouterr().out)
    assert code == 1
    assert found["regressions"] == [
        "1 conversations got worse (more turns, goal no longer met, or gave up), more than "
        "--max-conversations-worse 0"
    ]
    kinds = [(c["name"], c["kind"], c["turn"], c["worse"]) for c in found["conversation_changes"]]
    assert kinds == [
        ("refund", "turns", None, True),
        ("refund", "ended", None, True),
        ("refund", "tools", 2, False),
        ("parcel", "tools", 2, False),
    ]
    # the other way round the conversation got better: nothing to gate
    assert cli.main(["compare", str(new), str(base), "--max-conversations-worse", "0"]) == 0
    back = capsys.readouterr().out
    assert "  moved  test_talk.py::refund: ended goal-met, was gave-up\n" in back
    assert cli.main(["compare", str(base), str(new), "--max-conversations-worse", "-1"]) == 2
