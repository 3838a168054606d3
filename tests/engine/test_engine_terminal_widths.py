"""The results table at 80 and at 140 columns: one line per row at either width.

At 80 columns (a CI log) each test is one row, its repeats folded (``2/3 passed ●○●``), its
title cut with an ellipsis, the details under its failure; at 140 each (test, repeat) is a row
with its tokens, cost and tools. ``tests/data/narrow/`` holds one run's JSON report and its
summary at both widths, as ``agent-health report`` prints them (its README says how they
were made).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent_health.engine.reporters import terminal, terminal_tables
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import Signal, TestResult
from rich.cells import cell_len
from rich.console import Console

DATA = Path(__file__).parents[1] / "data" / "narrow"
METRICS = {"total_tokens": 1234, "cost_usd": 0.000321, "tool_calls": 4, "redundant_tool_calls": 2}
TESTS = 8
REPEATS = 3


def _result(index: int, repeat: int) -> TestResult:
    title = f"test {index} diagnoses the payment outage from the error log and the status page"
    failed = index == 4 and repeat == 1  # one test fails in its second repeat
    errored = index == 6 and repeat == 2  # another errors in its third
    signals = (
        Signal(
            kind="deterministic",
            role="gate",
            name="to_contain('db-primary')",
            passed=not failed,
            evidence={"expected": "db-primary"},
            location="t.py:9",
        ),
    )
    return TestResult(
        id=f"t.py::{title}",
        name=title,
        title=title,
        file="t.py",
        line=1,
        repeat=repeat,
        status="failed" if failed else "errored" if errored else "passed",
        cause="agent" if errored else None,
        error="HTTP 500 from the agent" if errored else None,
        score=None if errored else 0.0 if failed else 1.0,
        run_id=f"r{index}-{repeat}",
        duration_ms=1500.0,
        signals=signals,
        metrics=METRICS,
    )


def _summary(width: int) -> list[str]:
    results = [_result(i, r) for r in range(REPEATS) for i in range(TESTS)]
    report = RunReport.build(results, duration_ms=4000.0, repeats=REPEATS)
    out = io.StringIO()
    terminal.summary(Console(file=out, width=width), report)
    return out.getvalue().splitlines()


def _table(lines: list[str]) -> list[str]:
    """The results table: its title, head and rule, then its rows (up to the first line that
    is blank or the key of the repeats' marks)."""
    assert lines[0].strip() == "agent-health results", lines[:3]
    end = next(i for i, line in enumerate(lines) if not line.strip() or "each repeat" in line)
    return lines[:end]


def test_at_80_columns_each_test_is_one_line_with_its_repeats_folded() -> None:
    lines = _summary(80)
    table = _table(lines)
    assert len(table) == 3 + TESTS, "\n".join(table)  # title, head, rule, a line per test
    assert all(cell_len(line) <= 80 for line in table), "\n".join(table)
    head = table[1].split()
    assert head == ["test", "result", "score", "mean", "time"]  # no tokens, cost, tools
    (failing,) = [row for row in table if row.startswith("test 4 ")]
    assert "2/3 passed ●○●" in failing
    assert "…" in failing  # the title is cut, never wrapped
    (errored,) = [row for row in table if row.startswith("test 6 ")]
    assert "2/3 passed ●●◌" in errored
    assert "each repeat in order: ● passed  ○ failed  ◌ errored" in lines
    # the details the table left out are under each failure, per failing repeat
    text = "\n".join(lines)
    assert "  details [2/3]: 1.50s, 1234 tokens, $0.000321, 4 tools, 2 redundant" in text
    assert "  details [3/3]: 1.50s, 1234 tokens, $0.000321, 4 tools, 2 redundant" in text


def test_at_140_columns_each_result_is_one_line_with_its_details() -> None:
    lines = _summary(140)
    table = _table(lines)
    assert len(table) == 3 + TESTS * REPEATS, "\n".join(table)
    assert all(cell_len(line) <= 140 for line in table), "\n".join(table)
    assert table[1].split() == [
        "status",
        "test",
        "score",
        "time",
        "tokens",
        "cost",
        "tools",
        "notes",
    ]
    (row,) = [r for r in table if "test 4 " in r and "[2/3]" in r]
    assert row.startswith("✗ failed")
    for detail in ("1234", "$0.000321", "2 redundant"):
        assert detail in row
    assert "details" not in "\n".join(lines)  # the table has them


def test_past_a_tables_worth_only_what_did_not_pass_is_a_row() -> None:
    many = terminal_tables.TABLE_LIMIT + 10
    results = [_result(i, 0) for i in range(many)]
    results[4] = results[4].model_copy(update={"status": "failed", "score": 0.0})
    report = RunReport.build(results, duration_ms=4000.0)
    out = io.StringIO()
    terminal.summary(Console(file=out, width=140), report)
    lines = out.getvalue().splitlines()
    table = _table(lines)
    # title, head, rule, the one failure, and how many passed results it leaves out
    assert len(table) == 5, "\n".join(table)
    assert table[3].startswith("✗ failed")
    assert table[4] == f"({many - 1} passed results not listed)"


def test_titles_cut_to_the_room_never_read_the_same() -> None:
    names = [
        "diagnoses the payment outage from the error log",
        "diagnoses the payment outage from the status page",
        "diagnoses the payment outage from the error log",  # the same test's next repeat
        "short",
    ]
    cut = terminal_tables.cut_titles(names, 24)
    assert cut[3] == "short"
    assert cut[0] == cut[2]  # one test's repeats alike
    assert cut[0] != cut[1]  # two tests apart
    assert all(cell_len(c) <= 24 for c in cut)
    assert all("…" in c for c in cut[:3])


def _report_at(columns: int, report: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "NO_COLOR")}
    env["COLUMNS"] = str(columns)
    done = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "report", str(report), "--reporter", "list"],
        cwd=report.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_one_run_at_80_and_140_columns_is_the_stored_output() -> None:
    """The run in tests/data/narrow/ renders as stored: at 80 columns a line per test, at
    140 a line per result (8 tests, 3 repeats)."""
    report = json.loads((DATA / "run.json").read_text())
    tests = {t["id"] for t in report["tests"]}
    for columns, rows in ((80, len(tests)), (140, len(report["tests"]))):
        shown = _report_at(columns, DATA / "run.json")
        assert shown == (DATA / f"summary-{columns}.txt").read_text(), columns
        table = _table(shown.splitlines())
        assert len(table) == 3 + rows, (columns, table)
        assert all(cell_len(line) <= columns for line in table), (columns, table)


def test_the_stored_run_is_what_its_suite_does_today(tmp_path: Path) -> None:
    """The stored report is of the suite beside it: run again (a copy, its config naming the
    bundled agent by its full path), the same tests end the same way in each repeat, and the
    80-column table has a line per test."""
    shutil.copy(DATA / "triage.test.py", tmp_path)
    config = (DATA / "agent-health.config.py").read_text()
    assert '"python", "../../../examples/agents/triage_agent.py"' in config
    agent = Path(__file__).parents[2] / "examples" / "agents" / "triage_agent.py"
    config = config.replace(
        '"python", "../../../examples/agents/triage_agent.py"',
        f"{str(sys.executable)!r}, {str(agent)!r}",
    )
    (tmp_path / "agent-health.config.py").write_text(config)
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_HEALTH_")}
    env["COLUMNS"] = "80"
    argv = ["run", "--repeat", "3", "--no-ledger", "--reporter", f"json:{out}"]
    done = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # a test failed

    def outcomes(report: dict[str, Any]) -> list[tuple[str, int, str]]:
        return sorted((t["id"], t["repeat"], t["status"]) for t in report["tests"])

    stored = json.loads((DATA / "run.json").read_text())
    assert outcomes(json.loads(out.read_text())) == outcomes(stored)
    table = _table(done.stdout[done.stdout.index("agent-health results") :].splitlines())
    assert len(table) == 3 + len({t["id"] for t in stored["tests"]})


def test_a_table_that_fits_is_laid_out_once_and_printed_as_laid_out(monkeypatch: Any) -> None:
    # Measuring a table to see that it fits and then printing it laid it out three times
    # (issue #40: about 4 M instructions a table); one that fits is laid out once, at its
    # natural width, which is how print lays it out: the same bytes, plain or styled.
    from rich.table import Table

    results = [
        TestResult(
            id="t.py::one",
            name="one",
            title="one",
            file="t.py",
            line=1,
            labels=("kind:smoke",),
            status="passed",
            score=1.0,
            run_id="r1",
            duration_ms=31.0,
            started_at=0.0,
        )
    ]
    report = RunReport.build(results, duration_ms=80.0)
    laid_out = 0
    calculate = Table._calculate_column_widths

    def counted(self: Table, *args: Any, **kwargs: Any) -> Any:
        nonlocal laid_out
        laid_out += 1
        return calculate(self, *args, **kwargs)

    monkeypatch.setattr(Table, "_calculate_column_widths", counted)
    for soft_wrap, terminal_codes in ((True, False), (False, True)):
        out, by_print = io.StringIO(), io.StringIO()
        made = {"file": out, "width": 80, "soft_wrap": soft_wrap, "force_terminal": terminal_codes}
        laid_out = 0
        terminal_tables.results(Console(**made), report.tests, 1, "agent-health results")
        terminal_tables.labels(Console(**made), report)
        assert laid_out == 2  # the results and the label table, once each
        # the same tables as print lays them out
        console = Console(**{**made, "file": by_print})
        console.print(
            terminal_tables._wide_table(
                "agent-health results",
                terminal_tables._wide_rows(report.tests, 1),
                ["status", "test", "score", "time"],
                ["t.py › one"],
            )
        )
        console.print(
            terminal_tables._label_table(
                report, ["kind:smoke"], ["passed", "failed"], ("pass rate", "score"), {}
            )
        )
        console.print(
            "[dim]score: the mean over the scored results only; errored and skipped tests "
            "have none[/]",
            highlight=False,
        )
        assert out.getvalue() == by_print.getvalue()
