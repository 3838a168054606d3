"""``agent-health list``: where each prompt comes from, context and expected trajectory."""

from __future__ import annotations

import json
from typing import Any

from agent_health import cli

TESTS = """
from agent_health import test

async def ticket():
    yield {"id": 7}

async def session(agent):
    yield agent

with_ticket = test.extend(ticket=ticket, session=session)

@test("default prompt", default_prompt="Why is auth down?",
      context=[{"description": "Error log", "value": "cert expired"}],
      expected_trajectory=[{"step": 1, "requiredTools": ["search_logs"]}])
async def default(agent):
    await agent.run()

@test("built at run time")
async def dynamic(agent, test_info):
    await agent.run(f"Ticket for {test_info.title}")

@with_ticket("through a fixture")
async def through_fixture(session, ticket):
    await session.run(f"ticket {ticket['id']}")

@test("pure data")
async def data(expect):
    expect(1).to_equal(1)
"""

CASES = [
    {
        "name": "json case",
        "category": "RCA",
        "difficulty": "Easy",
        "initialPrompt": "Diagnose the payment service",
        "context": [{"description": "Error log", "value": "Connection refused"}],
        "expectedTrajectory": [
            {"step": 1, "description": "logs", "requiredTools": ["search_logs"]},
            {"step": 2, "description": "status", "requiredTools": ["service_status"]},
        ],
    },
    {"name": "checks nothing", "category": "RCA", "difficulty": "Easy", "initialPrompt": "Hello"},
]


def _list(capsys: Any, *args: str) -> tuple[int, str]:
    code = cli.main(["list", *args])
    return code, capsys.readouterr().out


def test_list_json_says_where_each_prompt_comes_from(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(**{"test_l.py": TESTS, "lib.cases.json": json.dumps(CASES)})
    code, out = _list(capsys, str(suite), "--json")
    assert code == 0
    listed = {t["name"]: t for t in json.loads(out)}
    default = listed["default prompt"]
    assert (default["prompt_source"], default["default_prompt"]) == ("default", "Why is auth down?")
    assert default["context"] == [{"description": "Error log", "value": "cert expired"}]
    assert default["expected_trajectory"] == [{"step": 1, "requiredTools": ["search_logs"]}]
    assert listed["built at run time"]["prompt_source"] == "dynamic"
    assert listed["built at run time"]["default_prompt"] is None
    assert listed["built at run time"]["context"] is None
    assert listed["through a fixture"]["prompt_source"] == "dynamic"
    assert listed["pure data"]["prompt_source"] == "none"
    case = listed["json case"]
    assert case["context"] == [{"description": "Error log", "value": "Connection refused"}]
    assert [s["requiredTools"] for s in case["expected_trajectory"]] == [
        ["search_logs"],
        ["service_status"],
    ]
    empty = listed["checks nothing"]
    assert empty["mode"] == "skip"
    assert "nothing to grade" in empty["skip_reason"]


def test_list_lines_mark_dynamic_prompts(write_suite: Any, capsys: Any) -> None:
    suite = write_suite(**{"test_l.py": TESTS, "lib.cases.json": json.dumps(CASES)})
    code, out = _list(capsys, str(suite))
    assert code == 0
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert lines["test_l.py::built at run time"].endswith("(prompt: dynamic)")
    assert lines["test_l.py::through a fixture"].endswith("(prompt: dynamic)")
    assert "dynamic" not in lines["test_l.py::default prompt"]
    assert "dynamic" not in lines["test_l.py::pure data"]
    assert "(skip: nothing to grade" in lines["lib.cases.json::checks nothing"]
