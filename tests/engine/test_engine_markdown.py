"""The markdown summary (``--reporter markdown``) rendered from a report and what the history
adds: counts, pass rate with its interval, the baseline comparison, flaky tests, cost, the
tests that did not pass; safe for any test name, readable as raw text, appended to
``$GITHUB_STEP_SUMMARY``. (``test_cli_markdown.py`` runs it with a real history.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from agent_health.engine import reporters
from agent_health.engine.comparing import compare
from agent_health.engine.reporters import markdown
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import Signal, TestResult

HOSTILE = "a `tick`` | pipe <script>alert(1)</script> *bold* [link](x)"


def _result(name: str, status: Any, **kw: Any) -> TestResult:
    if status == "errored":
        kw.setdefault("cause", "agent")
    return TestResult(
        id=f"f.py::{name}", name=name, title=name, file="f.py", line=1, status=status,
        run_id="r", **kw,
    )  # fmt: skip


def _report(*results: TestResult) -> RunReport:
    return RunReport.build(list(results), duration_ms=83_000.0)


GATE = Signal(kind="deterministic", role="gate", name="to_match('db')", passed=False)


def test_counts_rate_and_the_tests_that_did_not_pass() -> None:
    report = _report(
        _result("ok", "passed", score=1.0),
        _result("bad", "failed", score=0.0, signals=(GATE,)),
        _result("boom", "errored", error="agent refused: HTTP 500"),
    )
    text = markdown.render(report)
    assert text.startswith("## agent-health: ❌ 2 of 3 results did not pass\n")
    s = report.summary
    assert s.pass_rate_interval is not None
    low, high = s.pass_rate_interval.low, s.pass_rate_interval.high
    assert f"**pass rate 33.3%** (95% CI {markdown._pct(low)}–{markdown._pct(high)})" in text
    assert "| passed | failed | errored | flaky | skipped |" in text
    assert "|      1 |      1 |       1 |     0 |       0 |" in text
    assert "errored by cause: agent 1" in text
    assert "took 1 min 23 s" in text
    assert "<details><summary>Tests that did not pass (2)</summary>" in text
    assert "- `f.py::bad` — failed: `✗ to_match('db')`" in text
    assert "- `f.py::boom` — errored (agent): `agent refused: HTTP 500`" in text
    # no history was asked: the summary names none and compares with nothing
    assert "### Against the baseline" not in text
    assert "### Flaky tests" not in text


def test_all_passed_is_said_first() -> None:
    text = markdown.render(_report(_result("ok", "passed"), _result("ok2", "passed")))
    assert text.startswith("## agent-health: ✅ all 2 passed\n")
    assert "<details>" not in text


def test_what_did_not_run_is_said_first() -> None:
    """As the terminal's last line: a file that did not load, tests that never started."""
    ok = _result("ok", "passed")
    broken = "test_b.py:2: SyntaxError: '(' was never closed"
    loaded = RunReport.build([ok], duration_ms=1.0, load_errors=[broken], not_loaded=["test_b.py"])
    text = markdown.render(loaded)
    assert text.startswith("## agent-health: ❌ 1 file not loaded; all 1 that ran passed\n")
    cut = RunReport.build([ok], duration_ms=1.0, interrupted=True, not_run=12)
    assert markdown.render(cut).startswith("## agent-health: ⏹ interrupted, 12 never started\n")


def test_a_tables_columns_line_up_as_raw_text() -> None:
    flaky = [
        markdown.FlakyTest(id="t.py::a long test name", title="x", flips=12, runs=40,
                           failure_rate=0.25, low=0.14, high=0.4, agent="triage"),
        markdown.FlakyTest(id="t.py::b", title="b", flips=2, runs=3, failure_rate=0.5,
                           low=0.1, high=0.9),
    ]  # fmt: skip
    text = markdown.render(_report(_result("ok", "passed")), markdown.Context(flaky=flaky))
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 2 + 3 + 2  # the counts' table, then the flaky tests' table
    assert len({len(line) for line in table[3:]}) == 1, table  # the flaky tests' table
    assert "| `t.py::a long test name` |    12 |   40 | 25% (14%–40%) | triage |" in text


def test_any_test_name_stays_literal() -> None:
    name = HOSTILE
    report = _report(_result(name, "failed", error=f"{name}\nsecond line"))
    text = markdown.render(report)
    (item,) = [line for line in text.splitlines() if line.startswith("- ")]
    # a code span fenced longer than any run of backticks in it: nothing inside is Markdown
    assert item.startswith("- ``` f.py::" + name + " ``` — failed: ")
    assert "\n" not in item
    outside = re.sub(r"(`+).*?\1", "", item)
    assert "<script>" not in outside
    assert "second line" in item  # the error on one line
    flaky = [markdown.FlakyTest(id=name, title=name, flips=2, runs=3, failure_rate=0.5,
                                low=0.1, high=0.9, agent="a|b")]  # fmt: skip
    text = markdown.render(report, markdown.Context(flaky=flaky))
    row = next(line for line in text.splitlines() if "alert" in line and line.startswith("| "))
    assert row.count(" | ") == 4  # every pipe in a cell is escaped: five cells still
    assert "a\\|b" in row


def _entries(statuses: dict[str, str]) -> dict[str, Any]:
    tests = [
        {"id": k, "name": k, "repeat": 0, "status": v, "score": None, "cause": None,
         "error": "agent refused" if v == "errored" else None, "content_hash": "h"}
        for k, v in statuses.items()
    ]  # fmt: skip
    passed = sum(v == "passed" for v in statuses.values())
    summary = {"total": len(tests), "passed": passed, "pass_rate": passed / len(tests)}
    return {"version": 2, "summary": summary, "tests": tests}


def test_the_comparison_with_a_baseline_and_the_gates_word() -> None:
    base = _entries({"t::a": "passed", "t::b": "passed", "t::c": "failed"})
    new = _entries({"t::a": "failed", "t::b": "errored", "t::c": "passed"})
    found = compare.compare(base, new, base_file="history", new_file="this run")
    assert found.regressed
    report = _report(_result("a", "failed"))
    told = markdown.Context(
        baseline="last-green = run abc of triage (2025-01-01 12:00 UTC, pass rate 67%)",
        comparison=found,
        gating=True,
        history=".agent-health/history.db",
    )
    text = markdown.render(report, told)
    assert "### Against the baseline" in text
    assert "Baseline: last-green = run abc of triage (2025-01-01 12:00 UTC" in text
    assert "pass rate 66.7% → 33.3% (-33.3 pts)" in text
    assert "**Newly failing (2)**" in text
    assert "- `t::a` — passed → failed" in text
    assert "- `t::b` — passed → errored: `agent refused`" in text
    assert "**Newly passing (1)**" in text
    # paired over the two tests decided in both runs (b's error is not the agent's, here)
    assert "- pass rate +0.0 pts over 2 tests: not distinguishable from noise" in text
    assert "**Gate: regression** — " in text
    assert "history .agent-health/history.db" in text
    # the same comparison for information (no --baseline): no gate
    text = markdown.render(report, markdown.Context(comparison=found))
    assert "**Gate" not in text
    assert "_For information: the run is not gated on it (`--baseline` gates)._" in text


def test_what_could_not_be_had_is_one_line_each() -> None:
    told = markdown.Context(
        comparison_note="No comparison with the history's last run: no run of agent 'x'",
        flaky_note="The history could not be read for flaky tests: locked",
    )
    text = markdown.render(_report(_result("ok", "passed")), told)
    assert "No comparison with the history's last run: no run of agent 'x'" in text
    assert "The history could not be read for flaky tests: locked" in text
    none = markdown.render(_report(_result("ok", "passed")), markdown.Context(flaky=[]))
    assert "None in the history: no test flipped over the last 50 runs" in none


def test_written_to_its_file_and_appended_to_the_step_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = tmp_path / "step_summary"
    step.write_text("earlier step\n")
    monkeypatch.setenv(markdown.STEP_SUMMARY, str(step))
    report = _report(_result("ok", "passed"))
    path = reporters.write("markdown", tmp_path / "out" / "summary.md", report)
    assert path == tmp_path / "out" / "summary.md"
    text = path.read_text()
    assert text == markdown.render(report)
    reporters.write("markdown", path, report)
    assert step.read_text() == "earlier step\n" + (text + "\n") * 2  # appended, never replaced
    # the step summary itself as PATH: written once, not twice
    step.write_text("")
    reporters.write("markdown", step, report)
    assert step.read_text() == text
    assert reporters.parse("markdown") == ("markdown", Path("agent-health-summary.md"))
