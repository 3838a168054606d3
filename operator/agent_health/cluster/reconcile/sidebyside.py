"""An agent matrix in an EvaluationRun's status (``spec.agents``): each agent's tally, each
test per agent, and each pair of agents compared with ``compare``'s paired test.

Everything comes from the engine's report of the graded cells (:mod:`agent_health.engine.
matrix`), so a cluster run and ``agent-health run --agent a --agent b`` say the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_health.cluster.api import evaluationrun
from agent_health.cluster.grading import grading
from agent_health.engine import statistics


def agents(
    found: statistics.Matrix | None,
    score_intervals: Mapping[str, evaluationrun.Interval | None] | None = None,
) -> list[evaluationrun.AgentSummary]:
    """Each agent's tally over its own cells; ``score_intervals`` are the bootstrap intervals
    of their scores as last refreshed (:func:`score_intervals`), kept apart because the
    bootstrap is redone sparingly while the tallies follow every grade."""
    if found is None:
        return []
    kept = score_intervals or {}
    return [
        evaluationrun.AgentSummary(
            name=name,
            passed=summary.get("passed", 0),
            failed=summary.get("failed", 0),
            errored=summary.get("errored", 0),
            skipped=summary.get("skipped", 0),
            pass_rate=summary.get("pass_rate"),
            pass_rate_interval=_bounds(summary.get("pass_rate_interval")),
            score=summary.get("score"),
            score_interval=kept.get(name) if summary.get("score") is not None else None,
            pass_at_k=summary.get("pass_at_k"),
        )
        for name, summary in found.summaries.items()
    ]


def score_intervals(found: statistics.Matrix | None) -> dict[str, evaluationrun.Interval | None]:
    """Each agent's bootstrap interval of its score, from a matrix built with the bootstrap."""
    if found is None:
        return {}
    return {name: _bounds(s.get("score_interval")) for name, s in found.summaries.items()}


def pairs(found: statistics.Matrix | None) -> list[evaluationrun.AgentPair]:
    """Each pair of agents: the change from the first to the second and its paired test."""
    if found is None:
        return []
    return [
        evaluationrun.AgentPair(
            base=pair.base,
            new=pair.new,
            tests=pair.tests,
            worse=len(pair.worse),
            better=len(pair.better),
            pass_rate_delta=pair.pass_rate_delta,
            score_delta=pair.score_delta,
            pass_rate_delta_interval=_change(_of(pair.paired, "interval")),
            p_value=_of(pair.paired, "p_value"),
            significant=_of(pair.paired, "significant"),
        )
        for pair in found.pairs
    ]


def per_agent(grades: Sequence[grading.CellGrade]) -> list[evaluationrun.AgentTestSummary]:
    """One test's grades split by agent (empty outside a matrix)."""
    by_agent: dict[str, list[grading.CellGrade]] = {}
    for grade in grades:
        if grade.result.agent is not None:
            by_agent.setdefault(grade.result.agent, []).append(grade)
    out = []
    for name, mine in by_agent.items():
        statuses = [g.status for g in mine]
        scores = [g.score for g in mine if g.score is not None]
        out.append(
            evaluationrun.AgentTestSummary(
                name=name,
                passed=statuses.count("passed"),
                failed=statuses.count("failed"),
                errored=statuses.count("errored"),
                errored_by_agent=sum(g.status == "errored" and g.cause == "agent" for g in mine),
                skipped=statuses.count("skipped"),
                score=round(sum(scores) / len(scores), 6) if scores else None,
            )
        )
    return out


def _of(paired: dict[str, Any] | None, field: str) -> Any:
    """A field of the pass rate's paired test (``None`` when there was none)."""
    test = (paired or {}).get("pass_rate")
    return test.get(field) if isinstance(test, dict) else None


def _bounds(found: Any) -> evaluationrun.Interval | None:
    """An interval of the report (``{low, high, method, ...}``) as the status keeps it."""
    if not isinstance(found, dict):
        return None
    return evaluationrun.Interval(low=found["low"], high=found["high"])


def _change(found: Any) -> evaluationrun.ChangeInterval | None:
    if not isinstance(found, dict):
        return None
    return evaluationrun.ChangeInterval(low=found["low"], high=found["high"])
