"""Run budgets: stop starting tests once a run has spent what it may.

A budget caps the run's cost (USD), tokens or wall-clock duration. Spend is counted per test as
it ends: the agent's tokens and cost (what its reply reported, priced with the config's
``prices``) plus the judge's (tokens of the calls that reached a model; cache hits were spent by
an earlier run and cost nothing now). When the running total *reaches* a limit no new test
starts; tests already running finish (their spend is counted, so a run can end above its
budget by what they spent); every test not yet started is ``skipped`` with reason ``budget``.
Duration is checked each time a test would start.

**Unknown spend is not zero.** A test whose agent run reported no token usage (or whose model
has no price, for a cost budget), or whose judge calls have no price, spent an unknown amount.
Such a test is charged an *estimate*: the largest known spend of any one test of this run that
ran the agent. When no test's spend is known yet, nothing can be estimated and the budget is
exhausted at once (``unknown``): a budget is a promise about spend, and spend nobody counted
cannot be held to it. The report keeps the known spend, the number of estimated tests and the
estimate apart.

The same :class:`Meter` serves a local run (:mod:`.session`) and the operator, which meters the
cells it grades.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agent_health.sdk import tracesconfig
from agent_health.sdk.results import TestResult
from agent_health.traces import metrics as metrics_mod

_N = TypeVar("_N", int, float)
Kind = Literal["max_cost_usd", "max_tokens", "max_duration_s"]
SKIP_REASON = "budget"
"""The ``skip_reason`` of every test a budget kept from starting."""

FLAGS: dict[Kind, str] = {
    "max_cost_usd": "--max-cost",
    "max_tokens": "--max-tokens",
    "max_duration_s": "--max-duration",
}


class Limits(BaseModel):
    """What a run may spend; ``None`` is no limit."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    max_cost_usd: float | None = Field(default=None, gt=0, description="USD, agent and judge")
    max_tokens: int | None = Field(default=None, gt=0, description="tokens, agent and judge")
    max_duration_s: float | None = Field(default=None, gt=0, description="wall clock, seconds")

    def any(self) -> bool:
        return any(v is not None for v in (self.max_cost_usd, self.max_tokens, self.max_duration_s))


class Prices(BaseModel):
    """The judge's prices per million tokens (``None``: its cost is unknown)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        if self.input_per_mtok is None and self.output_per_mtok is None:
            return None if tokens_in or tokens_out else 0.0
        return (
            tokens_in * (self.input_per_mtok or 0.0) + tokens_out * (self.output_per_mtok or 0.0)
        ) / 1e6


class TestSpend(BaseModel):
    """What one test (every try of it) spent; ``None`` where it is unknown."""

    __test__ = False
    model_config = ConfigDict(defer_build=True, frozen=True)

    ran_agent: bool = False
    agent_tokens: int | None = 0
    agent_cost_usd: float | None = 0.0
    judge_tokens: int = 0
    judge_cost_usd: float | None = 0.0

    @property
    def tokens(self) -> int | None:
        return None if self.agent_tokens is None else self.agent_tokens + self.judge_tokens

    @property
    def cost_usd(self) -> float | None:
        if self.agent_cost_usd is None or self.judge_cost_usd is None:
            return None
        return self.agent_cost_usd + self.judge_cost_usd

    def plus(self, other: TestSpend) -> TestSpend:
        """Two tries of one test (``--retries``), or two parts of one cell."""
        return TestSpend(
            ran_agent=self.ran_agent or other.ran_agent,
            agent_tokens=_add(self.agent_tokens, other.agent_tokens),
            agent_cost_usd=_add(self.agent_cost_usd, other.agent_cost_usd),
            judge_tokens=self.judge_tokens + other.judge_tokens,
            judge_cost_usd=_add(self.judge_cost_usd, other.judge_cost_usd),
        )


def _add(a: _N | None, b: _N | None) -> _N | None:
    return None if a is None or b is None else a + b


def of_result(
    result: TestResult,
    judge_prices: Prices | None = None,
    agent_prices: tracesconfig.PriceTable | None = None,
) -> TestSpend:
    """The spend of one test result: its agent run and its judge calls.

    The agent ran when the result has metrics (a reply came back) or it errored because of
    the agent (the agent was asked and may have spent before failing: unknown, not zero).
    Its tokens are the metrics' (in a cell, what the gateway recorded of the target's model
    calls when it did); ``agent_prices`` prices them here instead of the metrics' own cost.
    """
    agent_failed = result.status == "errored" and result.cause == "agent"
    metrics = result.metrics or {}
    ran = bool(metrics) or agent_failed
    agent_tokens: int | None = 0
    agent_cost: float | None = 0.0
    if ran:
        total = metrics.get("total_tokens", result.token_usage.total)
        agent_tokens = total if isinstance(total, int) else None
        cost = metrics.get("cost_usd")
        agent_cost = float(cost) if isinstance(cost, (int, float)) else None
        if agent_prices is not None:
            agent_cost = _priced(agent_prices, metrics)
    tokens_in = tokens_out = 0
    for signal in result.signals:
        evidence = signal.evidence or {}
        if signal.kind != "judge" or evidence.get("skipped") or evidence.get("cached"):
            continue
        tokens_in += int(evidence.get("input_tokens") or 0)
        tokens_out += int(evidence.get("output_tokens") or 0)
    return TestSpend(
        ran_agent=ran,
        agent_tokens=agent_tokens,
        agent_cost_usd=agent_cost,
        judge_tokens=tokens_in + tokens_out,
        judge_cost_usd=(judge_prices or Prices()).cost(tokens_in, tokens_out),
    )


def _priced(prices: tracesconfig.PriceTable, metrics: dict[str, object]) -> float | None:
    tokens_in, tokens_out = metrics.get("input_tokens"), metrics.get("output_tokens")
    if not isinstance(tokens_in, int) or not isinstance(tokens_out, int):
        return None
    parts = metrics_mod.usage_parts(metrics.get("usage_by_model"))
    if parts and sum(p.total or 0 for p in parts) == metrics.get("total_tokens"):
        # Several models, and the tokens are still the ones the agent split between them
        # (not a gateway's count that replaced them): each part at its own price.
        return metrics_mod.costing(prices, parts)[0]
    model = metrics.get("model")
    return prices.cost(model if isinstance(model, str) else None, tokens_in, tokens_out)


class Spend(BaseModel):
    """A run's spend so far (the report's ``summary.budget.spent``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    tokens: int = Field(description="known tokens, agent and judge")
    agent_tokens: int
    judge_tokens: int
    cost_usd: float = Field(description="known cost, agent and judge")
    agent_cost_usd: float
    judge_cost_usd: float
    duration_s: float
    tokens_unknown: int = Field(description="tests whose token spend is unknown (estimated)")
    cost_unknown: int = Field(description="tests whose cost is unknown (estimated)")
    tokens_estimated: int | None = Field(
        description="known tokens plus the estimate for the unknown; None: nothing to estimate from"
    )
    cost_usd_estimated: float | None = Field(
        description="known cost plus the estimate for the unknown; None: nothing to estimate from"
    )


class Report(BaseModel):
    """The budget of a run, what it spent and whether it stopped the run."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    limits: Limits
    spent: Spend
    exhausted: Kind | None = Field(default=None, description="the budget that stopped the run")
    reason: str | None = Field(default=None, description="why, in a sentence")
    skipped: int = Field(default=0, description="tests not started because of it")


class Meter:
    """Counts a run's spend as its tests end and says when a limit is reached.

    Not thread-safe by design: the engine calls it from the event loop only.
    """

    def __init__(
        self,
        limits: Limits,
        judge_prices: Prices | None = None,
        *,
        started: float | None = None,
    ) -> None:
        self.limits = limits
        self.judge_prices = judge_prices or Prices()
        self.started = time.monotonic() if started is None else started
        self.spends: list[TestSpend] = []
        self.exhausted: Kind | None = None
        self.reason: str | None = None
        self.skipped = 0
        self.judge_floor = (0, 0)
        """(input, output) tokens the judge service says it spent for this run: the judge's
        spend is at least this, whatever the tests' signals add up to (the operator)."""

    def add(self, spend: TestSpend) -> None:
        self.spends.append(spend)

    def add_result(self, result: TestResult) -> None:
        self.add(of_result(result, self.judge_prices))

    def elapsed(self, now: float | None = None) -> float:
        return (time.monotonic() if now is None else now) - self.started

    def check(self, now: float | None = None) -> Kind | None:
        """The limit the spend so far reaches (and why, on :attr:`reason`), else ``None``.

        Once exhausted it stays so: a run never starts tests again.
        """
        if self.exhausted is not None:
            return self.exhausted
        spent = self.spent(now)
        limits = self.limits
        found: tuple[Kind, str] | None = None
        # The clock as read, not the spend's figure (rounded to the millisecond for reports):
        # a limit under a millisecond is reached as soon as it is, not once 0.5 ms went by.
        elapsed = self.elapsed(now)
        if limits.max_duration_s is not None and elapsed >= limits.max_duration_s:
            found = (
                "max_duration_s",
                f"{elapsed:.1f} s elapsed of --max-duration {limits.max_duration_s:g}",
            )
        elif limits.max_tokens is not None:
            found = _reached(
                "max_tokens",
                limits.max_tokens,
                spent.tokens_estimated,
                spent.tokens_unknown,
                f"{spent.tokens_estimated} tokens",
                "token usage",
            )
        if found is None and limits.max_cost_usd is not None:
            found = _reached(
                "max_cost_usd",
                limits.max_cost_usd,
                spent.cost_usd_estimated,
                spent.cost_unknown,
                f"${spent.cost_usd_estimated or 0:.4f}",
                "cost (no token usage reported, or no price for the model)",
            )
        if found is not None:
            self.exhausted, self.reason = found
        return self.exhausted

    def spent(self, now: float | None = None) -> Spend:
        spends = list(self.spends)
        floor_in, floor_out = self.judge_floor
        extra = floor_in + floor_out - sum(s.judge_tokens for s in spends)
        if extra > 0:  # what the judge service spent beyond what the cells' signals say
            share = extra / (floor_in + floor_out)
            spends.append(
                TestSpend(
                    judge_tokens=extra,
                    judge_cost_usd=self.judge_prices.cost(
                        round(floor_in * share), extra - round(floor_in * share)
                    ),
                )
            )
        return _total(spends, self.elapsed(now))

    def report(self, now: float | None = None) -> Report:
        return Report(
            limits=self.limits,
            spent=self.spent(now),
            exhausted=self.exhausted,
            reason=self.reason,
            skipped=self.skipped,
        )


def _reached(
    kind: Kind, limit: float, estimated: float | None, unknown: int, shown: str, what: str
) -> tuple[Kind, str] | None:
    flag = f"{FLAGS[kind]} {limit:g}"
    if estimated is None:
        return (
            kind,
            f"{flag}: the {what} of {unknown} test{'s' if unknown != 1 else ''} is unknown and "
            "no test's is known to estimate it from (unknown spend is not zero)",
        )
    if estimated >= limit:
        extra = f", {unknown} of them estimated" if unknown else ""
        return kind, f"{flag} reached: {shown} spent{extra}"
    return None


def _total(spends: Iterable[TestSpend], duration_s: float) -> Spend:
    spends = list(spends)
    ran = [s for s in spends if s.ran_agent]
    known_tokens = [s.tokens for s in spends if s.tokens is not None]
    known_costs = [s.cost_usd for s in spends if s.cost_usd is not None]
    tokens_unknown = sum(1 for s in spends if s.tokens is None)
    cost_unknown = sum(1 for s in spends if s.cost_usd is None)
    # The estimate for an unknown test: the most any one test that ran the agent spent.
    top_tokens = max((s.tokens for s in ran if s.tokens is not None), default=None)
    top_cost = max((s.cost_usd for s in ran if s.cost_usd is not None), default=None)
    tokens = sum(t for t in known_tokens if t is not None)
    cost = sum(c for c in known_costs if c is not None)
    return Spend(
        tokens=tokens,
        agent_tokens=sum(s.agent_tokens or 0 for s in spends),
        judge_tokens=sum(s.judge_tokens for s in spends),
        cost_usd=round(cost, 8),
        agent_cost_usd=round(sum(s.agent_cost_usd or 0.0 for s in spends), 8),
        judge_cost_usd=round(sum(s.judge_cost_usd or 0.0 for s in spends), 8),
        duration_s=round(duration_s, 3),
        tokens_unknown=tokens_unknown,
        cost_unknown=cost_unknown,
        tokens_estimated=_estimate(tokens, tokens_unknown, top_tokens),
        cost_usd_estimated=_round(_estimate(cost, cost_unknown, top_cost)),
    )


def _estimate(known: _N, unknown: int, per_test: _N | None) -> _N | None:
    if not unknown:
        return known
    if per_test is None:
        return None
    return known + unknown * per_test


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 8)
