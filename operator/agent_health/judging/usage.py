"""Judge usage, reported apart from the agent's: calls, cache hits, tokens and cost.

Computed from the judge signals of the results (each records its tokens and whether it was
a cache hit), so a report rebuilt from a ledger gets the same numbers. Tokens of cache hits
were spent by an earlier run: they count as ``saved_tokens``, not as spent. Free-form
questions (insights' ``llm`` and the run-level rollup) are not signals: the backend's
:class:`~agent_health.judging.asking.Asked` tally is added when given (``asks``; their
tokens are in the totals).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from agent_health.judging.asking import Asked
from agent_health.sdk.config import JudgeConfig
from agent_health.sdk.results import TestResult


class JudgeUsage(BaseModel):
    """What judging cost in one run (the JSON report's ``summary.judge_tokens``)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    calls: int = 0
    cached: int = 0
    errored: int = 0
    skipped: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    saved_tokens: int = 0
    cost_usd: float | None = None
    asks: int = 0
    """Free-form questions (insights, rollup), cache hits included; in ``calls`` too."""
    asks_cached: int = 0

    def line(self) -> str:
        """One line for the terminal summary."""
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        saved = f", {self.saved_tokens} saved by the cache" if self.saved_tokens else ""
        asks = f", {self.asks} of them questions from insights" if self.asks else ""
        return (
            f"judge: {self.calls} calls ({self.cached} cached, {self.errored} errored{asks}), "
            f"{self.total_tokens} tokens ({self.input_tokens} in / {self.output_tokens} out)"
            f"{cost}{saved}"
        )


def summarize(
    results: Iterable[TestResult], judge: JudgeConfig | None = None, asked: Asked | None = None
) -> JudgeUsage:
    """Sum the judge signals of ``results`` and the free-form questions ``asked``; cost when
    the config gives prices."""
    calls = cached = errored = skipped = tokens_in = tokens_out = saved = 0
    for result in results:
        for signal in result.signals:
            if signal.kind != "judge":
                continue
            evidence = signal.evidence or {}
            if evidence.get("skipped"):
                skipped += 1
                continue
            calls += 1
            used_in = int(evidence.get("input_tokens") or 0)
            used_out = int(evidence.get("output_tokens") or 0)
            if evidence.get("cached"):
                cached += 1
                saved += used_in + used_out
                continue
            errored += 1 if signal.error else 0
            tokens_in += used_in
            tokens_out += used_out
    asked = asked or Asked()
    calls += asked.calls
    cached += asked.cached
    tokens_in += asked.input_tokens
    tokens_out += asked.output_tokens
    cost = None
    if judge is not None and (judge.input_cost_per_mtok or judge.output_cost_per_mtok):
        cost = round(
            tokens_in * (judge.input_cost_per_mtok or 0) / 1e6
            + tokens_out * (judge.output_cost_per_mtok or 0) / 1e6,
            6,
        )
    return JudgeUsage(
        calls=calls,
        cached=cached,
        errored=errored,
        skipped=skipped,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
        saved_tokens=saved,
        cost_usd=cost,
        asks=asked.calls,
        asks_cached=asked.cached,
    )
