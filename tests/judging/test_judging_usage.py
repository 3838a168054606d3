"""Judge usage accounting and the package surface."""

from __future__ import annotations

from agent_health import judging
from agent_health.judging import errors
from agent_health.sdk import errors as sdk_errors
from agent_health.sdk.config import JudgeConfig
from agent_health.sdk.results import Signal, TestResult


def _result(*evidence: dict[str, object], error: str | None = None) -> TestResult:
    signals = tuple(
        Signal(kind="judge", role="gate", name=f"c{i}", passed=True, evidence=e, error=error)
        for i, e in enumerate(evidence)
    )
    return TestResult(
        id="t",
        name="t",
        title="t",
        file="f.py",
        line=1,
        status="passed",
        run_id="r",
        signals=signals,
    )


def test_summary_separates_spent_cached_and_skipped() -> None:
    spent = {"cached": False, "input_tokens": 1000, "output_tokens": 200}
    hit = {"cached": True, "input_tokens": 50, "output_tokens": 5}
    skipped = {"skipped": True}
    config = JudgeConfig(model="m", input_cost_per_mtok=3.0, output_cost_per_mtok=15.0)
    usage = judging.summarize([_result(spent, hit, skipped), _result(spent, error="boom")], config)
    assert (usage.calls, usage.cached, usage.skipped, usage.errored) == (3, 1, 1, 1)
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (2000, 400, 2400)
    assert usage.saved_tokens == 55
    assert usage.cost_usd == 0.012
    assert "3 calls (1 cached, 1 errored), 2400 tokens" in usage.line()
    assert judging.summarize([_result(spent)]).cost_usd is None


def test_exports_are_complete() -> None:
    assert sorted(judging.__all__) == sorted(set(judging.__all__))
    for name in judging.__all__:
        assert getattr(judging, name) is not None
    assert issubclass(errors.UnknownEvaluator, sdk_errors.JudgeError)
    assert not issubclass(errors.ProviderError, sdk_errors.JudgeError)
