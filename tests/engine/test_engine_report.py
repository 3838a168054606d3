"""Run-level aggregates of the JSON report, and the terminal summary that shows them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from agent_health.connectors.protocol import TokenUsage
from agent_health.engine.reporters import json_file, terminal
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import TestResult
from rich.console import Console


def tr(title: str, status: str, repeat: int = 0, **kw: Any) -> TestResult:
    fields: dict[str, Any] = {
        "id": f"test_a.py::{title}",
        "name": title,
        "title": title,
        "file": "test_a.py",
        "line": 1,
        "status": status,
        "repeat": repeat,
        "run_id": f"{title}-{repeat}",
        "score": {"passed": 1.0, "failed": 0.0}.get(status),
        "cause": "infra" if status == "errored" else None,  # left out of the pass rate
        **kw,
    }
    return TestResult(**fields)


def metrics(cost: float | None, tokens: int = 10) -> dict[str, Any]:
    return {"total_tokens": tokens, "cost_usd": cost, "tool_calls": 1, "redundant_tool_calls": 2}


def test_summary_keeps_the_design_shape_and_adds_aggregates() -> None:
    results = [
        tr("a", "passed", labels=("category:RCA", "smoke"), metrics=metrics(0.25)),
        tr("b", "failed", labels=("category:RCA",), metrics=metrics(0.5)),
        tr("c", "errored", labels=("category:RCA",), error="connector down"),
        tr("d", "skipped", labels=("smoke",)),
        tr("e", "passed", metrics=metrics(None), token_usage=TokenUsage(prompt=7, completion=3)),
    ]
    report = RunReport.build(results, duration_ms=12.0)
    data = json.loads(report.model_dump_json())
    assert list(data) == ["version", "summary", "provenance", "tests", "matrix"]
    assert list(data["summary"])[:9] == [
        "total",
        "passed",
        "failed",
        "errored",
        "skipped",
        "pass_rate",
        "score",
        "duration_ms",
        "tokens",
    ]
    s = data["summary"]
    assert s["pass_rate"] == round(2 / 3, 6)  # errored and skipped excluded
    assert s["score"] == round(2 / 3, 6)
    assert (s["tokens"], s["input_tokens"], s["output_tokens"]) == (10, 7, 3)
    assert s["cost_usd"] == 0.75
    assert s["unpriced"] == 1  # e ran without a price
    assert s["labels"] == {
        "category:RCA": {
            "passed": 1,
            "failed": 1,
            "errored": 1,
            "skipped": 0,
            "flaky": 0,
            "errored_by_agent": 0,
            "pass_rate": 0.5,
            "score": 0.5,
            "scored": 2,  # the errored test has no score: 0.5 is the mean of two
            "pass_rate_interval": {
                "low": 0.094531,  # Wilson, 1 of 2 (docs/statistics.md)
                "high": 0.905469,
                "method": "wilson",
                "n": 2,
                "effective_n": None,
                "resamples": None,
            },
            "score_interval": {
                "low": 0.0,  # two tests, scores 1 and 0: resamples give 0, 0.5 or 1
                "high": 1.0,
                "method": "bootstrap",
                "n": 2,
                "effective_n": None,
                "resamples": 1000,
            },
        },
        "smoke": {
            "passed": 1,
            "failed": 0,
            "errored": 0,
            "skipped": 1,
            "flaky": 0,
            "errored_by_agent": 0,
            "pass_rate": 1.0,
            "score": 1.0,
            "scored": 1,
            "pass_rate_interval": {
                "low": 0.206549,  # Wilson, 1 of 1
                "high": 1.0,
                "method": "wilson",
                "n": 1,
                "effective_n": None,
                "resamples": None,
            },
            "score_interval": {  # one test: nothing to resample, Wilson of 1 of 1
                "low": 0.206549,
                "high": 1.0,
                "method": "wilson",
                "n": 1,
                "effective_n": None,
                "resamples": None,
            },
        },
    }
    assert "pass_at_k" not in s or s["pass_at_k"] is None
    assert s["errored_by_cause"] == {"agent": 0, "judge": 0, "test": 0, "infra": 1}


def test_errors_the_agent_caused_count_against_it_and_others_are_left_out() -> None:
    # The attack of issue 13: one pass and three self-inflicted errors used to score 100%.
    results = [
        tr("honest", "passed", labels=("rca",)),
        tr("answers 500", "errored", labels=("rca",), cause="agent", error="HTTP 500"),
        tr("malformed JSON", "errored", cause="agent", error="malformed JSON"),
        tr("hangs", "errored", cause="agent", error="timed out"),
        tr("judge down", "errored", cause="judge", error="judge errored"),
        tr("fixture bug", "errored", cause="test", error="KeyError"),
        tr("evicted", "errored", cause="infra", error="evicted"),
        tr("failed", "failed"),
    ]
    s = RunReport.build(results, duration_ms=1.0).summary
    assert s.pass_rate == round(1 / 5, 6)  # 1 / (1 passed + 1 failed + 3 errored[agent])
    assert s.errored_by_cause == {"agent": 3, "judge": 1, "test": 1, "infra": 1}
    assert s.labels["rca"].pass_rate == 0.5
    assert s.labels["rca"].errored_by_agent == 1
    only_errors = RunReport.build([results[1]], duration_ms=1.0).summary
    assert only_errors.pass_rate == 0.0  # not n/a: the agent was asked and did not answer
    assert RunReport.build([results[4]], duration_ms=1.0).summary.pass_rate is None


def test_an_agent_error_in_a_repeat_is_not_a_pass_for_pass_at_k() -> None:
    results = [
        tr("t", "passed", 0),
        tr("t", "errored", 1, cause="agent", error="HTTP 500"),
        tr("u", "errored", 0, cause="agent", error="HTTP 500"),
        tr("u", "errored", 1, cause="infra", error="evicted"),
    ]
    s = RunReport.build(results, duration_ms=1.0, repeats=2).summary
    assert s.per_test["test_a.py::t"].pass_hat_k == 0.0  # one repeat the agent errored
    assert s.per_test["test_a.py::t"].pass_at_k == 1.0
    # u's infra repeat is left out: one decided repeat is too few for pass@2 (n >= k)
    assert s.per_test["test_a.py::u"].pass_at_k is None
    assert (s.pass_at_k, s.pass_hat_k) == (1.0, 0.0)  # over t alone
    assert s.mixed == ["t"]
    assert s.flaky == []  # flaky is a pass on a retry; there were no retries


def test_no_prices_means_no_cost_not_zero() -> None:
    report = RunReport.build([tr("a", "passed", metrics=metrics(None))], duration_ms=1.0)
    assert report.summary.cost_usd is None
    assert report.summary.unpriced == 1
    assert RunReport.build([], duration_ms=0).summary.cost_usd is None


def test_repeats_give_pass_at_k_per_test_and_overall() -> None:
    results = [
        tr("stable", "passed", 0),
        tr("stable", "passed", 1),
        tr("stable", "passed", 2),
        tr("flaky", "passed", 0),
        tr("flaky", "failed", 1),
        tr("flaky", "errored", 2),
        tr("broken", "failed", 0),
        tr("broken", "failed", 1),
        tr("broken", "failed", 2),
        tr("down", "errored", 0),
        tr("down", "errored", 1),
        tr("down", "errored", 2),
    ]
    s = RunReport.build(results, duration_ms=1.0, repeats=3).summary
    # pass@3 needs 3 decided repeats: flaky (one errored by the infrastructure) and down are
    # left out, so stable and broken decide it.
    assert s.pass_at_k == 0.5
    assert s.pass_hat_k == 0.5
    # the test titled "flaky" passed in some repeats: mixed, never counted as flaky
    assert (s.mixed, s.flaky, s.flaky_count) == (["flaky"], [], 0)
    flaky = s.per_test["test_a.py::flaky"]
    assert (flaky.runs, flaky.passed, flaky.failed, flaky.errored) == (3, 1, 1, 1)
    assert (flaky.pass_at_k, flaky.pass_hat_k) == (None, None)
    down = s.per_test["test_a.py::down"]
    assert (down.pass_at_k, down.pass_hat_k) == (None, None)
    (three,) = s.pass_at
    assert (three.k, three.tests, three.pass_at_k, three.pass_hat_k) == (3, 2, 0.5, 0.5)
    # pass@1 and pass@2 count flaky too: the unbiased estimators over its 2 decided repeats.
    one, two = RunReport.build(results, duration_ms=1.0, repeats=3, pass_at=[2, 1]).summary.pass_at
    assert (one.k, one.tests, one.pass_at_k) == (1, 3, round((1 + 0.5 + 0) / 3, 6))
    assert (two.k, two.tests, two.pass_at_k, two.pass_hat_k) == (2, 3, round(2 / 3, 6), 0.333333)


def test_terminal_summary_shows_metrics_labels_insights_and_cost() -> None:
    results = [
        tr(
            "a",
            "passed",
            labels=("smoke",),
            metrics={**metrics(0.003, 123), "retries": 1},
            token_usage=TokenUsage(prompt=100, completion=23),
            insights={"summary": "fine", "why": "tools worked", "recommendations": ["cache"]},
        ),
        tr("b", "failed", labels=("smoke",), insights={"error": "insights crashed"}),
    ]
    console = Console(record=True, width=160)
    terminal.summary(console, RunReport.build(results, duration_ms=5.0))
    text = console.export_text()
    assert "$0.003000" in text
    assert "2 redundant, 1 retried" in text
    assert "insights test_a.py::a" in text
    assert "why: tools worked" in text
    assert "→ cache" in text
    assert "insights error: insights crashed" in text
    assert "by label" in text
    assert "smoke" in text
    assert "123 tokens, $0.003000, " in text  # b never ran the agent: not counted as unpriced
    assert "1 tests: cache" in text


def test_recommendations_roll_up_across_the_suite() -> None:
    tip = {"summary": "s", "recommendations": ["retry search_logs", "cache"]}
    results = [
        tr("a", "passed", insights=tip),
        tr("a", "passed", 1, insights=tip),  # the same test twice counts once
        tr("b", "failed", insights={"summary": "s", "recommendations": ["retry search_logs"]}),
        tr("c", "failed", insights={"error": "boom"}),
    ]
    rollup = RunReport.build(results, duration_ms=1.0, repeats=2).summary.recommendations
    assert [(r.text, r.tests) for r in rollup] == [("retry search_logs", 2), ("cache", 1)]


def test_metric_signals_in_the_report_are_the_metrics_as_observe_signals(tmp_path: Path) -> None:
    """The report writes each derived metric as a signal dict without making a Signal model
    per metric; the dicts are what metrics.metric_signals' models would dump. They are added
    as the report is written, not held by each entry in memory, and a report read back and
    written again holds each once."""
    from agent_health.sdk.results import Signal
    from agent_health.traces import metrics

    derived = {"total_tokens": 7, "tool_calls": 2, "cost_usd": None, "not_a_metric": 1}
    gate = Signal(kind="deterministic", role="gate", name="to_equal", passed=True, score=1.0)
    result = TestResult(
        id="t.py::a", name="a", title="a", file="t.py", line=1, status="passed", run_id="r",
        signals=(gate,), metrics=derived,
    )  # fmt: skip
    report = RunReport.build([result], duration_ms=1.0)
    assert [s["name"] for s in report.tests[0]["signals"]] == ["to_equal"]  # in memory
    [entry] = report.model_dump(mode="json")["tests"]
    fields = ("kind", "role", "name", "passed", "score", "weight", "evidence", "reasoning")
    expected = [gate, *metrics.metric_signals(derived)]
    assert [{k: s[k] for k in fields} for s in entry["signals"]] == [
        {k: getattr(s, k) for k in fields} for s in expected
    ]
    assert {s["name"] for s in entry["signals"]} == {
        "to_equal",
        "total_tokens",
        "tool_calls",
        "cost_usd",
    }
    json_file.write(tmp_path / "report.json", report)
    again = json_file.read(tmp_path / "report.json")
    assert again.model_dump(mode="json")["tests"] == [entry]


def test_the_json_report_is_written_a_test_at_a_time_as_pydantic_would_write_it_whole(
    tmp_path: Path,
) -> None:
    """json_file.write streams the entries; the file is byte for byte model_dump_json's."""
    from agent_health.sdk.results import Signal

    odd = Signal(
        kind="deterministic", role="gate", name="to_equal('é')", passed=False, score=0.0,
        evidence={"expected": "é\nline two", "ratio": float("nan"), "nested": [{"a": []}]},
    )  # fmt: skip
    result = TestResult(
        id="t.py::ü", name="ü", title="ü", file="t.py", line=1, status="failed", run_id="r",
        signals=(odd,), metrics={"total_tokens": 3, "latency_ms": 1.5},
    )  # fmt: skip
    for report in (
        RunReport.build([], duration_ms=0.0),
        RunReport.build([result, result.model_copy(update={"repeat": 1})], duration_ms=2.0),
    ):
        json_file.write(tmp_path / "report.json", report)
        assert (tmp_path / "report.json").read_text() == report.model_dump_json(indent=2) + "\n"
    # An entry that cannot be written as JSON: an error, and no half-written file left.
    broken = RunReport.build([result], duration_ms=1.0)
    broken.tests[0]["insights"] = {"odd": object()}
    with pytest.raises(pydantic_core.PydanticSerializationError):
        json_file.write(tmp_path / "broken.json", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
