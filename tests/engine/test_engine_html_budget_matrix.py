"""The HTML report shows a run's budget (spend against each limit, and why it stopped) and an
agent matrix (the tests side by side, each pair compared)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import browser
import pytest
from agent_health.connectors.protocol import TokenUsage
from agent_health.engine import budget, reporters
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import TestResult

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow


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


def test_an_agent_matrix_shows_the_tests_side_by_side(chromium: Any, tmp_path: Path) -> None:
    results = [
        _result("rca", "passed", agent="good", score=1.0),
        _result("rca", "failed", agent="faulty", score=0.5),
        _result("cheap", "passed", agent="good", score=1.0),
        _result("cheap", "passed", agent="faulty", score=1.0),
    ]
    report = RunReport.build(results, duration_ms=10.0)
    url = reporters.write("html", tmp_path, report).as_uri()
    with browser.watched_page(chromium) as seen:
        page = seen.page
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", state="attached")
        table = page.locator(".matrix-table")
        assert table.locator("th").all_inner_texts() == ["test", "good", "faulty"]
        rows = table.locator("tbody tr").all_inner_texts()
        assert rows[0].split("\t") == ["rca", "✓ 1/1 · 1.00", "✗ 0/1 · 0.50"]
        totals = rows[-1].split("\t")
        assert totals[0] == "pass rate · score"
        # each agent's totals with their 95% intervals (Wilson; the score's bootstrap)
        assert re.fullmatch(r"100% \[\d+(\.\d)?%–100%\] · 1\.00 \[0\.\d\d–1\.00\]", totals[1])
        assert re.fullmatch(r"50% \[\d+(\.\d)?%–\d+(\.\d)?%\] · 0\.75 \[0\.\d\d–1\.00\]", totals[2])
        pair = page.locator(".pairs li").inner_text()
        assert pair.startswith(
            "good → faulty: pass rate -50.0 pts over 2 tests (1 worse, 0 better)"
        )
        # one entry per (test, agent) in the list; the inspector names the agent
        assert page.locator("#test-list .test-row").count() == 4
        page.click("#test-list .test-row >> nth=1")
        assert page.locator("#inspector h2").inner_text() == "rca [faulty]"
        assert "agent faulty" in page.locator("#inspector .facts").inner_text()
        assert seen.outside(url) == []
        assert seen.errors == []
