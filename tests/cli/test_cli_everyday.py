"""The everyday CLI a Playwright or pytest user reaches for, tried as they would.

Reporter paths checked before the run, ``--forbid-only``, ``--list``, ``--last-failed``,
``-x`` / ``--max-failures``, ``--retries`` / flaky / ``--fail-on-flaky``, and ``print()``
captured per test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from support.helpers import run_cli_sync

ROOT = Path(__file__).resolve().parents[2]
TWO = """
from agent_health import test

@test("passes")
async def passes(expect):
    expect(1).to_equal(1)

@test("fails")
async def fails(expect):
    expect(1).to_equal(2)
"""


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs from its own folder (the --last-failed cache lives in the cwd) and
    outside CI unless it says so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CI", raising=False)


# -- reporter destinations ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("reporter", "says"),
    [
        ("json:{tmp}/afile/x.json", "afile is a file"),
        ("junit:/proc/agent-health-x.xml", "cannot write in /proc"),
        ("json:{tmp}", "is a directory"),
    ],
)
def test_an_unwritable_reporter_path_stops_the_run_before_any_test(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], reporter: str, says: str
) -> None:
    suite = write_suite(
        **{
            "test_side.py": """
            from pathlib import Path
            from agent_health import test

            @test("leaves a mark")
            async def mark():
                Path(__file__).with_name("ran").write_text("yes")
            """
        }
    )
    (tmp_path / "afile").write_text("a file, not a folder")
    target = reporter.format(tmp=tmp_path)
    code = cli.main(["run", str(suite), "--no-ledger", "--reporter", target])
    err = capsys.readouterr().err
    assert code == 2
    assert says in err
    assert target.partition(":")[2] in err  # the error names the path
    assert not (suite / "ran").exists()  # no test ran
    assert "Traceback" not in err


def test_a_report_that_cannot_be_written_after_the_run_does_not_stop_the_others(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    json_path, junit_path = folder / "r.json", tmp_path / "r.xml"
    # The folder is fine when checked, and a file by the time the json reporter writes
    # (what no check beforehand can rule out: a full disk, a removed mount).
    suite = write_suite(
        **{
            "test_swap.py": f"""
            from pathlib import Path
            from agent_health import test

            @test("swaps the report folder for a file, then fails")
            async def swap(expect):
                folder = Path({str(folder)!r})
                folder.rmdir()
                folder.write_text("now a file")
                expect(1).to_equal(2)
            """
        }
    )
    code = cli.main(
        [
            "run",
            str(suite),
            "--no-ledger",
            "--reporter",
            f"json:{json_path}",
            "--reporter",
            f"junit:{junit_path}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1  # the run's own verdict stands
    assert f"cannot write the json report {json_path}" in err
    assert junit_path.exists()  # the reporter after it was still written
    assert "Traceback" not in err


# -- test.only -----------------------------------------------------------------------------

ONLY = """
from agent_health import test

@test.only("focused")
async def focused():
    pass

@test("other")
async def other():
    pass
"""


def test_forbid_only_is_on_in_ci_and_names_the_focused_tests(
    write_suite: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(**{"test_focus.py": ONLY})
    monkeypatch.setenv("CI", "true")
    assert cli.main(["run", str(suite), "--no-ledger"]) == 2
    err = capsys.readouterr().err
    assert "test.only is forbidden" in err
    assert "test_focus.py:4 'focused'" in err
    assert "--no-forbid-only" in err
    # Opting out in CI, or running locally, focuses as before: only the focused test runs.
    run = run_cli_sync(suite, "--no-ledger", "--no-forbid-only")
    assert run.code == 0
    assert [t["name"] for t in run.report["tests"]] == ["focused"]
    monkeypatch.delenv("CI")
    assert run_cli_sync(suite, "--no-ledger").code == 0
    assert cli.main(["run", str(suite), "--no-ledger", "--forbid-only"]) == 2


# -- --list --------------------------------------------------------------------------------


def test_run_list_lists_what_would_run_and_runs_nothing(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_two.py": TWO})
    code = cli.main(["run", str(suite), "--list", "--grep", "fails"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines() == ["test_two.py::fails", "1 tests in 1 files"]
    assert cli.main(["list", str(suite), "--grep", "fails"]) == 0
    assert capsys.readouterr().out == out  # the same as `agent-health list`
    assert not Path(".agent-health").exists()  # nothing ran, nothing recorded


# -- --grep, repeated ----------------------------------------------------------------------

THREE = """
from agent_health import test

@test("payment outage")
async def payment(expect):
    expect(1).to_equal(1)

@test("auth outage")
async def auth(expect):
    expect(1).to_equal(1)

@test("search is healthy")
async def search(expect):
    expect(1).to_equal(1)
"""


def test_every_grep_is_taken_and_any_may_match(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second --grep used to replace the first silently; now each is taken, and a test
    that matches any of them runs (as --label's rule is said: all must match)."""
    suite = write_suite(**{"test_three.py": THREE})
    run = run_cli_sync(suite, "--no-ledger", "--grep", "^payment", "--grep", "auth")
    assert run.code == 0
    assert sorted(t["name"] for t in run.report["tests"]) == ["auth outage", "payment outage"]
    assert run.report["provenance"]["selection"]["grep"] == ["^payment", "auth"]
    capsys.readouterr()
    assert cli.main(["list", str(suite), "--grep", "search", "--grep", "^auth"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "test_three.py::auth outage",
        "test_three.py::search is healthy",
        "2 tests in 1 files",
    ]
    # a bad pattern is named, whichever it is
    assert cli.main(["run", str(suite), "--grep", "auth", "--grep", "(unclosed"]) == 2
    assert "--grep '(unclosed' is not a valid regular expression" in capsys.readouterr().err


def test_a_report_saved_with_one_grep_reads_as_a_list() -> None:
    from agent_health.engine.reports import provenance

    assert provenance.Selection.model_validate({"grep": "payment"}).grep == ["payment"]
    assert provenance.Selection.model_validate({"grep": None}).grep == []


# -- --last-failed -------------------------------------------------------------------------


def test_last_failed_reruns_only_what_failed(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_two.py": TWO})
    first = run_cli_sync(suite, "--no-ledger")
    assert first.code == 1
    again = run_cli_sync(suite, "--no-ledger", "--last-failed")
    assert [t["name"] for t in again.report["tests"]] == ["fails"]
    assert "rerunning 1 of 2 tests" in capsys.readouterr().err
    # Fixed: it passes, leaves the cache, and the next --lf runs everything again.
    (suite / "test_two.py").write_text(TWO.replace("to_equal(2)", "to_equal(1)"))
    assert run_cli_sync(suite, "--no-ledger", "--lf").code == 0
    rerun = run_cli_sync(suite, "--no-ledger", "--lf")
    assert sorted(t["name"] for t in rerun.report["tests"]) == ["fails", "passes"]
    assert "no test failed last time, running all 2 tests" in capsys.readouterr().err
    cache = json.loads(Path(".agent-health/last-failed.json").read_text())
    assert cache == {"version": 1, "suites": {}}


def test_a_missing_last_failed_cache_reads_as_an_empty_one_without_building_a_validator(
    tmp_path: Path,
) -> None:
    # A run reads the cache to update it; with no file the defaults need no validator
    # (0.7 M instructions of a run of one test, issue #40).
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from agent_health.engine.loading import lastfailed\n"
        f"cache = lastfailed.read(Path({str(tmp_path / 'none.json')!r}))\n"
        "print(json.dumps([cache.version, cache.suites, lastfailed.Cache.__pydantic_complete__]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == [1, {}, False]


# -- -x / --max-failures -------------------------------------------------------------------

MANY = """
from agent_health import test

for i in range(6):
    @test(f"fails {i}")
    async def fails(expect):
        expect(1).to_equal(2)
"""


def test_x_stops_after_the_first_failure(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_many.py": MANY})
    run = run_cli_sync(suite, "--no-ledger", "-x", "-j", "1")
    assert run.code == 1
    assert [t["name"] for t in run.report["tests"]] == ["fails 0"]
    summary = run.report["summary"]
    assert summary["not_run"] == 5
    assert summary["stopped"] == "stopped after 1 failed or errored test (--max-failures 1)"
    assert "5 tests never started" in capsys.readouterr().out
    three = run_cli_sync(suite, "--no-ledger", "--max-failures", "3", "-j", "1")
    assert len(three.report["tests"]) == 3
    assert cli.main(["run", str(suite), "--max-failures", "0"]) == 2


# -- --retries, flaky ----------------------------------------------------------------------

FLAKY = """
from agent_health import test

@test("flaky")
async def flaky(expect, test_info):
    print("try", test_info.retry)
    expect(test_info.retry).to_equal(1)

@test("always fails")
async def always(expect):
    expect("a").to_equal("b")

@test("passes")
async def passes():
    pass
"""


def test_retries_make_a_test_that_passes_on_retry_flaky(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_flaky.py": FLAKY})
    junit = tmp_path / "junit.xml"
    run = run_cli_sync(suite, "--no-ledger", "--retries", "2", "--reporter", f"junit:{junit}")
    out = capsys.readouterr().out
    flaky = run.by_name("flaky")
    assert flaky["status"] == "flaky"
    assert [a["status"] for a in flaky["attempts"]] == ["failed", "passed"]
    assert flaky["attempts"][0]["reason"] == "failed: to_equal(1)"
    assert flaky["score"] == 0.5  # the mean of its tries: a retry never buys a better score
    assert flaky["stdout"] == "try 1\n"  # the try that counted
    always = run.by_name("always fails")
    assert always["status"] == "failed"
    assert len(always["attempts"]) == 3  # the first try and two retries
    assert run.by_name("passes")["attempts"] == []
    summary = run.report["summary"]
    assert (summary["passed"], summary["flaky_count"], summary["failed"]) == (1, 1, 1)
    assert summary["flaky"] == ["flaky"]
    assert summary["pass_rate"] == round(1 / 3, 6)  # flaky is not a pass
    assert "1 passed, 1 flaky, 1 failed" in out
    assert "FLAKY test_flaky.py::flaky" in out
    assert "\nflaky (passed only on a retry): 'flaky'\n" in out
    case = ET.parse(junit).getroot().find(".//testcase[@name='flaky']")
    assert case is not None
    assert case.find("failure") is None
    assert [e.get("message") for e in case.findall("flakyFailure")] == ["failed: to_equal(1)"]


MIXED = """
from agent_health import test

@test("flaky")
async def flaky(expect, test_info):
    expect(test_info.repeat).not_to_equal(1)
"""


def test_a_test_titled_flaky_that_passes_in_some_repeats_is_not_called_flaky(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "flaky" is one thing: passed only on a retry. Without --retries nothing is flaky,
    # whatever a test is called; one that passed in some repeats is said to be mixed.
    suite = write_suite(**{"test_mixed.py": MIXED})
    html = tmp_path / "page"
    run = run_cli_sync(suite, "--no-ledger", "--repeat", "3", "--reporter", f"html:{html}")
    out = capsys.readouterr().out
    summary = run.report["summary"]
    assert (summary["flaky"], summary["flaky_count"], summary["mixed"]) == ([], 0, ["flaky"])
    assert "passed in some repeats and not in others: 'flaky'" in out
    assert " flaky, " not in out  # the totals count no flaky result
    assert not [line for line in out.splitlines() if line.startswith("flaky")]
    assert "pass@3 100%" in out


def test_flaky_does_not_fail_the_run_unless_asked(write_suite: Any) -> None:
    suite = write_suite(**{"test_flaky.py": FLAKY.split('@test("always fails")')[0]})
    assert run_cli_sync(suite, "--no-ledger", "--retries", "1").code == 0
    assert run_cli_sync(suite, "--no-ledger", "--retries", "1", "--fail-on-flaky").code == 1
    without = run_cli_sync(suite, "--no-ledger")
    assert without.code == 1
    assert without.by_name("flaky")["status"] == "failed"


def test_each_retry_is_its_own_ledger_cell(write_suite: Any, tmp_path: Path) -> None:
    agent = ROOT / "examples" / "agents" / "triage_cli.py"
    suite = write_suite(
        **{
            "test_flaky.py": """
            from agent_health import test

            @test("flaky")
            async def flaky(agent, expect, test_info):
                await agent.run("Diagnose the payment service")
                expect(test_info.retry).to_equal(1)
            """
        }
    )
    ledger = tmp_path / "ledger"
    run = run_cli_sync(
        suite,
        "--retries",
        "1",
        "--agent",
        f"cmd:{sys.executable} {agent}",
        "--ledger",
        f"file://{ledger}",
    )
    assert run.code == 0
    assert run.by_name("flaky")["status"] == "flaky"
    cells = {
        json.loads(line)["cell"]
        for line in (ledger / "run.jsonl").read_text().splitlines()
        if '"cell"' in line[:10]
    }
    assert len(cells) == 2
    assert any(name.endswith(".r0.a1") for name in cells), cells
    assert cli.main(["ledger", "verify", f"file://{ledger}"]) == 0


# -- print() is captured per test ----------------------------------------------------------

PRINTS = """
import asyncio
import sys
from agent_health import test

async def chatty(n):
    for i in range(3):
        print(f"test {n} line {i}")
        await asyncio.sleep(0.01)

@test("prints and fails")
async def first(expect):
    await asyncio.gather(chatty(1), asyncio.to_thread(print, "from a thread"))
    print("to stderr", file=sys.stderr)
    expect(1).to_equal(2)

@test("prints and passes")
async def second():
    await chatty(2)
"""


def test_print_is_captured_per_test_and_shown_with_its_failure(
    write_suite: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_prints.py": PRINTS})
    run = run_cli_sync(suite, "--no-ledger", "-j", "2")
    out = capsys.readouterr().out
    first = run.by_name("prints and fails")
    assert sorted(first["stdout"].splitlines()) == sorted(
        ["test 1 line 0", "test 1 line 1", "test 1 line 2", "from a thread"]
    )
    assert first["stderr"] == "to stderr\n"
    second = run.by_name("prints and passes")
    assert second["stdout"] == "test 2 line 0\ntest 2 line 1\ntest 2 line 2\n"
    assert second["stderr"] is None
    # Not interleaved with the progress lines: shown once, under the failure it belongs to.
    failure = out[out.index("FAILED test_prints.py::prints and fails") :]
    assert "captured stdout:" in failure
    assert "    test 1 line 2" in failure
    assert out.count("test 1 line 0") == 1
    assert "test 2 line" not in out  # a passing test's output stays in the report


def test_report_and_grade_check_their_reporter_paths_too(
    write_suite: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**{"test_two.py": TWO})
    saved = tmp_path / "run.json"
    run_cli_sync(suite, "--no-ledger", "--reporter", f"json:{saved}")
    (tmp_path / "afile").write_text("a file")
    bad = f"junit:{tmp_path / 'afile' / 'x.xml'}"
    assert cli.main(["report", str(saved), "--reporter", bad]) == 2
    assert "afile is a file" in capsys.readouterr().err
    assert cli.main(["grade", str(tmp_path / "no-ledger"), "--reporter", bad]) == 2
    assert "afile is a file" in capsys.readouterr().err


# -- usage and empty runs ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["run", "--bogus-flag"], ["list", "--bogus-flag"], ["ledger", "verify", "x", "--bogus-flag"]],
)
def test_a_bad_flag_prints_the_usage_of_the_command_it_was_given_to(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    command = " ".join(a for a in argv if a in ("run", "list", "ledger", "verify"))
    assert err.startswith(f"usage: agent-health {command} "), err
    assert f"agent-health {command}: error: unrecognized arguments: --bogus-flag" in err


def test_an_empty_run_says_where_it_looked_and_how_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["run", str(empty), "--no-ledger"]) == 2
    out = capsys.readouterr().out
    assert f"no tests found in {empty} " in out
    for pattern in ("test_*.py", "*_test.py", "*.test.py", "test_*.json", "*.cases.json"):
        assert pattern in out
    assert "pass --pass-with-no-tests to exit 0" in out
    assert cli.main(["run", str(empty), "--no-ledger", "--pass-with-no-tests"]) == 0
    (empty / "test_two.py").write_text(TWO)
    assert cli.main(["run", str(empty), "--no-ledger", "--grep", "nothing"]) == 2
    out = capsys.readouterr().out
    assert f"no tests selected: 2 tests in {empty}, none left after --grep" in out


def test_a_listing_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    # Lines far past what a pipe buffers (64 KiB), so the writer meets the closed pipe.
    long = "x" * 500
    for i in range(400):
        (tmp_path / f"test_{i}.py").write_text(
            f'from agent_health import test\n@test("t{i} {long}")\nasync def t(agent):\n    pass\n'
        )
    program = Path(sys.executable).parent / "agent-health"
    lister = subprocess.Popen(
        [str(program), "list", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert lister.stdout is not None
    assert lister.stdout.readline().startswith(b"test_")
    lister.stdout.close()  # what `| head -1` does once it has its line
    _, stderr = lister.communicate(timeout=120)
    assert stderr == b""  # no BrokenPipeError traceback
    assert lister.returncode == 141


SWITCH = """
import sys

from agent_health import test


@test("the interval")
async def interval(expect):
    expect(sys.getswitchinterval()).to_be_less_than(0.001)
"""


def test_a_command_hands_the_interpreter_over_quickly_and_puts_the_interval_back(
    tmp_path: Path,
) -> None:
    # The run's loop waits on agents while its ledger's and history's threads work: it must
    # not then wait 5 ms for the interpreter each time an answer wakes it.
    (tmp_path / "test_switch.py").write_text(SWITCH)
    before = sys.getswitchinterval()
    run = run_cli_sync(tmp_path, "--no-history")
    assert run.code == 0, run.report
    assert run.by_name("the interval")["status"] == "passed"
    assert sys.getswitchinterval() == before  # main() also runs inside programs that go on
