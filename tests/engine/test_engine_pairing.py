"""``compare``'s paired tests: McNemar and Newcombe on pass/fail pairs, sign-flip and bootstrap
on shares and scores, ``--alpha`` and ``--gate significant``; p-values computed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine.comparing import compare
from agent_health.engine.statistics import pairing


def entry(name: str, status: str, repeat: int = 0, score: float | None = None, **kw: Any) -> dict:
    if score is None:
        score = {"passed": 1.0, "failed": 0.0}.get(status)
    return {"id": f"t.py::{name}", "name": name, "repeat": repeat, "status": status,
            "score": score, **kw}  # fmt: skip


def report(tests: list[dict[str, Any]]) -> dict[str, Any]:
    passed = sum(t["status"] == "passed" for t in tests)
    decided = sum(t["status"] in ("passed", "failed") for t in tests)
    return {"version": 2, "summary": {"pass_rate": passed / decided if decided else None},
            "tests": tests}  # fmt: skip


def pairs(both: int, worse: int, better: int, neither: int) -> tuple[list[dict], list[dict]]:
    """Base and new entries for a 2x2 table of paired pass/fail outcomes."""
    base, new = [], []
    plan = [("passed", "passed")] * both + [("passed", "failed")] * worse
    plan += [("failed", "passed")] * better + [("failed", "failed")] * neither
    for i, (was, now) in enumerate(plan):
        base.append(entry(f"test {i}", was))
        new.append(entry(f"test {i}", now))
    return base, new


def test_pass_fail_pairs_get_exact_mcnemar_and_newcombes_interval() -> None:
    base, new = pairs(both=10, worse=2, better=6, neither=2)
    rate = pairing.compare(base, new).pass_rate
    assert rate is not None
    assert (rate.method, rate.tests, rate.worse, rate.better) == ("exact McNemar", 20, 2, 6)
    assert (rate.base, rate.new, rate.effect) == (0.6, 0.8, 0.2)
    # 2 · (C(8,0) + C(8,1) + C(8,2)) / 2^8 = 2 · 37 / 256
    assert rate.p_value == pytest.approx(0.289062, abs=1e-6)
    assert not rate.significant
    # Newcombe [−0.0819479, 0.44452] (worked in tests/engine/test_engine_stats.py)
    assert (rate.interval.low, rate.interval.high) == (-0.081948, 0.44452)
    assert rate.interval.method == "newcombe"
    assert rate.needed == 6  # 2 · 2^-6 < 0.05 <= 2 · 2^-5


def test_a_wider_alpha_gives_a_narrower_interval_and_the_same_p() -> None:
    base, new = pairs(both=10, worse=2, better=6, neither=2)
    strict = pairing.compare(base, new).pass_rate
    loose = pairing.compare(base, new, alpha=0.5).pass_rate
    assert strict is not None
    assert loose is not None
    assert loose.p_value == strict.p_value
    assert loose.significant  # 0.289 < 0.5
    assert strict.interval.low < loose.interval.low < loose.interval.high < strict.interval.high


def test_repeats_pair_each_tests_share_of_passing_repeats() -> None:
    base, new = [], []
    # four tests x 3 repeats: base passes all; new passes 2, 2, 1 and 3 of 3.
    for i, kept in enumerate([2, 2, 1, 3]):
        for r in range(3):
            base.append(entry(f"t{i}", "passed", r))
            new.append(entry(f"t{i}", "passed" if r < kept else "failed", r))
    rate = pairing.compare(base, new).pass_rate
    assert rate is not None
    assert (rate.method, rate.exact, rate.tests) == ("sign-flip permutation", True, 4)
    # differences -1/3, -1/3, -2/3, 0: |sum| = 4/3 is reached only when all three non-zero
    # ones share a sign: 2 of 2^3 assignments
    assert rate.p_value == 0.25
    assert rate.effect == pytest.approx(-1 / 3, abs=1e-6)
    assert rate.interval.method == "bootstrap"
    assert rate.interval.low <= rate.effect <= rate.interval.high <= 0


def test_scores_pair_each_tests_mean_score() -> None:
    base = [entry(n, "passed", score=s) for n, s in [("a", 0.5), ("b", 0.25), ("c", 0.75)]]
    new = [entry(n, "passed", score=s) for n, s in [("a", 1.0), ("b", 0.5), ("c", 0.5)]]
    score = pairing.compare(base, new).score
    assert score is not None
    # differences 0.5, 0.25, -0.25: |sum| = 0.5 is reached by (+,+,-), (-,-,+), (+,-,+),
    # (-,+,-), (+,+,+), (-,-,-): 6 of 8
    assert score.p_value == 0.75
    assert score.effect == pytest.approx(1 / 6, abs=1e-6)


def test_errors_the_agent_caused_are_decided_others_are_left_out() -> None:
    base = [entry("a", "passed"), entry("b", "passed"), entry("c", "passed")]
    new = [
        entry("a", "errored", cause="agent"),
        entry("b", "errored", cause="infra"),
        entry("c", "errored"),  # a version-1 errored result: no cause, left out
    ]
    rate = pairing.compare(base, new).pass_rate
    assert rate is not None
    assert (rate.tests, rate.worse, rate.better) == (1, 1, 0)


def test_nothing_to_pair_says_so() -> None:
    found = pairing.compare([entry("a", "skipped")], [entry("b", "passed")])
    assert found.pass_rate is None
    assert found.score is None
    assert "nothing to pair" in pairing.render(found)[0]


def write(tmp_path: Path, name: str, tests: list[dict]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report(tests)))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    code = cli.main(["compare", *map(str, args)])
    return code, capsys.readouterr().out


def test_the_default_gate_fails_on_noise_the_significant_gate_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = pairs(both=17, worse=3, better=0, neither=0)  # 3 of 20 newly failing
    b, n = write(tmp_path, "base.json", base), write(tmp_path, "new.json", new)
    code, out = run(capsys, b, n)
    assert code == 1  # today's gate: any newly failing test
    # 2 · 1 / 2^3 = 0.25
    assert "exact McNemar: 0 better, 3 worse; p = 0.250" in out
    assert "pass rate -15.0 pts over 20 paired tests, 95% CI [" in out
    assert "not distinguishable from noise at this sample size (p = 0.250 ≥ α = 0.05)" in out
    assert "it takes at least 6 changing one way and none the other (30% of them)" in out
    code, out = run(capsys, b, n, "--gate", "significant")
    assert code == 0
    assert "no significant regression" in out


def test_the_significant_gate_fails_on_a_significant_drop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = pairs(both=13, worse=7, better=0, neither=0)  # 2 / 2^7 = 0.015625
    b, n = write(tmp_path, "base.json", base), write(tmp_path, "new.json", new)
    code, out = run(capsys, b, n, "--gate", "significant")
    assert code == 1
    assert "distinguishable from noise: worse (p = 0.016 < α = 0.05)" in out
    assert "REGRESSION: pass rate dropped 35.0 points over 20 paired tests, significant" in out
    # a stricter alpha: not significant, no regression
    code, out = run(capsys, b, n, "--gate", "significant", "--alpha", "0.01")
    assert code == 0
    assert "(p = 0.016 ≥ α = 0.01)" in out
    # significant but within an allowed drop of 40 points: no regression
    code, _ = run(capsys, b, n, "--gate", "significant", "--max-pass-rate-drop", "0.4")
    assert code == 0


def test_the_score_gates_significantly_only_when_a_score_drop_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"t{i}" for i in range(8)]
    b = write(tmp_path, "b.json", [entry(x, "passed", score=0.9) for x in names])
    n = write(tmp_path, "n.json", [entry(x, "passed", score=0.5) for x in names])
    code, out = run(capsys, b, n, "--gate", "significant")
    assert code == 0  # pass rate unchanged; the score is not gated unless asked
    # every difference -0.4: only the two one-sign assignments reach |sum|: 2 / 2^8
    assert "score -0.400 over 8 paired tests" in out
    assert "p = 0.008" in out
    code, out = run(capsys, b, n, "--gate", "significant", "--max-score-drop", "0.1")
    assert code == 1
    assert "REGRESSION: score dropped 0.400 over 8 paired tests" in out


def test_json_has_the_paired_tests_and_bad_alpha_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = pairs(both=10, worse=2, better=6, neither=2)
    b, n = write(tmp_path, "base.json", base), write(tmp_path, "new.json", new)
    code, out = run(capsys, b, n, "--json")
    data = json.loads(out)
    assert data["gate"] == "thresholds"
    assert data["paired"]["alpha"] == 0.05
    assert data["paired"]["pass_rate"]["p_value"] == pytest.approx(0.289062, abs=1e-6)
    assert data["paired"]["pass_rate"]["significant"] is False
    assert code == 1  # two tests newly failing: today's gate
    code = cli.main(["compare", str(b), str(n), "--alpha", "1.5"])
    assert code == 2
    assert "--alpha must be between 0 and 1" in capsys.readouterr().err


def test_compare_module_default_gate_is_unchanged() -> None:
    base, new = pairs(both=19, worse=1, better=0, neither=0)
    result = compare.compare(report(base), report(new))
    assert result.gate == "thresholds"
    assert result.regressed  # one newly failing test, as before
