"""Reporters that read at a glance: one repeat label everywhere, failures once, honest JUnit.

Real runs of small suites (no agent needed: the bodies check values and read ``test_info``),
through the CLI, as a user sees them in a CI log (the console is not a terminal).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine.reporters import junit, terminal
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import Signal, TestResult
from rich.console import Console

SUITE = {
    "test_mixed.py": """
    from agent_health import test

    @test("steady")
    async def steady(expect):
        expect(2).to_equal(2)

    @test("flaky")
    async def flaky(expect, test_info):
        expect(test_info.repeat % 2).to_equal(0)

    @test("always wrong")
    async def wrong(expect):
        expect(1).to_equal(2)

    @test("breaks on the last try")
    async def breaks(test_info):
        if test_info.repeat == 2:
            raise RuntimeError("the fixture went away")

    @test.skip("not yet", reason="needs agent v2")
    async def later(expect):
        expect(1).to_equal(1)
    """
}


def _run(suite: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["run", str(suite), "--no-ledger", *args])
    return code, capsys.readouterr().out


def test_one_repeat_label_everywhere_and_failures_once(
    write_suite: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    suite = write_suite(**SUITE)
    code, out = _run(suite, capsys, "--repeat", "3", "-j", "1")
    assert code == 1
    # the live list: every repeat labelled [i/3], the first one too
    for title in ("steady", "flaky", "always wrong"):
        for i in (1, 2, 3):
            assert re.search(rf"› {title} \[{i}/3\] \(\d+ ms\)", out), (title, i, out)
    # no other spelling of a repeat anywhere
    assert "[repeat" not in out
    assert not re.search(r"\[r\d\]", out)
    # failure details once per test, naming the failing repeats
    assert out.count("FAILED test_mixed.py::always wrong") == 1
    assert "FAILED test_mixed.py::always wrong — failed in all 3 repeats" in out
    assert out.count('✗ to_equal(2) (test_mixed.py:14): {"expected": 2, "actual": 1}') == 1
    assert "FAILED test_mixed.py::flaky — failed in [2/3]" in out
    assert "ERRORED test_mixed.py::breaks on the last try — errored in [3/3]" in out
    assert out.count("\n  error: test error: RuntimeError: the fixture went away (at") == 1
    # the skipped test counted once, not once per repeat
    assert "7 passed, 4 failed, 1 errored (1 test), 1 skipped" in out
    # the legend says what the numbers mean
    [legend] = [line for line in out.splitlines() if line.startswith("legend:")]
    assert "pass rate = passed / (passed + failed + errored by the agent + flaky)" in legend
    assert "score = mean test score over the scored tests only, 0-1" in legend
    assert "pass@3 = tests passing in at least 1 of 3 repeats" in legend
    assert "pass^3 = tests passing in all 3 repeats" in legend


def test_a_skipped_test_is_one_result_whatever_the_repeats(
    write_suite: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    suite = write_suite(**SUITE)
    report = tmp_path / "r.json"
    junit_file = tmp_path / "j.xml"
    _, out = _run(
        suite,
        capsys,
        "--repeat",
        "4",
        "--reporter",
        f"json:{report}",
        "--reporter",
        f"junit:{junit_file}",
    )
    assert ", 1 skipped" in out
    import json

    data = json.loads(report.read_text())
    skipped = [t for t in data["tests"] if t["status"] == "skipped"]
    assert [(t["name"], t["repeat"]) for t in skipped] == [("not yet", 0)]
    assert data["summary"]["skipped"] == 1
    assert data["summary"]["total"] == 4 * 4 + 1
    root = ET.parse(junit_file).getroot()
    assert root.get("skipped") == "1"
    assert [c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None] == [
        "not yet [1/4]"
    ]


def test_junit_counts_load_errors_and_names_repeats(
    write_suite: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    suite = write_suite(
        **SUITE,
        **{
            "test_broken.py": """
            from agent_health import test
            this is not python
            """
        },
    )
    out = tmp_path / "junit.xml"
    code, _ = _run(suite, capsys, "--repeat", "2", "--reporter", f"junit:{out}")
    assert code == 2  # a load error
    root = ET.parse(out).getroot()
    assert root.get("tests") == str(4 * 2 + 1 + 1)  # 4 tests x 2, the skipped once, the file
    assert root.get("errors") == "1"  # the file ("breaks on the last try" errs only on a 3rd)
    [broken] = [s for s in root.iter("testsuite") if s.get("name") == "test_broken.py"]
    assert (broken.get("tests"), broken.get("errors")) == ("1", "1")
    [case] = list(broken.iter("testcase"))
    assert case.get("name") == "load error"
    error = case.find("error")
    assert error is not None
    assert (error.get("message") or "").startswith("test_broken.py:3: NameError")
    names = [c.get("name") for c in root.iter("testcase")]
    assert {"steady [1/2]", "steady [2/2]", "flaky [1/2]", "flaky [2/2]"} <= set(names)


def test_junit_shows_metric_values() -> None:
    result = TestResult(
        id="t.py::m",
        name="m",
        title="m",
        file="t.py",
        line=1,
        status="passed",
        run_id="r",
        ledger_cell="t.py-m.0123abcd.r0",
        metrics={"total_tokens": 42, "cost_usd": 0.5, "tool_histogram": {"search_logs": 2}},
        signals=(Signal(kind="judge", role="observe", name="is concise", passed=True, score=0.75),),
    )
    root = ET.fromstring(junit.render(RunReport.build([result], duration_ms=1.0)))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["metric.total_tokens"] == "42"
    assert props["metric.cost_usd"] == "0.5"
    assert props["metric.tool_histogram"] == '{"search_logs": 2}'
    assert props["ledger_cell"] == "t.py-m.0123abcd.r0"
    out = root.find(".//system-out")
    assert out is not None
    lines = (out.text or "").splitlines()
    assert lines[0] == "[observe] is concise: pass (score 0.75)"
    assert "[metric] total_tokens = 42" in lines
    assert not any(line.endswith(": skip") for line in lines)


def test_differing_reasons_are_listed_with_their_repeats() -> None:
    def failed(repeat: int, actual: int) -> TestResult:
        return TestResult(
            id="t.py::x",
            name="x",
            title="x",
            file="t.py",
            line=1,
            repeat=repeat,
            status="failed",
            run_id=f"r{repeat}",
            signals=(
                Signal(
                    kind="deterministic",
                    role="gate",
                    name="to_equal(1)",
                    passed=False,
                    evidence={"expected": 1, "actual": actual},
                ),
            ),
        )

    report = RunReport.build([failed(0, 2), failed(1, 2), failed(2, 3)], duration_ms=1, repeats=3)
    console = Console(width=200, record=True)
    terminal.summary(console, report)
    text = console.export_text()
    assert text.count("FAILED t.py::x") == 1
    assert '✗ to_equal(1): {"expected": 1, "actual": 2} [1/3] [2/3]' in text
    assert '✗ to_equal(1): {"expected": 1, "actual": 3} [3/3]' in text
