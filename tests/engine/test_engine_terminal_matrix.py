"""The terminal's agent matrix: each agent's totals carry their 95% intervals."""

from __future__ import annotations

import io
from typing import Any

from agent_health.engine.reporters import terminal_matrix
from agent_health.engine.reports.report import RunReport
from agent_health.engine.statistics import stats
from agent_health.sdk.results import TestResult
from rich.console import Console


def _result(name: str, status: str, agent: str, score: float) -> TestResult:
    fields: dict[str, Any] = {"status": status, "agent": agent, "score": score}
    return TestResult(
        id=f"t.py::{name}", name=name, title=name, file="t.py", line=1, run_id=name, **fields
    )


def test_each_agents_totals_carry_their_intervals() -> None:
    results = [
        _result(f"t{i}", "passed" if i < 3 or agent == "good" else "failed", agent, 1.0)
        for i in range(4)
        for agent in ("good", "faulty")
    ]
    report = RunReport.build(results, duration_ms=1.0)
    assert report.matrix is not None
    out = io.StringIO()
    terminal_matrix.show(Console(file=out, width=300, color_system=None), report.matrix)
    text = out.getvalue()
    good_low, _ = stats.wilson(4, 4)
    faulty_low, faulty_high = stats.wilson(3, 4)
    assert f"pass rate 100% [{good_low:.0%}, 100%], score 1.00 [" in text
    assert f"pass rate 75% [{faulty_low:.0%}, {faulty_high:.0%}], score 1.00 [" in text
