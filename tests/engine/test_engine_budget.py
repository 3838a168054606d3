"""The budget meter against hand-computed spends: agent and judge, known and unknown."""

from __future__ import annotations

from typing import Any

import pytest
from agent_health.connectors.protocol import TokenUsage
from agent_health.engine import budget
from agent_health.sdk.results import Signal, TestResult


def result(
    tokens: int | None = None,
    *,
    ran: bool = True,
    cost: float | None = None,
    judge: list[dict[str, Any]] = (),  # type: ignore[assignment]
    status: str = "passed",
    cause: str | None = None,
) -> TestResult:
    usage = (
        TokenUsage(prompt=tokens - tokens // 5, completion=tokens // 5, total=tokens)
        if tokens is not None
        else TokenUsage()
    )
    signals = tuple(
        Signal(kind="judge", role="gate", name="claim", passed=True, score=1.0, evidence=e)
        for e in judge
    )
    return TestResult(
        id="t.py::x",
        name="x",
        title="x",
        file="t.py",
        line=1,
        status=status,  # type: ignore[arg-type]
        cause=cause,  # type: ignore[arg-type]
        run_id="r",
        token_usage=usage,
        metrics={"total_tokens": tokens, "cost_usd": cost} if ran else {},
        signals=signals,
    )


def meter(**limits: Any) -> budget.Meter:
    return budget.Meter(budget.Limits(**limits), started=0.0)


def test_known_tokens_reach_the_limit_when_the_total_equals_it() -> None:
    m = meter(max_tokens=300)
    m.add_result(result(100))
    m.add_result(result(150))
    assert m.check(now=1.0) is None
    m.add_result(result(50))
    assert m.check(now=1.0) == "max_tokens"
    assert m.reason == "--max-tokens 300 reached: 300 tokens spent"
    spent = m.spent(now=1.0)
    assert (spent.tokens, spent.agent_tokens, spent.judge_tokens) == (300, 300, 0)


def test_judge_tokens_count_and_cache_hits_and_skipped_calls_do_not() -> None:
    calls = [
        {"input_tokens": 100, "output_tokens": 20},
        {"input_tokens": 100, "output_tokens": 20, "cached": True},
        {"skipped": True},
    ]
    prices = budget.Prices(input_per_mtok=1.0, output_per_mtok=2.0)
    spend = budget.of_result(result(10, cost=0.5, judge=calls), prices)
    assert spend.judge_tokens == 120
    assert spend.tokens == 130
    # 100 in at $1/Mtok + 20 out at $2/Mtok = 0.00014
    assert spend.judge_cost_usd == pytest.approx(0.00014)
    assert spend.cost_usd == pytest.approx(0.50014)


def test_a_judge_without_prices_makes_the_cost_unknown_only_when_it_spent() -> None:
    judged = budget.of_result(result(10, cost=0.5, judge=[{"input_tokens": 5}]))
    assert judged.judge_cost_usd is None
    assert judged.cost_usd is None
    cached = budget.of_result(result(10, cost=0.5, judge=[{"input_tokens": 5, "cached": True}]))
    assert cached.cost_usd == 0.5


def test_a_test_that_never_ran_the_agent_spent_a_known_zero() -> None:
    spend = budget.of_result(result(ran=False))
    assert (spend.ran_agent, spend.tokens, spend.cost_usd) == (False, 0, 0.0)


def test_an_agent_error_is_unknown_spend_not_zero() -> None:
    spend = budget.of_result(result(ran=False, status="errored", cause="agent"))
    assert spend.ran_agent
    assert spend.tokens is None
    assert spend.cost_usd is None


def test_unknown_spend_is_estimated_at_the_largest_known_test() -> None:
    m = meter(max_tokens=1000)
    for r in (result(100), result(250), result(None), result(None)):
        m.add_result(r)
    spent = m.spent(now=0.0)
    assert spent.tokens == 350  # what is known, kept apart
    assert spent.tokens_unknown == 2
    assert spent.tokens_estimated == 350 + 2 * 250
    assert m.check(now=0.0) is None
    m.add_result(result(None))
    assert m.check(now=0.0) == "max_tokens"  # 350 + 3 * 250 = 1100
    assert m.reason == "--max-tokens 1000 reached: 1100 tokens spent, 3 of them estimated"


def test_unknown_spend_with_nothing_known_exhausts_the_budget_at_once() -> None:
    m = meter(max_tokens=10**9)
    m.add_result(result(ran=False))  # a data test: known zero, but not an agent run
    m.add_result(result(None))
    assert m.check(now=0.0) == "max_tokens"
    assert "unknown" in (m.reason or "")
    assert "1 test is unknown" in (m.reason or "")
    assert m.spent(now=0.0).tokens_estimated is None


def test_cost_budget_counts_agent_and_judge() -> None:
    m = budget.Meter(
        budget.Limits(max_cost_usd=0.01),
        budget.Prices(input_per_mtok=10.0, output_per_mtok=10.0),
        started=0.0,
    )
    m.add_result(result(100, cost=0.004, judge=[{"input_tokens": 400, "output_tokens": 100}]))
    assert m.check(now=0.0) is None  # 0.004 + 0.005 = 0.009
    m.add_result(result(10, cost=0.001))
    assert m.check(now=0.0) == "max_cost_usd"
    spent = m.spent(now=0.0)
    assert spent.agent_cost_usd == pytest.approx(0.005)
    assert spent.judge_cost_usd == pytest.approx(0.005)
    assert m.reason == "--max-cost 0.01 reached: $0.0100 spent"


def test_duration_budget_and_it_stays_exhausted() -> None:
    m = meter(max_duration_s=60, max_tokens=10**6)
    assert m.check(now=59.9) is None
    assert m.check(now=60.0) == "max_duration_s"
    assert m.check(now=0.0) == "max_duration_s"  # never starts tests again
    report = m.report(now=61.0)
    assert report.exhausted == "max_duration_s"
    assert report.spent.duration_s == 61.0


def test_retries_add_up() -> None:
    one = budget.of_result(result(100))
    two = budget.of_result(result(None))
    assert one.plus(one).tokens == 200
    assert one.plus(two).tokens is None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        budget.Limits(max_tokens=0)
    assert not budget.Limits().any()
    assert budget.Limits(max_duration_s=1).any()


def test_a_duration_limit_is_held_to_the_clock_not_to_the_rounded_figure() -> None:
    # The spend's duration is rounded to the millisecond for reports; the limit is not.
    meter = budget.Meter(budget.Limits(max_duration_s=0.0001), started=100.0)
    assert meter.check(now=100.00005) is None
    assert meter.check(now=100.0002) == "max_duration_s"
