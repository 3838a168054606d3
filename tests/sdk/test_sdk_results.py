"""A RunResult is read-only all the way down (issue 13): what the agent answered stays so.

Before, ``RunResult`` was frozen only on the surface: a body could rewrite
``step.tool_args[...]`` or ``result.raw[...]`` after the run, and matchers and metrics then
saw the rewritten values. Every path below now raises ``TypeError`` saying it is read-only.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from agent_health.connectors import readonly
from agent_health.connectors.protocol import ContextItem, Step, TokenUsage
from agent_health.sdk.results import RunResult
from agent_health.traces import metrics
from support.helpers import run_cli


def _result() -> RunResult:
    steps = (
        Step(
            type="tool_call",
            tool_name="search_logs",
            tool_args={"service": "payment", "filters": [{"level": "error"}]},
            tool_call_id="c1",
            meta={"retries": [1]},
        ),
        Step(
            type="tool_result",
            tool_name="search_logs",
            tool_output={"lines": ["refused: db-primary:5432"]},
            status="ok",
            tool_call_id="c1",
        ),
        Step(type="assistant", content="db-primary is down"),
    )
    return RunResult(
        run_id="r1",
        prompt="Diagnose",
        context=(ContextItem(description="log", value="refused"),),
        output='{"service": "payment", "causes": ["db"]}',
        trajectory=steps,
        token_usage=TokenUsage(prompt=10, completion=5),
        raw={"model": "m", "events": [{"type": "RUN_FINISHED", "result": {"ok": True}}]},
    )


ATTEMPTS: list[tuple[str, Callable[[RunResult], Any]]] = [
    ("a field", lambda r: setattr(r, "output", "forged")),
    ("a field deleted", lambda r: delattr(r, "output")),
    ("a step", lambda r: setattr(r.trajectory_steps[0], "tool_name", "restart_pod")),
    ("tool args", lambda r: r.trajectory_steps[0].tool_args.__setitem__("service", "auth")),
    ("nested tool args", lambda r: r.trajectory_steps[0].tool_args["filters"][0].clear()),
    ("a list in tool args", lambda r: r.trajectory_steps[0].tool_args["filters"].append({})),
    ("tool output", lambda r: r.trajectory_steps[1].tool_output["lines"].pop()),
    ("tool output replaced", lambda r: r.trajectory_steps[1].tool_output.update(lines=[])),
    ("an extra field", lambda r: r.trajectory_steps[0].model_extra["meta"]["retries"].clear()),
    ("raw", lambda r: r.raw.__setitem__("model", "other")),
    ("raw events", lambda r: r.raw["events"][0]["result"].__setitem__("ok", False)),
    ("raw merged", lambda r: r.raw.__ior__({"x": 1})),
    ("token usage", lambda r: setattr(r.token_usage, "total", 0)),
    ("context", lambda r: setattr(r.context[0], "value", "nothing")),
    ("json()", lambda r: r.json().__setitem__("service", "auth")),
    ("json() list", lambda r: r.json()["causes"].sort()),
    ("trajectory", lambda r: setattr(r, "trajectory_steps", ())),
]


@pytest.mark.parametrize(("what", "attempt"), ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
def test_every_part_of_a_run_result_refuses_changes(
    what: str, attempt: Callable[[RunResult], Any]
) -> None:
    result = _result()
    before = result.model_dump(mode="json", by_alias=True)
    derived = metrics.derive(result)
    with pytest.raises(TypeError) as raised:
        attempt(result)
    assert "read-only" in str(raised.value)
    assert result.model_dump(mode="json", by_alias=True) == before
    assert metrics.derive(result) == derived


def test_read_only_values_still_read_compare_and_serialize_like_plain_ones() -> None:
    result = _result()
    args = result.trajectory_steps[0].tool_args
    assert args == {"service": "payment", "filters": [{"level": "error"}]}
    assert isinstance(args, dict)
    assert isinstance(args["filters"], list)
    assert json.loads(json.dumps(args)) == args
    assert result.json() == {"service": "payment", "causes": ["db"]}
    mutable = dict(args)
    mutable["service"] = "auth"  # a copy is an ordinary dict
    assert args["service"] == "payment"
    assert copy.deepcopy(result).raw == result.raw
    with pytest.raises(TypeError, match="read-only"):
        copy.deepcopy(result).raw["model"] = "x"  # a copy of a read-only value is read-only
    assert pickle.loads(pickle.dumps(result)) == result
    assert result.model_copy(update={"output": "new"}).output == "new"
    round_trip = RunResult.model_validate_json(result.model_dump_json(by_alias=True))
    assert round_trip == result
    with pytest.raises(TypeError, match="read-only"):
        round_trip.trajectory_steps[0].tool_args["service"] = "auth"


def test_freeze_leaves_scalars_and_named_tuples_alone() -> None:
    assert readonly.freeze(3) == 3
    assert readonly.freeze("x") == "x"
    assert readonly.freeze((1, [2])) == (1, [2])
    assert isinstance(readonly.freeze((1, [2]))[1], readonly.ReadOnlyList)


async def test_a_body_that_rewrites_the_run_errors_and_the_checks_see_the_agents_answer(
    write_suite: Any, triage_url: str
) -> None:
    suite = write_suite(
        **{
            "test_rewrite.py": """
from agent_health import test


@test("rewrites a tool call, then checks for it")
async def rewrites(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).not_to_have_called_tool("restart_pod")
    call = result.tool_calls()[0]
    call.tool_args["service"] = "auth"
"""
        }
    )
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--no-ledger")
    (test,) = run.report["tests"]
    assert (test["status"], test["cause"]) == ("errored", "test")
    assert "read-only" in test["error"]
