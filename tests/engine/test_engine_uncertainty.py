"""A report's intervals and pass@k: the worked example of docs/statistics.md, and
``--pass-at`` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_health import cli
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import TestResult

PASSES = [3, 3, 2, 0, 1]
SCORES = [(0.9, 0.9, 0.9), (0.9, 0.9, 0.9), (0.5, 0.6, 0.9), (0.1, 0.1, 0.1), (0.2, 0.4, 0.8)]


def worked_example() -> list[TestResult]:
    """Five tests, three repeats each, as docs/statistics.md's worked example."""
    results = []
    for i, (passes, scores) in enumerate(zip(PASSES, SCORES, strict=True)):
        for r in range(3):
            results.append(
                TestResult(
                    id=f"t.py::test {i}",
                    name=f"test {i}",
                    title=f"test {i}",
                    file="t.py",
                    line=1,
                    repeat=r,
                    status="passed" if r < passes else "failed",
                    score=scores[r],
                    run_id=f"{i}-{r}",
                )
            )
    return results


def test_the_worked_example_of_the_statistics_page() -> None:
    s = RunReport.build(worked_example(), duration_ms=1.0, repeats=3, pass_at=[1, 2, 3]).summary
    assert s.pass_rate == 0.6
    rate = s.pass_rate_interval
    assert rate is not None
    assert (rate.method, rate.n, rate.effective_n) == ("wilson", 15, 7.941)  # deff 1.889
    assert (rate.low, rate.high) == (pytest.approx(0.285778, abs=1e-6), 0.849017)
    by_k = {p.k: p for p in s.pass_at}
    assert (by_k[3].pass_at_k, by_k[3].pass_hat_k) == (0.8, 0.4)
    assert by_k[2].pass_at_k == pytest.approx(0.733333, abs=1e-6)  # (1 + 1 + 1 + 0 + 2/3) / 5
    assert by_k[1].pass_at_k == 0.6
    at3, hat3 = by_k[3].pass_at_k_interval, by_k[3].pass_hat_k_interval
    assert at3 is not None and hat3 is not None  # noqa: PT018
    assert (at3.low, at3.high) == (0.375535, 0.963776)  # Wilson 4 of 5
    assert (hat3.low, hat3.high) == (0.117621, 0.769276)  # Wilson 2 of 5
    assert (s.pass_at_k, s.pass_hat_k) == (0.8, 0.4)  # k = the repeats, as before
    assert s.score == pytest.approx(9.1 / 15, abs=1e-6)
    score = s.score_interval
    assert score is not None
    assert (score.method, score.n, score.resamples) == ("bootstrap", 5, 1000)
    assert (round(score.low, 2), round(score.high, 2)) == (0.36, 0.85)
    # built twice, the same: the bootstrap is seeded
    again = RunReport.build(worked_example(), duration_ms=1.0, repeats=3).summary
    assert again.score_interval == score


SUITE = """from agent_health import test


@test("adds")
async def adds(expect):
    expect(1 + 1).to_equal(2)


@test("flips")
async def flips(expect, test_info):
    expect(test_info.repeat % 2).to_equal(0)
"""


def test_pass_at_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_pure.py").write_text(SUITE)
    code = cli.main(
        ["run", "--no-ledger", "--repeat", "3", "--pass-at", "1,3", "--reporter", "json:r.json"]
    )
    out = capsys.readouterr().out
    assert code == 1  # flips fails in its second repeat
    pass_at = json.loads((tmp_path / "r.json").read_text())["summary"]["pass_at"]
    assert [(p["k"], p["tests"], p["pass_at_k"]) for p in pass_at] == [
        (1, 2, pytest.approx((1 + 2 / 3) / 2, abs=1e-6)),
        (3, 2, 1.0),
    ]
    assert "pass@1 83% [" in out
    assert "pass@3 100% [" in out
    assert "pass rate 83% [" in out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5", "--pass-at 5 needs at least 5 repeats of each test: pass --repeat 5"),
        ("one", "--pass-at takes whole numbers separated by commas"),
        ("0", "--pass-at needs k of at least 1"),
    ],
)
def test_bad_pass_at_is_a_usage_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_pure.py").write_text(SUITE)
    assert cli.main(["run", "--no-ledger", "--repeat", "3", "--pass-at", value]) == 2
    assert message in capsys.readouterr().err
