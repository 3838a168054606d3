"""The terminal's budget line: spend so far against each limit of a run budget."""

from __future__ import annotations

from agent_health.engine import budget as budget_mod


def line(budget: budget_mod.Report) -> str:
    """``budget: 1,234 of 5,000 tokens, $0.0100 of $1.00, 12.3 of 60 s`` — spend so far
    against each limit set, agent and judge apart, and what was estimated."""
    spent, limits = budget.spent, budget.limits
    parts = []
    if limits.max_tokens is not None:
        parts.append(
            f"{_estimated(spent.tokens_estimated, spent.tokens_unknown, '{:,}')} of "
            f"{limits.max_tokens:,} tokens"
        )
    if limits.max_cost_usd is not None:
        parts.append(
            f"{_estimated(spent.cost_usd_estimated, spent.cost_unknown, '${:.4f}')} of "
            f"${limits.max_cost_usd:g}"
        )
    if limits.max_duration_s is not None:
        parts.append(f"{spent.duration_s:.1f} of {limits.max_duration_s:g} s")
    priced = limits.max_cost_usd is not None or spent.cost_usd > 0
    agent_cost = f" ${spent.agent_cost_usd:.4f}" if priced else ""
    judge_cost = f" ${spent.judge_cost_usd:.4f}" if priced else ""
    split = (
        f" (known: agent {spent.agent_tokens:,} tokens{agent_cost}, "
        f"judge {spent.judge_tokens:,} tokens{judge_cost})"
    )
    return "budget: " + ", ".join(parts) + split


def _estimated(value: float | None, unknown: int, fmt: str) -> str:
    if value is None:
        return f"unknown ({unknown} tests reported no usage)"
    shown = fmt.format(value)
    return f"~{shown} ({unknown} tests estimated)" if unknown else shown
