"""An agent matrix: one suite against several agents in one run, side by side.

``agent-health run --agent a --agent b`` (and ``spec.agents`` on an EvaluationRun) runs every
(test, repeat) once per agent. The report keeps one ``tests[]`` entry per (test, repeat,
agent) and adds ``matrix``: each agent's own summary (as if it had run alone), one row per
test with each agent's outcome next to the others', and for each pair of agents the change
from the first to the second, paired by test id — the same paired statistics as ``compare``
(:func:`paired`), so "is b better than a?" gets an answer with its uncertainty.

Tests are paired by id: an agent's row for a test it did not run (a budget stopped the run
first) is missing, and only tests that both agents decided count in their pair.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_health.sdk.results import TestResult

Pairing = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], Any]
"""The paired test of two runs' test entries (the JSON report's ``tests``), as ``compare``
runs it; its answer is a pydantic model (dumped into the pair) or ``None``."""


class Side(BaseModel):
    """One test's outcome for one agent, over its repeats."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    runs: int
    passed: int
    failed: int
    errored: int
    errored_by_agent: int = 0
    skipped: int = 0
    pass_rate: float | None = Field(
        description="passed / (passed + failed + errored by the agent) over the repeats"
    )
    score: float | None = Field(description="the mean score of the repeats that have one")
    tokens: int | None = Field(description="agent tokens summed over the repeats that reported")


class Row(BaseModel):
    """One test, every agent side by side (an agent that did not run it is absent)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    id: str
    name: str
    agents: dict[str, Side]


class Pair(BaseModel):
    """From agent ``base`` to agent ``new`` over the tests both decided."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    base: str
    new: str
    tests: int = Field(description="tests both agents decided (paired by id)")
    better: list[str] = Field(
        default_factory=list, description="tests with a higher pass share for new"
    )
    worse: list[str] = Field(
        default_factory=list, description="tests with a lower pass share for new"
    )
    pass_rate_delta: float | None = Field(
        default=None, description="new - base pass rate over the paired tests"
    )
    score_delta: float | None = Field(
        default=None, description="new - base mean score over the tests both scored"
    )
    paired: dict[str, Any] | None = Field(
        default=None,
        description="the paired significance tests (pass rate, score), as compare reports them",
    )


class Matrix(BaseModel):
    """The ``matrix`` of a report of several agents."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    agents: list[str]
    summaries: dict[str, dict[str, Any]] = Field(
        description="each agent's summary over its own results (the report's summary shape)"
    )
    tests: list[Row]
    pairs: list[Pair]


def agents_of(results: Iterable[TestResult]) -> list[str]:
    """The agents of a matrix run, in the order they first appear (empty for one agent)."""
    return list(dict.fromkeys(r.agent for r in results if r.agent is not None))


def build(
    results: Sequence[TestResult],
    entries: Sequence[Mapping[str, Any]],
    summarize: Callable[[Sequence[TestResult]], dict[str, Any]],
    pairing: Pairing | None = None,
) -> Matrix | None:
    """The matrix of ``results`` (``None`` unless they come from two agents or more).

    ``entries`` are the report's test entries of the same results (the paired test reads
    those); ``summarize`` makes one agent's summary; ``pairing`` is the paired test.
    """
    agents = agents_of(results)
    if len(agents) < 2:
        return None
    by_agent = {a: [r for r in results if r.agent == a] for a in agents}
    entries_of = {a: [e for e in entries if e.get("agent") == a] for a in agents}
    sides = {a: _sides(rs) for a, rs in by_agent.items()}
    names = {r.id: r.title for r in results}
    rows = [
        Row(id=i, name=names[i], agents={a: sides[a][i] for a in agents if i in sides[a]})
        for i in names
    ]
    pairs = [
        _pair(a, b, sides[a], sides[b], entries_of[a], entries_of[b], pairing)
        for a, b in itertools.combinations(agents, 2)
    ]
    return Matrix(
        agents=agents,
        summaries={a: summarize(rs) for a, rs in by_agent.items()},
        tests=rows,
        pairs=pairs,
    )


def _sides(results: Sequence[TestResult]) -> dict[str, Side]:
    grouped: dict[str, list[TestResult]] = {}
    for r in results:
        grouped.setdefault(r.id, []).append(r)
    return {test_id: _side(rs) for test_id, rs in grouped.items()}


def _side(results: Sequence[TestResult]) -> Side:
    statuses = [r.status for r in results]
    by_agent = sum(1 for r in results if r.status == "errored" and r.cause == "agent")
    passed = statuses.count("passed")
    decided = passed + statuses.count("failed") + statuses.count("flaky") + by_agent
    scores = [r.score for r in results if r.score is not None]
    tokens = [r.token_usage.total for r in results if r.token_usage.total is not None]
    return Side(
        runs=len(results),
        passed=passed,
        failed=statuses.count("failed") + statuses.count("flaky"),
        errored=statuses.count("errored"),
        errored_by_agent=by_agent,
        skipped=statuses.count("skipped"),
        pass_rate=round(passed / decided, 6) if decided else None,
        score=round(sum(scores) / len(scores), 6) if scores else None,
        tokens=sum(tokens) if tokens else None,
    )


def _pair(
    base: str,
    new: str,
    before: Mapping[str, Side],
    after: Mapping[str, Side],
    base_entries: Sequence[Mapping[str, Any]],
    new_entries: Sequence[Mapping[str, Any]],
    pairing: Pairing | None,
) -> Pair:
    common = [i for i in before if i in after]
    decided = [
        i for i in common if before[i].pass_rate is not None and after[i].pass_rate is not None
    ]
    shares = [(before[i].pass_rate or 0.0, after[i].pass_rate or 0.0) for i in decided]
    scored = [i for i in common if before[i].score is not None and after[i].score is not None]
    paired = pairing(base_entries, new_entries) if pairing is not None else None
    return Pair(
        base=base,
        new=new,
        tests=len(decided),
        better=[i for i in decided if (after[i].pass_rate or 0) > (before[i].pass_rate or 0)],
        worse=[i for i in decided if (after[i].pass_rate or 0) < (before[i].pass_rate or 0)],
        pass_rate_delta=_mean_delta(shares),
        score_delta=_mean_delta([(before[i].score or 0.0, after[i].score or 0.0) for i in scored]),
        paired=paired.model_dump(mode="json") if isinstance(paired, BaseModel) else paired,
    )


def _mean_delta(pairs: Sequence[tuple[float, float]]) -> float | None:
    if not pairs:
        return None
    return round(sum(b - a for a, b in pairs) / len(pairs), 6)
