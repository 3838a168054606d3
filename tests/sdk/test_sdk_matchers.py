"""Every matcher records a gate signal with evidence; misuse is a clear error."""

from __future__ import annotations

import re
from typing import Any

import pytest
from agent_health.connectors.protocol import Step, TokenUsage
from agent_health.sdk import context, declare, errors, matchers
from agent_health.sdk.results import RunResult


def _ctx() -> context.TestContext:
    case = declare.TestCase(
        name="t", describe_path=(), fn=lambda: None, params=(), fixtures={}, file="f.py", line=1
    )
    info = context.TestInfo(
        id="f.py::t",
        title="t",
        name="t",
        file="f.py",
        labels=(),
        repeat=0,
        run_id="r",
        timeout=None,
    )
    return context.TestContext(case=case, info=info, agent_caller=None, judge_backend=None)


RESULT = RunResult(
    run_id="r",
    prompt="p",
    output="Root cause: payment-service cannot reach db-primary",
    trajectory=(
        Step(type="tool_call", tool_name="search_logs", tool_args={"service": "payment", "n": 5}),
        Step(type="tool_result", tool_name="search_logs", tool_output={"lines": []}, status="ok"),
        Step(type="tool_call", tool_name="service_status", tool_args={"name": "db-primary"}),
        Step(type="tool_result", tool_name="service_status", tool_output="boom", status="error"),
        Step(type="tool_call", tool_name="search_logs", tool_args={"service": "auth"}),
    ),
    token_usage=TokenUsage(prompt=100, completion=50),
    duration_ms=1500.0,
)

CASES: list[tuple[str, Any, Any, bool]] = [
    ("to_have_called_tool", RESULT, ("search_logs",), True),
    ("to_have_called_tool", RESULT, ("restart",), False),
    ("to_have_called_tool", RESULT, ("search_logs", {"service": "payment"}), True),
    ("to_have_called_tool", RESULT, ("search_logs", {"service": re.compile("^pay")}), True),
    ("to_have_called_tool", RESULT, ("search_logs", {"service": "checkout"}), False),
    ("not_to_have_called_tool", RESULT, ("restart",), True),
    ("not_to_have_called_tool", RESULT, ("search_logs", {"service": "auth"}), False),
    ("to_have_called_tools_in_order", RESULT, (["search_logs", "service_status"],), True),
    ("to_have_called_tools_in_order", RESULT, (["service_status", "search_logs"],), True),
    ("to_have_called_tools_in_order", RESULT, (["service_status", "service_status"],), False),
    # calls: search_logs, service_status, search_logs
    ("to_have_called_tools_in_steps", RESULT, ([["search_logs"], ["service_status"]],), True),
    ("to_have_called_tools_in_steps", RESULT, ([["service_status", "search_logs"]],), True),
    ("to_have_called_tools_in_steps", RESULT, ([["service_status"], ["search_logs"]],), True),
    (
        "to_have_called_tools_in_steps",
        RESULT,
        ([["search_logs", "service_status"], ["search_logs"]],),
        True,
    ),
    (
        "to_have_called_tools_in_steps",
        RESULT,
        ([["search_logs", "service_status"], ["service_status"]],),
        False,
    ),
    ("to_have_called_tools_in_steps", RESULT, ([["search_logs"], ["restart"]],), False),
    ("to_have_no_tool_errors", RESULT, (), False),
    ("to_use_at_most_tokens", RESULT, (150,), True),
    ("to_use_at_most_tokens", RESULT, (149,), False),
    ("to_match", RESULT.output, (r"(?i)PAYMENT[- ]service",), True),
    ("to_match", RESULT.output, (r"checkout",), False),
    ("not_to_match", RESULT.output, (r"checkout",), True),
    ("to_contain", RESULT.output, ("db-primary",), True),
    ("to_contain", ["a", "b"], ("c",), False),
    ("not_to_contain", {"a": 1}, ("a",), False),
    ("to_equal", {"a": [1, 2]}, ({"a": [1, 2]},), True),
    ("to_equal", 1, (2,), False),
    ("not_to_equal", 1, (2,), True),
    ("to_be_less_than", 3, (4,), True),
    ("to_be_less_than", 4, (4,), False),
    ("to_be_less_than_or_equal", 4, (4,), True),
    ("to_be_greater_than", 4.5, (4,), True),
    ("to_be_greater_than_or_equal", 3, (4,), False),
    ("to_be_truthy", [1], (), True),
    ("to_be_falsy", "x", (), False),
    ("to_satisfy", 10, (lambda v: v % 2 == 0,), True),
    ("to_satisfy", 11, (lambda v: v % 2 == 0, "is even"), False),
]


@pytest.mark.parametrize(("matcher", "value", "args", "passed"), CASES)
def test_matcher_records_a_gate_signal(matcher: str, value: Any, args: Any, passed: bool) -> None:
    ctx = _ctx()
    signal = getattr(matchers.Expectation(value, ctx), matcher)(*args)
    assert ctx.signals == [signal]
    assert signal.kind == "deterministic"
    assert signal.role == "gate"
    assert signal.passed is passed
    assert signal.score == (1.0 if passed else 0.0)
    assert signal.evidence is not None
    assert {"expected", "actual"} <= signal.evidence.keys()
    assert signal.location
    assert signal.location.startswith("test_sdk_matchers.py:")


def test_times_counts_matching_calls() -> None:
    ctx = _ctx()
    expect = matchers.Expectation(RESULT, ctx)
    assert expect.to_have_called_tool("search_logs", times=2).passed
    assert not expect.to_have_called_tool("search_logs", times=1).passed
    evidence = ctx.signals[-1].evidence
    assert evidence is not None
    assert evidence["actual"]["matching_calls"] == 2


def test_to_complete_within() -> None:
    ctx = _ctx()
    assert matchers.Expectation(RESULT, ctx).to_complete_within(seconds=2).passed
    assert not matchers.Expectation(RESULT, ctx).to_complete_within(ms=1000).passed


@pytest.mark.parametrize(
    ("matcher", "value", "args", "message"),
    [
        ("to_have_called_tool", "a string", ("x",), "needs a RunResult"),
        ("to_match", RESULT, ("x",), "needs a string, got RunResult (use result.output)"),
        ("to_be_less_than", "3", (4,), "needs a number, got str"),
        ("to_contain", 42, (4,), "needs a string, list, set or dict"),
        ("to_complete_within", RESULT, (), "seconds= or ms="),
        ("to_satisfy", 1, ("not callable",), "needs a callable"),
    ],
)
def test_misuse_is_a_usage_error(matcher: str, value: Any, args: Any, message: str) -> None:
    ctx = _ctx()
    with pytest.raises(errors.MatcherUsageError, match=re.escape(message)):
        getattr(matchers.Expectation(value, ctx), matcher)(*args)
    assert ctx.signals == []


def test_or_throw_stops_only_on_failure() -> None:
    ctx = _ctx()
    matchers.Expectation(1, ctx).to_equal(1).or_throw()
    with pytest.raises(errors.ExpectationFailed, match="to_equal"):
        matchers.Expectation(1, ctx).to_equal(2).or_throw()


def test_module_level_expect_needs_a_running_test() -> None:
    with pytest.raises(errors.AgentHealthError, match="outside a running test"):
        matchers.expect(1)


def test_weight_is_recorded() -> None:
    ctx = _ctx()
    assert matchers.Expectation(1, ctx).to_equal(1, weight=3).weight == 3
