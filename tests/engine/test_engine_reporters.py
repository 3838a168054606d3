"""Terminal progress (TTY and plain), the summary, and the JSON report shape."""

from __future__ import annotations

import asyncio
import io
import re
import xml.etree.ElementTree as ET
from typing import Any

from agent_health.engine.reporters import junit, terminal
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import Signal, TestResult
from rich.console import Console
from support.helpers import run_cli_sync


def _result(name: str, status: Any, **kw: Any) -> TestResult:
    if status == "errored":
        kw.setdefault("cause", "agent")
    return TestResult(
        id=f"f.py::{name}",
        name=name,
        title=name,
        file="f.py",
        line=1,
        status=status,
        run_id="r",
        **kw,
    )


RESULTS = [
    _result("ok", "passed", score=1.0),
    _result(
        "bad",
        "failed",
        score=0.0,
        signals=(
            Signal(
                kind="deterministic",
                role="gate",
                name="to_equal(2)",
                passed=False,
                evidence={"expected": 2, "actual": 1},
                location="f.py:9",
            ),
        ),
    ),
    _result("boom", "errored", error="cannot connect to agent at http://x (is it running?)"),
]


def test_plain_progress_prints_one_line_per_test() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with terminal.LiveProgress(console, 3) as progress:
        for r in RESULTS:
            progress.on_test_end(r)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("✓ passed  f.py › ok")
    assert lines[1].startswith("✗ failed  f.py › bad")
    assert lines[2].endswith("— agent error: cannot connect to agent at http://x (is it running?)")


class _Flushes(io.StringIO):
    """A stream that counts its flushes and what was written since the last."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.unflushed = 0

    def write(self, text: str) -> int:
        self.unflushed += len(text)
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1
        self.unflushed = 0
        super().flush()


async def test_plain_lines_of_tests_ending_together_go_out_together() -> None:
    # Flushed one by one, each line was a write to the file, where the event loop let go of
    # the interpreter and waited for the run's other threads to give it back.
    out = _Flushes()
    console = Console(file=out, force_terminal=False, width=200)
    with terminal.LiveProgress(console, 200) as progress:
        for n in range(200):
            progress.on_test_end(RESULTS[n % 3])
        assert out.getvalue().count("\n") == 200
        # The first line at once, the others together once their time comes (200 lines
        # would have to take 20 s to be flushed more than 200 times here, one by one).
        assert 1 <= out.flushes < 10
        assert out.unflushed > 0
        # No test need end for the last lines to go out: they are flushed in FLUSH_EVERY_S.
        await asyncio.sleep(terminal.FLUSH_EVERY_S * 2)  # its deadline after the flush's
        assert out.unflushed == 0
        await asyncio.sleep(terminal.FLUSH_EVERY_S * 1.5)  # a quiet spell since that flush
        progress.on_test_end(RESULTS[0])  # so this line goes out at once
        assert out.unflushed == 0
        progress.on_test_end(RESULTS[0])
    assert out.unflushed == 0  # the end of the run flushes what waits


def test_tty_progress_shows_a_bar_and_failures() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with terminal.LiveProgress(console, 3) as progress:
        assert progress.live
        for r in RESULTS:
            progress.on_test_end(r)
    text = out.getvalue()
    assert "running" in text
    assert "3/3" in text
    assert "f.py › bad" in text  # failures are printed above the bar


def test_summary_lists_reasons_and_totals() -> None:
    out = io.StringIO()
    report = RunReport.build(RESULTS, duration_ms=1234.0)
    terminal.summary(Console(file=out, width=200), report, hints=["a hint"])
    text = out.getvalue()
    assert "to_equal(2) (f.py:9)" in text
    assert '"expected": 2, "actual": 1' in text
    assert "error: agent error: cannot connect" in text
    assert "hint: a hint" in text
    # The agent's own error counts against it: 1 / (1 passed + 1 failed + 1 errored[agent]).
    assert "1 passed, 1 failed, 1 errored (1 agent), 0 skipped — pass rate 33%" in text
    assert "✗ failed" in text
    assert "! errored (agent)" in text


def test_json_report_shape() -> None:
    report = RunReport.build(RESULTS, duration_ms=10.0).model_dump(mode="json")
    assert report["version"] == 2
    assert list(report["summary"])[:9] == [
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
    assert report["summary"]["pass_rate"] == round(1 / 3, 6)  # the agent's error counts
    assert report["summary"]["errored_by_cause"]["agent"] == 1
    assert report["tests"][2]["cause"] == "agent"
    assert report["summary"]["score"] == 0.5  # errored has no score, never a zero
    first = report["tests"][0]
    for key in (
        "id",
        "name",
        "file",
        "labels",
        "repeat",
        "status",
        "score",
        "error",
        "run_id",
        "prompt",
        "duration_ms",
        "signals",
        "metrics",
        "insights",
    ):
        assert key in first


def test_matcher_misuse_errors_the_test_with_one_line(write_suite: Any) -> None:
    suite = write_suite(
        **{
            "test_misuse.py": """
            from agent_health import test

            @test("misuse")
            async def misuse(expect):
                expect("just a string").to_have_called_tool("search_logs")
            """
        }
    )
    run = run_cli_sync(suite)
    entry = run.by_name("misuse")
    assert entry["status"] == "errored"
    assert entry["error"] == (
        "expect(...).to_have_called_tool needs a RunResult (what agent.run() returned), got str"
    )
    assert run.code == 3


def test_junit_names_the_cause_of_each_error() -> None:
    root = ET.fromstring(junit.render(RunReport.build(RESULTS, duration_ms=1.0)))
    case = next(c for c in root.iter("testcase") if c.get("name") == "boom")
    error = case.find("error")
    assert error is not None
    assert error.get("type") == "AgentHealthError.agent"
    assert (error.get("message") or "").startswith("agent error: cannot connect to agent")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["cause"] == "agent"


def _summary_at(width: int, results: list[TestResult]) -> list[str]:
    out = io.StringIO()
    terminal.summary(Console(file=out, width=width), RunReport.build(results, duration_ms=1.0))
    return out.getvalue().splitlines()


def test_the_label_table_fits_80_columns_and_keeps_labels_apart() -> None:
    labels = [
        "difficulty:extremely-hard-multi-step-easy",
        "difficulty:extremely-hard-multi-step-hard",
        "difficulty:extremely-hard-multi-step-medium",
    ]
    results = [
        _result(f"t{i}", status, score=score, labels=(label,))
        for i, (label, status, score) in enumerate(
            zip(labels, ("passed", "failed", "skipped"), (1.0, 0.0, None), strict=True)
        )
    ]
    lines = _summary_at(80, results)
    start = [line.strip() for line in lines].index("by label")
    table = lines[start : start + 6]
    assert max(len(line) for line in table) <= 80, table
    rows = [line for line in table if line.startswith("diff")]
    assert len(rows) == 3  # one line each
    shown = [row.split()[0] for row in rows]
    assert len(set(shown)) == 3, shown  # cut, and still three different labels
    assert all(s.endswith(("easy", "hard", "medium")) for s in shown), shown


def test_the_label_table_says_what_its_score_is_over() -> None:
    # 1 of 9 passed, 8 errored (the agent's fault): pass rate 11%, and the one score is 1.00
    results = [_result("ok", "passed", score=1.0, labels=("smoke",))] + [
        _result(f"e{i}", "errored", error="HTTP 500", labels=("smoke",)) for i in range(8)
    ]
    text = "\n".join(_summary_at(80, results))
    (row,) = [line for line in text.splitlines() if line.startswith("smoke")]
    assert re.search(r" 11% .* 1\.00( \[[^]]*\])? +1/9$", row), row
    assert "score: the mean over the scored results only" in text
    assert "score 1.00 [0.21, 1.00] (over the 1 scored of 9 results)" in text


def test_a_single_runs_progress_line_makes_no_conversation_summary(monkeypatch: Any) -> None:
    """A test that ran the agent once has no turns: its line asks for no conversation
    summary (an entry made for it each test: issue #40); a conversation's line has it."""
    from agent_health.engine import reports

    asked: list[Any] = []
    summary = reports.conversation_summary

    def counted(entry: Any) -> str:
        asked.append(entry)
        return summary(entry)

    monkeypatch.setattr(reports, "conversation_summary", counted)
    line = terminal._line(RESULTS[0])
    assert asked == []
    assert line.endswith("(0 ms)")
