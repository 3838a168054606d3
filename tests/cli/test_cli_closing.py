"""The run's last line tells the truth about what did not run (#39 item 2).

Before, a syntax error in one test file printed a load error above the totals, and the run
ended on ``8 passed, 0 failed, 0 errored, 0 skipped — pass rate 100%`` (exit 2). Now the last
line begins with what did not run whenever the exit code is not 0 for a reason its counts do
not show (a file not loaded, an ``after_all`` hook that failed, tests ``-x`` left unstarted,
a report not written), and the JSON report (``summary.not_loaded``, ``summary.did_not_run``)
and JUnit (a ``not run`` suite) carry it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support import junit_support

PASSES = """
from agent_health import test

@test("passes")
async def passes(expect):
    expect(1).to_equal(1)
"""
BROKEN = """
from agent_health import test

@test("never declared"
"""
HOOK = """
from agent_health import test

@test.after_all
def tidy():
    raise RuntimeError("the tidy-up failed")

@test("passes too")
async def passes_too(expect):
    expect(1).to_equal(1)
"""
FAILS_FIRST = """
from agent_health import test

@test("fails")
async def fails(expect):
    expect(1).to_equal(2)

@test("never starts 1")
async def never_1(expect):
    expect(1).to_equal(1)

@test("never starts 2")
async def never_2(expect):
    expect(1).to_equal(1)
"""


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the --last-failed cache lives beside the run


def _run(
    suite: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, list[str], dict[str, Any], ET.Element]:
    """Run the suite with a JSON and a JUnit report: exit code, stdout's lines, both reports."""
    report, junit = suite / "out" / "r.json", suite / "out" / "r.xml"
    argv = ["run", str(suite), "--no-ledger", "-j", "1", *args]
    code = cli.main([*argv, "--reporter", f"json:{report}", "--reporter", f"junit:{junit}"])
    out = capsys.readouterr().out.splitlines()
    junit_support.check(junit)
    return code, out, json.loads(report.read_text()), ET.parse(junit).getroot()


def test_a_file_that_did_not_load_is_on_the_last_line_and_in_every_report(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_ok.py": PASSES, "test_broken.py": BROKEN})
    code, out, report, junit = _run(suite, capsys)
    assert code == 2
    assert out[-1].startswith("1 file not loaded; 1 passed, 0 failed, 0 errored, 0 skipped — ")
    summary = report["summary"]
    assert summary["not_loaded"] == ["test_broken.py"]
    assert summary["did_not_run"] == ["1 file not loaded"]
    (error,) = junit.iter("error")
    assert error.get("type") == "AgentHealthLoadError"
    assert error.get("message", "").startswith("test_broken.py:")


@pytest.mark.parametrize(
    ("files", "args", "code", "first"),
    [
        ({"test_ok.py": PASSES, "test_hook.py": HOOK}, (), 2, "1 after_all hook failed; "),
        ({"test_many.py": FAILS_FIRST}, ("-x",), 1, "stopped early, 2 never started; "),
    ],
    ids=["after_all", "max-failures"],
)
def test_what_did_not_run_opens_the_last_line(
    write_suite: Any,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    args: tuple[str, ...],
    code: int,
    first: str,
) -> None:
    suite = write_suite(**files)
    got, out, report, _ = _run(suite, capsys, *args)
    assert got == code
    assert out[-1].startswith(first), out[-3:]
    assert report["summary"]["did_not_run"] == [first.removesuffix("; ")]


def test_junit_carries_the_tests_that_never_started(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_many.py": FAILS_FIRST})
    _, _, _, junit = _run(suite, capsys, "-x")
    (suite_of_them,) = [s for s in junit.iter("testsuite") if s.get("name") == "not run"]
    (case,) = suite_of_them.iter("testcase")
    assert case.get("name") == "2 tests never started"
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("message", "").startswith(
        "stopped after 1 failed or errored test (--max-failures 1): stopped early, 2 never"
    )
    # the totals count it: 1 failed, 1 skipped (the tests that never started), of 2
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == ("2", "1", "1")


def test_a_report_that_could_not_be_written_is_on_the_last_line(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    # the folder is there when the paths are checked, and a file when the report is written
    swap = f"""
from pathlib import Path
from agent_health import test

@test("swaps the report folder for a file")
async def swap(expect):
    folder = Path({str(folder)!r})
    folder.rmdir()
    folder.write_text("now a file")
"""
    suite = write_suite(**{"test_swap.py": swap})
    code = cli.main(["run", str(suite), "--no-ledger", "--reporter", f"json:{folder}/r.json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "cannot write the json report" in captured.err
    last = captured.out.splitlines()[-1]
    assert last.startswith("1 report not written; 1 passed, 0 failed"), last


def test_a_run_where_everything_ran_ends_on_its_totals(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_ok.py": PASSES})
    code, out, report, junit = _run(suite, capsys)
    assert code == 0
    assert out[-1].startswith("1 passed, 0 failed, 0 errored, 0 skipped — pass rate 100%")
    assert report["summary"]["did_not_run"] == []
    assert report["summary"]["not_loaded"] == []
    assert not [s for s in junit.iter("testsuite") if s.get("name") == "not run"]


WOBBLY = """
from pathlib import Path
from agent_health import test

@test("wobbly")
async def wobbly(expect):
    said = (Path(__file__).parent / "outcome.txt").read_text()
    if said == "error":
        raise RuntimeError("the fixture data is gone")
    expect(said).to_equal("pass")
"""


def test_a_regression_from_the_baseline_is_on_the_last_line(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An errored test alone exits 3; ``--baseline`` makes it 1 (newly failing), and the last
    line says why."""
    suite = write_suite(**{"test_wobbly.py": WOBBLY, "outcome.txt": "pass"})
    assert cli.main(["run", str(suite), "--no-ledger"]) == 0
    (suite / "outcome.txt").write_text("error")
    capsys.readouterr()
    assert cli.main(["run", str(suite), "--no-ledger", "--baseline", "last-green"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("regressed from the baseline (last-green); 0 passed, 0 failed, 1 err")
