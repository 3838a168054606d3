"""The HTML report shows a run's budget: spend against each limit, and why it stopped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_health.connectors.protocol import TokenUsage
from agent_health.engine import budget, reporters
from agent_health.engine.report import RunReport
from agent_health.sdk.results import TestResult

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import browser  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    try:
        with browser.chromium() as launched:
            yield launched
    except browser.BrowserMissing as err:
        pytest.fail(str(err), pytrace=False)


def _result(name: str, status: str, **kw: Any) -> TestResult:
    return TestResult(
        id=f"t.py::{name}", name=name, title=name, file="t.py", line=1, status=status,  # type: ignore[arg-type]
        run_id=name, **kw,
    )  # fmt: skip


def test_the_summary_shows_spend_and_the_budget_that_stopped_the_run(
    chromium: Any, tmp_path: Path
) -> None:
    meter = budget.Meter(budget.Limits(max_tokens=300, max_cost_usd=2.0), started=0.0)
    usage = TokenUsage(prompt=300, completion=60, total=360)
    ran = _result(
        "ran", "passed", metrics={"total_tokens": 360, "cost_usd": 0.5}, token_usage=usage
    )
    meter.add_result(ran)
    meter.check(now=3.0)
    meter.skipped = 1
    report = RunReport.build(
        [ran, _result("later", "skipped", skip_reason="budget")],
        duration_ms=3000.0,
        budget=meter.report(now=3.0),
    )
    url = reporters.write("html", tmp_path, report).as_uri()
    with browser.watched_page(chromium) as seen:
        seen.page.goto(url)
        seen.page.wait_for_selector("body[data-ready='1']", state="attached")
        summary = seen.page.inner_text("#summary")
        assert "stopped\nbudget" in summary
        assert "360 of 300 tokens" in summary
        assert "of $2.00" in summary
        assert "Stopped by the budget: --max-tokens 300 reached: 360 tokens spent" in summary
        assert "1 tests skipped (reason budget)" in summary
        assert seen.outside(url) == []
        assert seen.errors == []
