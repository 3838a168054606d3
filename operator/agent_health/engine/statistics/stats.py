"""The estimators behind every interval and paired test agent-health prints.

Pure functions on numbers, no report models and no I/O; docs/statistics.md derives each one
with a worked example, and ``tests/engine/test_engine_stats.py`` checks each against values
computed by hand.

* :func:`wilson` — the Wilson score interval of a proportion; :func:`clustered_wilson` the
  same with the sample shrunk by the design effect when a test's repeats are alike.
* :func:`bootstrap_ratio` — a seeded percentile bootstrap over clusters (tests) of a ratio
  of sums (the mean score over results, repeats of a test resampled together).
* :func:`pass_at_k`, :func:`pass_hat_k` — the unbiased estimators from n ≥ k repeats.
* :func:`mcnemar_exact`, :func:`newcombe_paired` — the exact McNemar test and Newcombe's
  hybrid score interval for paired pass/fail outcomes.
* :func:`sign_flip` — the paired permutation test on per-test differences (exact for few
  tests, seeded Monte Carlo for many).

Randomness comes only from :class:`random.Random` seeded by the caller, and draws are made
with operations whose results are fixed across Python versions (``getrandbits``), so the same
results give the same intervals on every machine.
"""

from __future__ import annotations

import fractions
import math
import random
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95
RESAMPLES = 1000
"""Bootstrap resamples: enough for the 2.5% and 97.5% percentiles to move by a few percent
of the interval's width between seeds (Efron & Tibshirani recommend at least 1,000)."""
DRAW_BUDGET = 1_000_000
MIN_RESAMPLES = 200
"""Past 1,000 tests the resamples shrink so that one interval costs at most
:data:`DRAW_BUDGET` draws (about a tenth of a second), never below this many."""
PERMUTATIONS = 10_000
"""Monte Carlo sign flips when there are too many tests to enumerate every flip."""
SEED = 18
"""The default seed: a report is the same every time it is built from the same results."""
EXACT_FLIPS = 16
"""Up to this many non-zero differences, :func:`sign_flip` enumerates all 2^m flips."""


def z_value(confidence: float = CONFIDENCE) -> float:
    """The two-sided standard normal quantile: 1.959964 for 95%."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return statistics.NormalDist().inv_cdf((1 + confidence) / 2)


def wilson(successes: float, n: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of ``successes / n`` (``n`` may be an effective, non-integer
    size). With p = x/n and z the normal quantile::

        (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    """
    if n <= 0:
        raise ValueError("wilson() needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson() needs 0 <= successes <= n, got {successes} of {n}")
    z = z_value(confidence)
    p = successes / n
    z2n = z * z / n
    center = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    # At x = 0 (x = n) the bound is 0 (1) exactly; the formula reaches it only up to rounding.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def design_effect(groups: Sequence[tuple[int, int]]) -> float:
    """How much a test's repeats being alike widens a proportion's variance (at least 1).

    ``groups`` holds (successes, trials) per test. The cluster-robust variance of the pooled
    proportion, ``Σ (x_i - p n_i)² / N²``, over the binomial one, ``p (1 - p) / N``; it is
    1 when every test ran once, and up to the repeats per test when repeats always agree.
    When every result agrees (p is 0 or 1) the data cannot say how alike repeats are, and
    each test counts once (the design effect is N over the number of tests).
    """
    trials = sum(n for _, n in groups)
    tests = sum(1 for _, n in groups if n)
    if not trials:
        raise ValueError("design_effect() needs at least one trial")
    p = sum(x for x, _ in groups) / trials
    if p in (0.0, 1.0):
        return trials / tests
    spread = sum((x - p * n) ** 2 for x, n in groups)
    return max(1.0, spread / (trials * p * (1 - p)))


def clustered_wilson(
    groups: Sequence[tuple[int, int]], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """The Wilson interval of a pooled proportion over tests with repeats, and the effective
    sample size it rests on: ``N / design_effect`` (N when each test ran once)."""
    trials = sum(n for _, n in groups)
    successes = sum(x for x, _ in groups)
    if all(n <= 1 for _, n in groups):
        low, high = wilson(successes, trials, confidence)
        return low, high, float(trials)
    effective = trials / design_effect(groups)
    low, high = wilson(successes / trials * effective, effective, confidence)
    return low, high, effective


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolating linearly between order statistics
    (the definition numpy and R call type 7)."""
    if not ordered:
        raise ValueError("quantile() of no values")
    h = (len(ordered) - 1) * q
    below = math.floor(h)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (h - below) * (ordered[above] - ordered[below])


def resamples_for(tests: int) -> int:
    """How many bootstrap resamples an interval over ``tests`` tests gets by default."""
    return min(RESAMPLES, max(MIN_RESAMPLES, DRAW_BUDGET // max(tests, 1)))


def bootstrap_ratio(
    clusters: Sequence[tuple[float, float]],
    *,
    confidence: float = CONFIDENCE,
    resamples: int | None = None,
    seed: int = SEED,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``Σ sums / Σ counts`` over ``clusters``.

    Each cluster is one test: (sum of its values, how many values). A resample draws as many
    tests as there are, with replacement, keeping each test's repeats together, so a test
    run five times is not counted as five independent observations. Clusters with count 0
    must be left out by the caller.
    """
    if not clusters:
        raise ValueError("bootstrap_ratio() of no clusters")
    sums = [float(s) for s, _ in clusters]
    counts = [float(c) for _, c in clusters]
    ratios = {s / c for s, c in zip(sums, counts, strict=True)}
    if len(ratios) == 1:  # every test has the same mean: every resample does too
        only = ratios.pop()
        return only, only
    # The drawing machinery loads with the first interval that needs it (a run whose tests
    # all scored alike, one test's among them, never does).
    from agent_health.engine.statistics import resample

    rng = random.Random(seed)
    n = len(clusters)
    resamples = resamples_for(n) if resamples is None else resamples
    if len(set(counts)) == 1:  # the same count everywhere: the denominator is fixed
        draws = resample.Draws(sums)
        stats = [draws.total(rng).real / (counts[0] * n) for _ in range(resamples)]
    else:
        draws = resample.Draws([complex(s, c) for s, c in zip(sums, counts, strict=True)])
        stats = [_ratio(draws.total(rng)) for _ in range(resamples)]
    stats.sort()
    tail = (1 - confidence) / 2
    return quantile(stats, tail), quantile(stats, 1 - tail)


def _ratio(total: complex) -> float:
    return total.real / total.imag


def bootstrap_mean(
    values: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int | None = None,
    seed: int = SEED,
) -> tuple[float, float]:
    """The percentile bootstrap interval of a mean (one value per test)."""
    return bootstrap_ratio(
        [(v, 1.0) for v in values], confidence=confidence, resamples=resamples, seed=seed
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate that at least one of k repeats passes, from c passes in n ≥ k:
    ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021)."""
    _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate that all k repeats pass, from c passes in n ≥ k:
    ``C(c, k) / C(n, k)``."""
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_nck(n: int, c: int, k: int) -> None:
    if k < 1 or n < k or not 0 <= c <= n:
        raise ValueError(f"need 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")


def mcnemar_exact(worse: int, better: int) -> float:
    """The two-sided exact McNemar p-value from the discordant pairs: ``worse`` tests passed
    only in the base, ``better`` only in the new run. Under no change each discordant pair is
    a fair coin: ``p = min(1, 2 · P(Binomial(worse + better, 1/2) <= min(worse, better)))``."""
    if worse < 0 or better < 0:
        raise ValueError("discordant counts cannot be negative")
    m = worse + better
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(worse, better) + 1))
    # An exact ratio of integers: past 1,023 discordant pairs 2**m is beyond a float.
    return min(1.0, float(fractions.Fraction(2 * tail, 2**m)))


def newcombe_paired(
    both: int, worse: int, better: int, neither: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for the change in pass rate
    ``(better - worse) / n`` between two runs of the same n tests.

    ``both`` passed in both runs, ``worse`` only in the base, ``better`` only in the new run,
    ``neither`` in neither. It combines the Wilson intervals of the two pass rates with
    their correlation (phi, continuity-adjusted as Newcombe does), so it never collapses to
    a point the way a Wald interval does when no test changed.
    """
    n = both + worse + better + neither
    if n == 0:
        raise ValueError("newcombe_paired() of no pairs")
    p_new, p_base = (both + better) / n, (both + worse) / n
    low_new, high_new = wilson(both + better, n, confidence)
    low_base, high_base = wilson(both + worse, n, confidence)
    margins = (both + better) * (worse + neither) * (both + worse) * (better + neither)
    phi = 0.0
    if margins:
        cross = both * neither - better * worse
        adjusted = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = adjusted / math.sqrt(margins)
    delta = p_new - p_base
    d_low = math.sqrt(
        max(
            0.0,
            (p_new - low_new) ** 2
            - 2 * phi * (p_new - low_new) * (high_base - p_base)
            + (high_base - p_base) ** 2,
        )
    )
    d_high = math.sqrt(
        max(
            0.0,
            (high_new - p_new) ** 2
            - 2 * phi * (high_new - p_new) * (p_base - low_base)
            + (p_base - low_base) ** 2,
        )
    )
    return max(-1.0, delta - d_low), min(1.0, delta + d_high)


def sign_flip(
    differences: Sequence[float],
    *,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> tuple[float, bool]:
    """The two-sided paired permutation test of "no change" on per-test differences.

    Under no change, each test's difference is as likely to have either sign; the p-value is
    the share of sign assignments whose |sum| is at least the observed one. With at most
    :data:`EXACT_FLIPS` non-zero differences every assignment is counted (exact); beyond,
    ``permutations`` seeded random ones are, and ``p = (1 + hits) / (1 + permutations)``
    (never 0, Phipson & Smyth 2010). Returns (p, exact).
    """
    sizes = [abs(d) for d in differences if d != 0]
    if not sizes:
        return 1.0, True
    observed = abs(sum(differences))
    total = sum(sizes)
    slack = 1e-9 * total  # float sums of the same terms in another order may differ
    # Under a sign assignment the sum is total - 2 * (the sizes flipped negative). A bit
    # mask says which are flipped; the flipped sum is looked up eight tests at a time from a
    # table of every byte's subset sums.
    tables = []
    for start in range(0, len(sizes), 8):
        chunk = sizes[start : start + 8]
        tables.append(
            [sum(s for bit, s in enumerate(chunk) if byte >> bit & 1) for byte in range(256)]
        )
    width = len(tables)

    def extreme(mask: int) -> bool:
        flipped = sum(map(list.__getitem__, tables, mask.to_bytes(width, "little")))
        return abs(total - 2 * flipped) >= observed - slack

    if len(sizes) <= EXACT_FLIPS:
        hits = sum(map(extreme, range(2 ** len(sizes))))
        return hits / 2 ** len(sizes), True
    rng = random.Random(seed)
    hits = sum(extreme(rng.getrandbits(8 * width)) for _ in range(permutations))
    return (1 + hits) / (1 + permutations), False
