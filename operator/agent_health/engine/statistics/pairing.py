"""Two runs of the same tests, paired by test id: is the difference more than noise?

A test is compared with itself, so what every test has in common (its difficulty) cancels
out and a small change is seen sooner than by comparing two pass rates as if unrelated.

* The pass rate: when each test has one decided result in each run, its pair is pass/fail ×
  pass/fail, and the exact McNemar test (on the tests that changed) gives the p-value and
  Newcombe's interval the effect's. With repeats, each test's change in its share of passing
  repeats goes through the paired permutation (sign-flip) test and a bootstrap over tests.
* The score: each test's change in mean score, through the sign-flip test and a bootstrap.

Intervals are at confidence 1 − alpha, so an interval excludes 0 exactly when the test is
significant (up to the two methods' differences). docs/statistics.md has the maths.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_health import statuses
from agent_health.engine.statistics import stats, uncertainty

ALPHA = 0.05
Metric = Literal["pass_rate", "score"]


class PairedTest(BaseModel):
    """One paired test of "no change" and the size of the change."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    metric: Metric
    tests: int = Field(description="tests paired by id that have the value in both runs")
    base: float = Field(description="the mean over the paired tests, base run")
    new: float
    effect: float = Field(description="new - base, over the paired tests")
    interval: uncertainty.Interval
    method: Literal["exact McNemar", "sign-flip permutation"]
    exact: bool = Field(description="every sign assignment counted (not a Monte Carlo)")
    p_value: float
    alpha: float
    significant: bool
    worse: int | None = Field(default=None, description="McNemar: passed in base only")
    better: int | None = Field(default=None, description="McNemar: passed in new only")
    needed: int | None = Field(
        default=None,
        description="McNemar: the fewest tests that must change one way for p < alpha; "
        "None when more than the paired tests",
    )

    @property
    def regressed(self) -> bool:
        """A significant change for the worse."""
        return self.significant and self.effect < 0


class Paired(BaseModel):
    """The paired tests of a comparison (``None`` where no test has the value in both)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    alpha: float = ALPHA
    pass_rate: PairedTest | None = None
    score: PairedTest | None = None


class _PerTest:
    """One test's results in one run: decided repeats and passes, scores."""

    __slots__ = ("decided", "passed", "scores")

    def __init__(self) -> None:
        self.decided = 0
        self.passed = 0
        self.scores: list[float] = []


def _per_test(tests: Iterable[Mapping[str, Any]]) -> dict[str, _PerTest]:
    out: dict[str, _PerTest] = {}
    for t in tests:
        one = out.setdefault(str(t["id"]), _PerTest())
        status = t.get("status")
        # flaky (passed only on a retry) is a decided non-pass; errored only when the agent
        # caused it (version-1
        # reports have no cause: their errored results are left out, as they were then)
        if status in statuses.DECIDED or (status == "errored" and t.get("cause") == "agent"):
            one.decided += 1
            one.passed += status == "passed"
        score = t.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool):
            one.scores.append(float(score))
    return out


def compare(
    base: Iterable[Mapping[str, Any]],
    new: Iterable[Mapping[str, Any]],
    *,
    alpha: float = ALPHA,
    seed: int = stats.SEED,
) -> Paired:
    """Pair two runs' test entries (the JSON report's ``tests``) by id and test each change."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    before, after = _per_test(base), _per_test(new)
    common = sorted(set(before) & set(after))
    return Paired(
        alpha=alpha,
        pass_rate=_pass_rate([(before[i], after[i]) for i in common], alpha, seed),
        score=_score([(before[i], after[i]) for i in common], alpha, seed),
    )


def _pass_rate(
    pairs: list[tuple[_PerTest, _PerTest]], alpha: float, seed: int
) -> PairedTest | None:
    pairs = [(b, n) for b, n in pairs if b.decided and n.decided]
    if not pairs:
        return None
    if all(b.decided == 1 and n.decided == 1 for b, n in pairs):
        both = sum(1 for b, n in pairs if b.passed and n.passed)
        worse = sum(1 for b, n in pairs if b.passed and not n.passed)
        better = sum(1 for b, n in pairs if not b.passed and n.passed)
        neither = len(pairs) - both - worse - better
        low, high = stats.newcombe_paired(both, worse, better, neither, 1 - alpha)
        p = stats.mcnemar_exact(worse, better)
        base, new = (both + worse) / len(pairs), (both + better) / len(pairs)
        needed = math.ceil(math.log2(2 / alpha))
        return PairedTest(
            metric="pass_rate",
            tests=len(pairs),
            base=_round(base),
            new=_round(new),
            effect=_round(new - base),
            interval=uncertainty.Interval(
                low=_round(low), high=_round(high), method="newcombe", n=len(pairs)
            ),
            method="exact McNemar",
            exact=True,
            p_value=_round(p),
            alpha=alpha,
            significant=p < alpha,
            worse=worse,
            better=better,
            needed=needed if needed <= len(pairs) else None,
        )
    shares = [(b.passed / b.decided, n.passed / n.decided) for b, n in pairs]
    return _sign_flip("pass_rate", shares, alpha, seed)


def _score(pairs: list[tuple[_PerTest, _PerTest]], alpha: float, seed: int) -> PairedTest | None:
    means = [
        (sum(b.scores) / len(b.scores), sum(n.scores) / len(n.scores))
        for b, n in pairs
        if b.scores and n.scores
    ]
    return _sign_flip("score", means, alpha, seed) if means else None


def _sign_flip(
    metric: Metric, values: list[tuple[float, float]], alpha: float, seed: int
) -> PairedTest:
    differences = [n - b for b, n in values]
    p, exact = stats.sign_flip(differences, seed=seed)
    resamples = stats.resamples_for(len(differences))
    low, high = stats.bootstrap_mean(
        differences, confidence=1 - alpha, resamples=resamples, seed=seed
    )
    base = sum(b for b, _ in values) / len(values)
    new = sum(n for _, n in values) / len(values)
    return PairedTest(
        metric=metric,
        tests=len(values),
        base=_round(base),
        new=_round(new),
        effect=_round(sum(differences) / len(differences)),
        interval=uncertainty.Interval(
            low=_round(low),
            high=_round(high),
            method="bootstrap",
            n=len(values),
            resamples=resamples,
        ),
        method="sign-flip permutation",
        exact=exact,
        p_value=_round(p),
        alpha=alpha,
        significant=p < alpha,
    )


def _round(value: float) -> float:
    return round(value, 6)


def render(paired: Paired) -> list[str]:
    """The paired tests as lines for the terminal, each ending with whether the change can be
    told from noise at this sample size."""
    level = f"{1 - paired.alpha:.0%}"
    lines = []
    for name, found, fmt in (
        ("pass rate", paired.pass_rate, "pts"),
        ("score", paired.score, ".3f"),
    ):
        if found is None:
            lines.append(f"{name}: no test has one in both runs; nothing to pair")
            continue
        effect = _signed(found.effect, fmt)
        interval = f"{_signed(found.interval.low, fmt)}, {_signed(found.interval.high, fmt)}"
        how = found.method + ("" if found.exact else f", {stats.PERMUTATIONS:,} random flips")
        if found.worse is not None:
            how += f": {found.better} better, {found.worse} worse"
        lines.append(
            f"{name} {effect} over {found.tests} paired tests, {level} CI [{interval}]; "
            f"{how}; p = {_p(found.p_value)}"
        )
        lines.append("  " + _verdict(found))
    return lines


def _verdict(found: PairedTest) -> str:
    alpha = f"α = {found.alpha:g}"
    if found.significant:
        way = "worse" if found.effect < 0 else "better"
        return f"distinguishable from noise: {way} (p = {_p(found.p_value)} < {alpha})"
    text = f"not distinguishable from noise at this sample size (p = {_p(found.p_value)} ≥ {alpha})"
    if found.worse is not None:
        if found.needed is None:
            text += f"; with {found.tests} paired tests no change can reach {alpha}"
        else:
            share = found.needed / found.tests
            text += (
                f"; with {found.tests} paired tests it takes at least {found.needed} changing "
                f"one way and none the other ({share:.0%} of them) to reach {alpha}"
            )
    return text


def _signed(value: float, fmt: str) -> str:
    if fmt == "pts":
        return f"{value * 100:+.1f} pts"
    return format(value, "+" + fmt)


def _p(value: float) -> str:
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"
