"""A conversation in a whole cell on loopback: every turn goes controller → gateway → the
example support agent, the simulated user is asked through the gateway's judge route and
the operator's judge service, the ledger holds each exchange, and the operator's grade
rebuilt from it has the turns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import simulated_user_server
import support_agent
from agent_health.engine.controller import cell
from agent_health.ledger import records
from support import cell_support
from support.cell_support import TOKEN
from support.judge_servers import Text

TEST_ID = "test_cell.py::a customer gets its refund status"
SUITE = """
from agent_health import expect, simulated_user, test

customer = simulated_user(
    goal="find out whether my refund went through",
    facts={"order number": "5678"},
    stop_when="the agent says what happened to the refund",
)


@test("a customer gets its refund status")
async def refund(agent):
    result = await agent.run("Did my refund go through?", turns=["Hello?"], user=customer)
    expect(result).to_meet_user_goal()
    expect(result).to_finish_within_turns(3)
    expect(result.turn(3)).to_have_called_tool("lookup_order", {"order_id": "5678"})
"""


def _plays_the_user(body: Mapping[str, Any]) -> Text:
    """The judge service's model, playing the simulated user as the example simulator does."""
    messages = body["messages"]
    system = next(m["content"] for m in messages if m["role"] == "system")
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    return Text(json.dumps(simulated_user_server.reply(system, text)))


@pytest.fixture(autouse=True)
def _private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cell_support.private_judge_cache(monkeypatch, tmp_path)


@pytest.fixture
async def support_port() -> AsyncIterator[int]:
    runner, url = await support_agent.start()
    port = urlsplit(url).port
    assert port is not None
    try:
        yield port
    finally:
        await runner.cleanup()


async def test_a_conversation_in_a_cell_keeps_every_turn_in_the_ledger_and_the_grade(
    tmp_path: Path, support_port: int
) -> None:
    async with cell_support.judge_service(tmp_path, _plays_the_user) as (judge_url, model):
        proxy = await cell_support.cell_gateway(tmp_path, support_port, judge_url, test_id=TEST_ID)
        try:
            settings = cell_support.cell_settings(tmp_path, proxy, SUITE, test_id=TEST_ID)
            code, result = await cell.run_cell(settings)
        finally:
            await proxy.stop()
        asked = len(model.requests)
    assert code == 0
    assert result is not None
    assert result.status == "passed", (result.error, result.signals)
    assert [t.user for t in result.turns] == [
        "Did my refund go through?",
        "Hello?",
        "My order number is 5678.",
    ]
    assert asked == 2  # the simulated user, after turns 2 and 3, through the judge service

    lines = cell_support.ledger_lines(tmp_path)
    parsed = [records.parse_line(line) for line in lines]
    exchanges = [r for r in parsed if isinstance(r, records.Exchange)]
    to_target = [e for e in exchanges if e.upstream == "target"]
    assert [(e.principal, e.method, e.path, e.status) for e in to_target] == [
        ("controller", "POST", "/run", 200)
    ] * 3  # one exchange per turn, each the controller's own (token evidence)
    assert all(e.evidence != "none" for e in to_target)
    assert len({e.request_sha256 for e in to_target}) == 3  # each turn its own request
    to_judge = [e for e in exchanges if e.upstream == "judge"]
    assert [(e.principal, e.path, e.status) for e in to_judge] == [
        ("controller", "/api/judge/user", 200)
    ] * 2
    [run] = [r for r in parsed if isinstance(r, records.RunResultRecord)]
    assert [t["user"] for t in run.turns or []] == [t.user for t in result.turns]
    assert TOKEN not in "".join(lines)

    graded = await cell_support.grade(tmp_path, TEST_ID)
    assert graded.status == "passed", graded.error
    assert [t.user for t in graded.result.turns] == [t.user for t in result.turns]
    assert [len(t.trajectory) for t in graded.result.turns] == [1, 1, 3]
    assert graded.result.ended is not None
    assert graded.result.ended.reason == "goal-met"
    assert graded.judge.calls == 2  # the simulated user's questions are judge usage
    assert graded.judge.total_tokens > 0
