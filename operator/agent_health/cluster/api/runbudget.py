"""An EvaluationRun's ``spec.budget`` and its ``status.budget``: what a run may spend, and
what it has spent so far (metered by :mod:`agent_health.cluster.reconcile.spending`)."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

from agent_health.cluster.api import meta

Count = Annotated[int, pydantic.Field(ge=0)]


class Price(meta.Model):
    """USD per million tokens."""

    input_per_mtok: Annotated[float, pydantic.Field(ge=0)] = pydantic.Field(
        description="USD per million input (prompt) tokens."
    )
    output_per_mtok: Annotated[float, pydantic.Field(ge=0)] = pydantic.Field(
        description="USD per million output (completion) tokens."
    )


BUDGET_NEEDS_PRICES = (
    "!has(self.maxCostUsd) || (has(self.prices) && size(self.prices) > 0)",
    "spec.budget.maxCostUsd needs spec.budget.prices (a 'default' price, or one per model)",
)


class Budget(meta.Model):
    """What the run may spend. When the running total of the graded cells (agent tokens as
    the gateway recorded them, and what the judge service spent for the run) reaches a
    limit, no new cell starts; cells already running finish; the rest are skipped with
    reason ``budget`` and the ``BudgetExhausted`` condition says which limit stopped the run.
    A cell whose spend is unknown is charged the largest known spend of a cell of the run;
    with none known the budget is exhausted at once (unknown spend is not zero)."""

    model_config = pydantic.ConfigDict(json_schema_extra=meta.cel(BUDGET_NEEDS_PRICES))

    max_cost_usd: Annotated[float, pydantic.Field(gt=0)] | None = pydantic.Field(
        default=None, description="USD, agent and judge together (needs prices)."
    )
    max_tokens: Annotated[int, pydantic.Field(gt=0)] | None = pydantic.Field(
        default=None, description="Tokens, agent and judge together."
    )
    max_duration_seconds: Annotated[int, pydantic.Field(ge=1)] | None = pydantic.Field(
        default=None, description="Seconds since the run started running its cells."
    )
    prices: Annotated[dict[str, Price], pydantic.Field(max_length=64)] = pydantic.Field(
        default_factory=dict,
        description="The agent's prices by model name ('default' for any other model).",
    )
    judge_price: Price | None = pydantic.Field(
        default=None, description="The judge model's price; without it the judge's cost is unknown."
    )

    @pydantic.model_validator(mode="after")
    def _prices_for_cost(self) -> Budget:
        if self.max_cost_usd is not None and not self.prices:
            raise ValueError(BUDGET_NEEDS_PRICES[1])
        return self


BudgetKind = Literal["maxCostUsd", "maxTokens", "maxDurationSeconds"]


class BudgetStatus(meta.Model):
    """Spend so far against ``spec.budget``: known spend, and the estimate for the unknown."""

    tokens: Count = pydantic.Field(description="Known tokens, agent and judge.")
    agent_tokens: Count = 0
    judge_tokens: Count = 0
    cost_usd: Annotated[float, pydantic.Field(ge=0)] = pydantic.Field(
        default=0.0, description="Known cost, agent and judge."
    )
    agent_cost_usd: Annotated[float, pydantic.Field(ge=0)] = 0.0
    judge_cost_usd: Annotated[float, pydantic.Field(ge=0)] = 0.0
    duration_seconds: Annotated[float, pydantic.Field(ge=0)] = 0.0
    tokens_unknown: Count = pydantic.Field(
        default=0, description="Cells whose token spend is unknown (charged an estimate)."
    )
    cost_unknown: Count = pydantic.Field(default=0, description="Cells whose cost is unknown.")
    tokens_estimated: Count | None = pydantic.Field(
        default=None, description="Known tokens plus the estimate; unset: nothing to estimate from."
    )
    cost_usd_estimated: Annotated[float, pydantic.Field(ge=0)] | None = None
    exhausted: BudgetKind | None = pydantic.Field(
        default=None, description="The limit that stopped the run."
    )
    reason: Annotated[str, pydantic.Field(max_length=1024)] | None = None
    skipped: Count = pydantic.Field(default=0, description="Cells never started because of it.")
