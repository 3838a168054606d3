"""The intervals a report carries beside its numbers, and pass@k for each k asked.

* A pass rate: the Wilson interval over its decided results, shrunk to the effective sample
  size when a test's repeats are alike (:func:`stats.clustered_wilson`).
* A score: a seeded percentile bootstrap over tests, each test's repeats resampled together.
  When every test has the same mean score there is nothing to resample and the bootstrap
  would claim certainty; the interval is then the Wilson interval of that mean as a share of
  the tests (a value in [0, 1] varies at most as much as a pass/fail one with its mean).
* pass@k and pass^k: each test's unbiased estimate from its decided repeats, and the Wilson
  interval of their mean over tests: exact in kind when each estimate is 0 or 1 (k = the
  repeats), conservative when they are fractions, for the same reason.

docs/statistics.md gives the maths and a worked example.

The functions take per-test :class:`Tally` objects (:func:`tallies` makes them from
results), so a report of one agent, a label's slice of it, or each agent of a matrix is
summarised the same way.
"""

import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from agent_health import statuses
from agent_health.engine.statistics import stats
from agent_health.sdk import errors
from agent_health.sdk.results import TestResult

CONFIDENCE = stats.CONFIDENCE
"""Statuses that always say something about the agent; errored only when it caused it."""


class Interval(BaseModel):
    """A confidence interval (at the report's ``confidence``, 95% unless said otherwise)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    low: float
    high: float
    method: Literal["wilson", "bootstrap", "newcombe"]
    n: int = Field(description="what it rests on: decided results (wilson), tests (bootstrap)")
    effective_n: float | None = Field(
        default=None,
        description="wilson over repeats: the results counted after the design effect",
    )
    resamples: int | None = Field(default=None, description="bootstrap resamples drawn")

    def text(self, fmt: str = ".0%") -> str:
        """``[62%, 91%]`` (or ``[0.41, 0.77]`` with ``fmt=".2f"``)."""
        return f"[{format(self.low, fmt)}, {format(self.high, fmt)}]"


class PassAtK(BaseModel):
    """pass@k and pass^k for one k, over the tests with at least k decided repeats."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    k: int
    tests: int = Field(description="tests with at least k decided repeats (the others are out)")
    pass_at_k: float | None = None
    pass_at_k_interval: Interval | None = None
    pass_hat_k: float | None = None
    pass_hat_k_interval: Interval | None = None


class Tally(NamedTuple):
    """One test's decided repeats and scores: what every interval is computed from.

    A named tuple, not a model: the run makes one per test as its report is built, never
    validates or serializes it, and a model's ``model_construct`` is Python, where a named
    tuple's making is a tuple's (issue #40)."""

    passed: int = 0
    decided: int = 0
    score_sum: float = 0.0
    scored: int = 0


def key(result: TestResult) -> str:
    """A result's test in the run's aggregates: its id, and its agent in a matrix (so pass@k
    and the intervals count each agent's repeats of a test apart)."""
    return result.id if result.agent is None else f"{result.agent}: {result.id}"


def tallies(results: Sequence[TestResult]) -> dict[str, Tally]:
    """Per test id: its decided repeats (passed, failed, flaky — failed, then passed on a
    retry —, errored by the agent) and its scores."""
    found: dict[str, list[float]] = {}
    for r in results:
        tally = found.setdefault(key(r), [0, 0, 0.0, 0])  # an agent matrix: apart
        if r.status in statuses.DECIDED or (r.status == "errored" and r.cause == "agent"):
            tally[1] += 1
            tally[0] += r.status == "passed"
        if r.score is not None and math.isfinite(r.score):  # a NaN score has no interval
            tally[2] += r.score
            tally[3] += 1
    return {
        test_id: Tally(int(t[0]), int(t[1]), float(t[2]), int(t[3])) for test_id, t in found.items()
    }


def proportion(tallies: Sequence[Tally], confidence: float = CONFIDENCE) -> Interval | None:
    """The pass rate's interval; ``None`` when nothing was decided."""
    groups = [(t.passed, t.decided) for t in tallies if t.decided]
    if not groups:
        return None
    low, high, effective = stats.clustered_wilson(groups, confidence)
    trials = sum(n for _, n in groups)
    return Interval.model_construct(
        low=_round(low),
        high=_round(high),
        method="wilson",
        n=trials,
        effective_n=float(round(effective, 3)) if effective != trials else None,
    )


def score(
    tallies: Sequence[Tally], confidence: float = CONFIDENCE, seed: int = stats.SEED
) -> Interval | None:
    """The mean score's interval, bootstrapped over tests; ``None`` when nothing was scored."""
    clusters = [(t.score_sum, float(t.scored)) for t in tallies if t.scored]
    if not clusters:
        return None
    if len({s / c for s, c in clusters}) == 1:
        return share([s / c for s, c in clusters], confidence)
    resamples = stats.resamples_for(len(clusters))
    low, high = stats.bootstrap_ratio(
        clusters, confidence=confidence, resamples=resamples, seed=seed
    )
    return Interval.model_construct(
        low=_round(low),
        high=_round(high),
        method="bootstrap",
        n=len(clusters),
        resamples=resamples,
    )


def share(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The Wilson interval of a mean of per-test values in [0, 1], as a share of the tests."""
    if not values:
        return None
    low, high = stats.wilson(min(sum(values), len(values)), len(values), confidence)
    return Interval.model_construct(
        low=_round(low), high=_round(high), method="wilson", n=len(values)
    )


def pass_at(
    tallies: Mapping[str, Tally],
    ks: Sequence[int],
    *,
    intervals: bool = True,
    confidence: float = CONFIDENCE,
) -> list[PassAtK]:
    """pass@k and pass^k for each k: per test the unbiased estimators from its decided
    repeats (a test with fewer than k is left out), then the mean over tests."""
    out = []
    for k in sorted(set(ks)):
        eligible = [t for t in tallies.values() if t.decided >= k]
        at = [stats.pass_at_k(t.decided, t.passed, k) for t in eligible]
        hat = [stats.pass_hat_k(t.decided, t.passed, k) for t in eligible]
        out.append(
            PassAtK.model_construct(
                k=k,
                tests=len(eligible),
                pass_at_k=_average(at),
                pass_at_k_interval=share(at, confidence) if intervals else None,
                pass_hat_k=_average(hat),
                pass_hat_k_interval=share(hat, confidence) if intervals else None,
            )
        )
    return out


def parse_pass_at(value: str | None, repeats: int) -> list[int] | None:
    """``--pass-at 1,3,5`` as a sorted list of k (``None`` when not given); each k must be
    at least 1 and at most the repeats."""
    if value is None:
        return None
    try:
        ks = [int(part) for part in value.split(",") if part.strip()]
    except ValueError as err:
        raise errors.ConfigError(
            f"--pass-at takes whole numbers separated by commas, e.g. 1,3,5; got {value!r}"
        ) from err
    if not ks or any(k < 1 for k in ks):
        raise errors.ConfigError(f"--pass-at needs k of at least 1, e.g. 1,3,5; got {value!r}")
    if max(ks) > repeats:
        raise errors.ConfigError(
            f"--pass-at {max(ks)} needs at least {max(ks)} repeats of each test: pass "
            f"--repeat {max(ks)} (or more)"
        )
    return sorted(set(ks))


def _average(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def _round(value: float) -> float:
    return float(round(value, 6))
