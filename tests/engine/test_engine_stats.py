"""The estimators against values computed by hand (the working is in each comment, and in
docs/statistics.md for the worked example)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
from agent_health.engine.statistics import resample, stats

Z = 1.959964  # the 97.5% standard normal quantile


def test_the_normal_quantile_is_the_textbook_one() -> None:
    assert stats.z_value(0.95) == pytest.approx(Z, abs=1e-6)
    assert stats.z_value(0.90) == pytest.approx(1.644854, abs=1e-6)
    with pytest.raises(ValueError, match="between 0 and 1"):
        stats.z_value(1.0)


def test_wilson_of_8_in_10() -> None:
    # p = 0.8, z²/n = 0.3841459, denominator 1.3841459
    # centre = (0.8 + 0.1920729) / 1.3841459 = 0.7167400
    # half   = 1.959964 · sqrt(0.016 + 0.0096036) / 1.3841459 = 0.2265779
    low, high = stats.wilson(8, 10)
    assert (low, high) == (pytest.approx(0.4901621, abs=1e-6), pytest.approx(0.9433179, abs=1e-6))


def test_wilson_at_the_edges_is_exactly_zero_or_one_and_never_a_point() -> None:
    # x = 0: centre = half = (z²/2n) / (1 + z²/n) → [0, z²/n / (1 + z²/n)] = [0, 0.2775328]
    assert stats.wilson(0, 10) == (0.0, pytest.approx(0.2775328, abs=1e-6))
    assert stats.wilson(10, 10) == (pytest.approx(0.7224672, abs=1e-6), 1.0)
    # one pass in one run: centre = (1 + 1.9207295) / 4.841459 = 0.6032522,
    # half = 1.959964 · sqrt(3.841459 / 4) / 4.841459 = 0.3967029 → [0.2065493, 1]
    assert stats.wilson(1, 1) == (pytest.approx(0.2065493, abs=1e-6), 1.0)
    with pytest.raises(ValueError, match="n > 0"):
        stats.wilson(0, 0)
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        stats.wilson(3, 2)


def test_repeats_that_agree_shrink_the_sample_by_the_design_effect() -> None:
    # Three tests run twice, passing 2, 1 and 0 times: p = 3/6 = 0.5.
    # Σ (x - p n)² = 1 + 0 + 1 = 2; N p (1 - p) = 1.5; design effect 4/3; n_eff = 6 / (4/3) = 4.5
    groups = [(2, 2), (1, 2), (0, 2)]
    assert stats.design_effect(groups) == pytest.approx(4 / 3)
    # Wilson(2.25 of 4.5): z²/n = 0.8536576, centre 0.5,
    # half = 1.959964 · sqrt(0.0555556 + 0.0474254) / 1.8536576 = 0.3393103
    low, high, effective = stats.clustered_wilson(groups)
    assert effective == pytest.approx(4.5)
    assert (low, high) == (pytest.approx(0.1606897, abs=1e-6), pytest.approx(0.8393103, abs=1e-6))
    # Each test once: plain Wilson, design effect 1.
    singles = [(1, 1), (1, 1), (0, 1)]
    assert stats.design_effect(singles) == 1.0
    assert stats.clustered_wilson(singles)[:2] == stats.wilson(2, 3)
    # Repeats that disagree more than chance never narrow the interval below plain Wilson.
    assert stats.design_effect([(1, 2), (1, 2), (1, 2)]) == 1.0


def test_when_every_result_agrees_each_test_counts_once() -> None:
    # 4 tests x 5 repeats all passed: nothing says how alike repeats are, so n_eff = 4.
    groups = [(5, 5)] * 4
    low, high, effective = stats.clustered_wilson(groups)
    assert effective == 4.0
    assert (low, high) == stats.wilson(4, 4)


def test_pass_at_k_and_pass_hat_k_are_the_unbiased_estimators() -> None:
    # n = 5 repeats, c = 2 passed, k = 3: 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert stats.pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # n = 10, c = 3, k = 5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.9166667
    assert stats.pass_at_k(10, 3, 5) == pytest.approx(0.9166667, abs=1e-7)
    # k = 1 is the share of passing repeats: 1 - C(3,1)/C(5,1) = 2/5
    assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # fewer failures than k: some passing repeat is always drawn
    assert stats.pass_at_k(5, 3, 3) == 1.0
    # pass^k: n = 5, c = 4, k = 3: C(4,3)/C(5,3) = 4/10
    assert stats.pass_hat_k(5, 4, 3) == pytest.approx(0.4)
    assert stats.pass_hat_k(5, 2, 3) == 0.0
    assert stats.pass_hat_k(3, 3, 3) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        stats.pass_at_k(2, 1, 3)


def test_exact_mcnemar() -> None:
    # 1 test got worse, 6 better: 2 · (C(7,0) + C(7,1)) / 2^7 = 2 · 8 / 128
    assert stats.mcnemar_exact(1, 6) == pytest.approx(0.125)
    # 0 and 6: 2 · 1 / 64 — six one-way flips are the fewest that reach p < 0.05
    assert stats.mcnemar_exact(0, 6) == pytest.approx(0.03125)
    assert stats.mcnemar_exact(0, 5) == pytest.approx(0.0625)
    # 2 and 10: 2 · (1 + 12 + 66) / 4096
    assert stats.mcnemar_exact(2, 10) == pytest.approx(0.0385742, abs=1e-7)
    assert stats.mcnemar_exact(5, 5) == 1.0  # capped: 2 · 638/1024 > 1
    assert stats.mcnemar_exact(0, 0) == 1.0


def test_exact_mcnemar_over_a_thousand_discordant_pairs() -> None:
    # 2**m is past a float from m = 1,024: two runs of 2,000 tests in which most changed.
    assert stats.mcnemar_exact(600, 600) == 1.0
    assert stats.mcnemar_exact(500, 700) == pytest.approx(8.535e-9, rel=1e-3)
    assert stats.mcnemar_exact(0, 1500) == 0.0  # 2 / 2**1500: below the smallest float


def test_newcombe_paired_interval_without_correlation() -> None:
    # 20 tests: 10 passed in both runs, 2 only in the base, 6 only in the new run, 2 in neither.
    # p_new = 0.8, p_base = 0.6, Δ = 0.2. AD - BC = 20 - 12 = 8 <= n/2, so phi = 0.
    # Wilson(16, 20) = [0.5839826, 0.9193423]; Wilson(12, 20) = [0.3865815, 0.7811935]
    # low  = 0.2 - sqrt((0.8 - 0.5839826)² + (0.7811935 - 0.6)²) = 0.2 - 0.2819479
    # high = 0.2 + sqrt((0.9193423 - 0.8)² + (0.6 - 0.3865815)²) = 0.2 + 0.2445200
    low, high = stats.newcombe_paired(10, 2, 6, 2)
    assert (low, high) == (pytest.approx(-0.0819479, abs=1e-6), pytest.approx(0.44452, abs=1e-6))


def test_newcombe_paired_interval_with_correlated_runs() -> None:
    # 48 tests: 30 both, 2 worse, 6 better, 10 neither. p_new = 0.75, p_base = 2/3.
    # AD - BC = 300 - 12 = 288 > n/2 = 24 → 264; phi = 264 / sqrt(36·12·32·16) = 0.5613409
    # Wilson(36, 48) = [0.6121563, 0.8507937]; Wilson(32, 48) = [0.5254011, 0.7832322]
    # low  = 0.0833333 - sqrt(0.1378437² - 2·0.5613409·0.1378437·0.1165655 + 0.1165655²)
    #      = 0.0833333 - 0.1206206
    low, high = stats.newcombe_paired(30, 2, 6, 10)
    assert low == pytest.approx(-0.0372873, abs=1e-6)
    assert high == pytest.approx(0.2022022, abs=1e-6)
    # Correlation narrows it: the same margins as if independent would be wider.
    assert (
        high - low < stats.newcombe_paired(24, 8, 12, 4)[1] - stats.newcombe_paired(24, 8, 12, 4)[0]
    )


def test_sign_flip_enumerates_small_samples_exactly() -> None:
    # Differences 0.5, 0.25, -0.25, 0.5; observed |sum| = 1. Of the 16 sign assignments,
    # (±0.5 ±0.5) ∈ {-1, 0, 0, 1} and (±0.25 ±0.25) ∈ {-0.5, 0, 0, 0.5}: |sum| >= 1 for
    # 3 with +1 and 3 with -1 → 6/16.
    assert stats.sign_flip([0.5, 0.25, -0.25, 0.5]) == (0.375, True)
    assert stats.sign_flip([0.0, 0.0]) == (1.0, True)


def test_on_pass_fail_pairs_the_sign_flip_test_is_exact_mcnemar() -> None:
    differences = [1.0] * 6 + [-1.0] + [0.0] * 13  # 6 better, 1 worse, 13 unchanged
    assert stats.sign_flip(differences) == (pytest.approx(stats.mcnemar_exact(1, 6)), True)


def test_sign_flip_beyond_enumeration_is_a_seeded_monte_carlo_close_to_exact() -> None:
    differences = [1.0] * 30 + [-1.0] * 10
    exact = 2 * sum(math.comb(40, i) for i in range(11)) / 2**40  # 0.0022214
    p, was_exact = stats.sign_flip(differences)
    assert not was_exact
    assert p == pytest.approx(exact, abs=0.002)
    assert stats.sign_flip(differences) == (p, False)  # seeded: the same every time
    assert p >= 1 / (stats.PERMUTATIONS + 1)  # never 0


def test_bootstrap_of_identical_tests_is_a_point() -> None:
    assert stats.bootstrap_ratio([(2.0, 2.0), (1.0, 1.0)]) == (1.0, 1.0)


def test_bootstrap_matches_the_exact_bootstrap_distribution() -> None:
    # Five tests: every one of the 5^5 resamples enumerated gives the exact percentile
    # interval; the seeded Monte Carlo one is within its sampling error.
    values = [0.0, 0.2, 0.5, 0.9, 1.0]
    means = sorted(sum(pick) / 5 for pick in itertools.product(values, repeat=5))
    exact = (stats.quantile(means, 0.025), stats.quantile(means, 0.975))
    got = stats.bootstrap_mean(values, resamples=20_000)
    assert got[0] == pytest.approx(exact[0], abs=0.02)
    assert got[1] == pytest.approx(exact[1], abs=0.02)


def test_bootstrap_keeps_a_tests_repeats_together() -> None:
    # 20 tests, each run 5 times with the same score every time: the interval is that of the
    # 20 test means (each test is one draw), not of 100 independent results.
    rng = random.Random(7)
    means = [rng.random() for _ in range(20)]
    clustered = stats.bootstrap_ratio([(5 * m, 5.0) for m in means])
    assert clustered == pytest.approx(stats.bootstrap_mean(means), abs=1e-12)
    as_if_independent = stats.bootstrap_mean([m for m in means for _ in range(5)])
    width = clustered[1] - clustered[0]
    assert as_if_independent[1] - as_if_independent[0] < 0.6 * width  # ~1/sqrt(5) as wide


def test_bootstrap_of_a_large_sample_agrees_with_the_normal_interval() -> None:
    rng = random.Random(11)
    values = [rng.random() for _ in range(400)]
    half = Z * statistics.pstdev(values) / math.sqrt(len(values))
    low, high = stats.bootstrap_mean(values)
    centre = statistics.fmean(values)
    assert low == pytest.approx(centre - half, abs=0.1 * half)
    assert high == pytest.approx(centre + half, abs=0.1 * half)


def test_bootstrap_is_seeded_and_weighs_unequal_counts() -> None:
    clusters = [(1.0, 1.0), (0.0, 3.0), (2.0, 2.0), (0.5, 1.0)]
    assert stats.bootstrap_ratio(clusters) == stats.bootstrap_ratio(clusters)
    rng = random.Random(5)
    many = [(rng.random(), 1.0) for _ in range(30)]
    assert stats.bootstrap_ratio(many, seed=1) != stats.bootstrap_ratio(many, seed=2)
    low, high = stats.bootstrap_ratio(clusters)
    assert 0.0 <= low < 3.5 / 7 < high <= 1.0  # around the ratio of sums, 3.5 / 7


@pytest.mark.parametrize("n", [1, 2, 7, 256, 300, 1000])
def test_draws_pick_every_test_equally_often(n: int) -> None:
    """One-byte (n <= 256) and two-byte draws, rejection included: the first, middle and last
    test are each drawn once per resample on average."""
    rng = random.Random(3)
    rounds = 400
    for target in sorted({0, n // 2, n - 1}):
        draws = resample.Draws([complex(i == target) for i in range(n)])
        hits = sum(draws.total(rng).real for _ in range(rounds))
        # Binomial(rounds · n, 1/n): mean `rounds`, sd about sqrt(rounds)
        assert abs(hits - rounds) <= 5 * math.sqrt(rounds), (n, target, hits)


def test_resamples_shrink_only_past_a_thousand_tests() -> None:
    assert stats.resamples_for(10) == stats.RESAMPLES
    assert stats.resamples_for(1000) == stats.RESAMPLES
    assert stats.resamples_for(5000) == 200
    assert stats.resamples_for(100_000) == stats.MIN_RESAMPLES
