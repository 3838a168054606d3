"""A run's budget on the operator (``spec.budget``): what its cells and its judge spent.

The same rules as a local run's budget (:mod:`agent_health.engine.budget`), with the
operator's sources: a cell's agent tokens are its grade's metrics (the gateway's record of the
target's model calls when it saw them, else the agent's reply as the ledger holds it), priced
with ``spec.budget.prices``; the judge's are what the judge service answered for the run's
cells (:meth:`RunBudget.judged`) — at least what the cells' judge signals add up to, which
is what counts after an operator restart (the service's tally lives in memory; the ledgers
do not). Duration counts from ``status.startTime``.

The spend is recomputed from the graded cells whenever it is asked for, so an operator that
restarts and re-grades a run's cells reaches the same decision; once a limit is reached it
stays reached for the run.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Literal

from agent_health.cluster.api import runbudget
from agent_health.engine import budget
from agent_health.sdk import tracesconfig
from agent_health.sdk.results import TestResult

CONDITION = "BudgetExhausted"
KINDS: dict[budget.Kind, runbudget.BudgetKind] = {
    "max_cost_usd": "maxCostUsd",
    "max_tokens": "maxTokens",
    "max_duration_s": "maxDurationSeconds",
}
REASONS: dict[budget.Kind, str] = {
    "max_cost_usd": "MaxCostUsd",
    "max_tokens": "MaxTokens",
    "max_duration_s": "MaxDurationSeconds",
}
_FIELDS: dict[str, str] = {
    "--max-cost": "spec.budget.maxCostUsd",
    "--max-tokens": "spec.budget.maxTokens",
    "--max-duration": "spec.budget.maxDurationSeconds",
}


class RunBudget:
    """The budget of one run; see the module docstring."""

    def __init__(self, spec: runbudget.Budget) -> None:
        self.spec = spec
        self.limits = budget.Limits(
            max_cost_usd=spec.max_cost_usd,
            max_tokens=spec.max_tokens,
            max_duration_s=spec.max_duration_seconds,
        )
        judge = spec.judge_price
        self.judge_prices = budget.Prices(
            input_per_mtok=judge.input_per_mtok if judge else None,
            output_per_mtok=judge.output_per_mtok if judge else None,
        )
        self.agent_prices = tracesconfig.PriceTable(
            {
                name: tracesconfig.Price(
                    input_per_mtok=price.input_per_mtok, output_per_mtok=price.output_per_mtok
                )
                for name, price in spec.prices.items()
            }
        )
        self.judge_in = 0
        self.judge_out = 0
        self.exhausted: budget.Kind | None = None
        self.reason: str | None = None
        self.skipped = 0

    def judged(self, tokens_in: int, tokens_out: int) -> None:
        """The judge service answered a call of one of the run's cells with these tokens."""
        self.judge_in += max(tokens_in, 0)
        self.judge_out += max(tokens_out, 0)

    def meter(
        self, results: Iterable[TestResult], started: datetime.datetime | None
    ) -> budget.Meter:
        """A meter over the run's graded cells, its clock at the run's start."""
        now = datetime.datetime.now(datetime.UTC)
        elapsed = (now - started).total_seconds() if started is not None else 0.0
        meter = budget.Meter(self.limits, self.judge_prices, started=-elapsed)
        for result in results:
            meter.add(budget.of_result(result, self.judge_prices, self.agent_prices))
        meter.judge_floor = (self.judge_in, self.judge_out)
        meter.exhausted, meter.reason, meter.skipped = self.exhausted, self.reason, self.skipped
        return meter

    def check(self, results: Iterable[TestResult], started: datetime.datetime | None) -> bool:
        """Whether a limit is reached (then no cell starts any more)."""
        if self.exhausted is not None:
            return True
        meter = self.meter(results, started)
        found = meter.check(now=0.0)
        if found is not None:
            self.exhausted, self.reason = found, _in_spec_terms(meter.reason or "")
        return found is not None

    def status(
        self, results: Iterable[TestResult], started: datetime.datetime | None
    ) -> runbudget.BudgetStatus:
        spent = self.meter(results, started).spent(now=0.0)
        return runbudget.BudgetStatus(
            tokens=spent.tokens,
            agent_tokens=spent.agent_tokens,
            judge_tokens=spent.judge_tokens,
            cost_usd=spent.cost_usd,
            agent_cost_usd=spent.agent_cost_usd,
            judge_cost_usd=spent.judge_cost_usd,
            duration_seconds=spent.duration_s,
            tokens_unknown=spent.tokens_unknown,
            cost_unknown=spent.cost_unknown,
            tokens_estimated=spent.tokens_estimated,
            cost_usd_estimated=spent.cost_usd_estimated,
            exhausted=KINDS[self.exhausted] if self.exhausted else None,
            reason=self.reason[:1024] if self.reason else None,
            skipped=self.skipped,
        )

    def condition(self) -> tuple[Literal["True", "False"], str, str]:
        """``BudgetExhausted``: status, reason, message."""
        if self.exhausted is None:
            return "False", "WithinBudget", "no limit of spec.budget is reached"
        return "True", REASONS[self.exhausted], self.reason or ""


def _in_spec_terms(reason: str) -> str:
    """The meter's reason, naming the spec's fields instead of the CLI's flags."""
    for flag, field in _FIELDS.items():
        reason = reason.replace(flag, field)
    return reason
