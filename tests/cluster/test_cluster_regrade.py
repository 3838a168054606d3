"""``agent-health grade``: a local run's ledger, graded again, gives the run's statuses."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_health import cli
from agent_health.cluster.grading import regrade
from agent_health.sdk.results import TestResult
from support import ledger_support
from support.helpers import run_cli

SUITE = """
from agent_health import test

@test("passes")
async def passes(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("search_logs")

@test("fails")
async def fails(agent, expect):
    result = await agent.run("Diagnose the payment service")
    expect(result).to_have_called_tool("restart_pod")

@test.skip("skipped")
async def skipped():
    pass
"""


async def test_a_local_ledger_grades_to_the_same_statuses(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: Any
) -> None:
    ledger = tmp_path / "ledger"
    suite = write_suite(**{"test_g.py": SUITE})
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--ledger", f"file://{ledger}")
    capsys.readouterr()
    key = tmp_path / "ledger.key"
    assert key.exists()
    out = tmp_path / "regraded.json"
    argv = ["grade", f"file://{ledger}", "--key-file", str(key), "--reporter", f"json:{out}"]
    code = await asyncio.to_thread(cli.main, argv)
    assert code == run.code == 1
    regraded = {t["name"]: t["status"] for t in json.loads(out.read_text())["tests"]}
    # A test that never ran the agent (the skipped one) leaves no cell to grade.
    ran = [t for t in run.report["tests"] if t["status"] != "skipped"]
    assert regraded == {t["name"]: t["status"] for t in ran}
    assert len(ran) == 2
    # The re-grade keeps each test's content hash (from the ledger's cell-end), so it
    # compares cleanly with the run's own report: no test looks edited, nothing regressed.
    hashes = {t["id"]: t["content_hash"] for t in json.loads(out.read_text())["tests"]}
    assert hashes == {t["id"]: t["content_hash"] for t in ran}
    assert all(hashes.values())
    own = tmp_path / "own.json"
    own.write_text(json.dumps(run.report))
    capsys.readouterr()
    assert await asyncio.to_thread(cli.main, ["compare", str(own), str(out), "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert (compared["changed_tests"], compared["newly_failing"]) == ([], [])


async def test_a_tampered_cell_grades_errored(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: Any
) -> None:
    ledger = tmp_path / "ledger"
    suite = write_suite(**{"test_g.py": SUITE})
    await run_cli(suite, "--agent", f"rest+{triage_url}", "--ledger", f"file://{ledger}")
    failing = next(cell for cell in ledger_support.cells(ledger) if "fails" in cell)
    ledger_support.rewrite(
        ledger,
        failing,
        lambda lines: [re.sub(r'"status":"failed"', '"status":"passed"', line) for line in lines],
    )
    capsys.readouterr()
    out = tmp_path / "regraded.json"
    argv = ["grade", str(ledger), "--key-file", str(tmp_path / "ledger.key")]
    code = await asyncio.to_thread(cli.main, [*argv, "--reporter", f"json:{out}"])
    tests = {t["name"]: t for t in json.loads(out.read_text())["tests"]}
    assert tests["fails"]["status"] == "errored"
    assert "tampered" in tests["fails"]["error"]
    assert code == 3


def test_nothing_to_grade_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "key").write_bytes(b"k" * 40)
    assert cli.main(["grade", str(tmp_path), "--key-file", str(tmp_path / "key")]) == 2
    assert "no ledger cells" in capsys.readouterr().err


SIDE_BY_SIDE = """
import asyncio
from agent_health import test

IN = []


async def together(name):
    # each waits (bounded) until the other is in its body too: the two overlap for sure
    IN.append(name)
    for _ in range(3000):
        if len(IN) >= 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # both in flight for at least this long


@test("one")
async def one(agent, expect):
    result = await agent.run("Diagnose the payment service")
    await together("one")
    expect(result).to_have_called_tool("search_logs")


@test("two")
async def two(agent, expect):
    result = await agent.run("Diagnose the payment service")
    await together("two")
    expect(result).to_have_called_tool("search_logs")
"""


async def test_grade_reports_the_recorded_runs_duration(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: Any
) -> None:
    """Two tests that ran side by side (-j 2): the regrade's duration is the run's, from its
    first cell's start to its last cell's end — less than the sum of the two tests' times
    (what grade said before), at least the longer one's — and its provenance says when."""
    ledger = tmp_path / "ledger"
    suite = write_suite(**{"test_side.py": SIDE_BY_SIDE})
    argv = ("--agent", f"rest+{triage_url}", "-j", "2", "--ledger", f"file://{ledger}")
    run = await run_cli(suite, *argv)
    assert run.code == 0
    out = tmp_path / "regraded.json"
    grade = ["grade", f"file://{ledger}", "--key-file", str(tmp_path / "ledger.key")]
    assert await asyncio.to_thread(cli.main, [*grade, "--reporter", f"json:{out}"]) == 0
    regraded = json.loads(out.read_text())
    took = [t["duration_ms"] for t in regraded["tests"]]
    duration = regraded["summary"]["duration_ms"]
    assert max(took) <= duration
    assert duration < sum(took) - 25  # they overlapped by 50 ms at least
    provenance = regraded["provenance"]
    started = datetime.fromisoformat(provenance["started_at"])
    ended = datetime.fromisoformat(provenance["ended_at"])
    assert abs((ended - started).total_seconds() * 1000 - duration) < 1
    assert f", {duration / 1000:.2f}s" in capsys.readouterr().out.splitlines()[-1]


def test_a_regraded_runs_duration_is_never_shorter_than_its_longest_test() -> None:
    """The run's span is worked out from the cells' own figures: taken from its two ends'
    datetimes (whole microseconds) it came out 100.0 ms for a test of 100.0004 ms."""
    start = 1765060000.123456
    cells = [(start, 100.0004), (start + 0.01, 33.3336), (start + 0.002, 98.1234567)]
    results = [
        TestResult(
            id=f"t{i}",
            name=f"t{i}",
            title=f"t{i}",
            file="t.py",
            line=1,
            status="passed",
            run_id=f"r{i}",
            started_at=at,
            duration_ms=ms,
        )
        for i, (at, ms) in enumerate(cells)
    ]
    ran = regrade.span(results)
    assert ran is not None
    assert ran.duration_ms >= max(ms for _, ms in cells)
    assert ran.started_at == datetime.fromtimestamp(start, UTC)
    assert abs((ran.ended_at - ran.started_at).total_seconds() * 1000 - ran.duration_ms) < 0.001


async def test_a_graded_ledger_is_recorded_once_as_the_run_that_wrote_it(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: Any
) -> None:
    """A regrade is the run that wrote the ledger, graded again: where the history has that
    run, it is left as it was; a ledger the history does not know is recorded once, under
    an id made from the ledger, however often it is graded."""
    from agent_health import history

    suite = write_suite(**{"test_g.py": SUITE})
    run = await run_cli(suite, "--agent", f"rest+{triage_url}")  # the defaults: ledger, history
    ledger = Path(run.report["provenance"]["ledger"].removeprefix("file://"))
    assert ledger.parent.parent == suite / ".agent-health"
    capsys.readouterr()
    out = tmp_path / "regraded.json"
    code = await asyncio.to_thread(cli.main, ["grade", str(ledger), "--reporter", f"json:{out}"])
    said = capsys.readouterr().out
    assert code == run.code == 1
    url = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    with history.open_history(url, create=False) as opened:
        (kept,) = opened.runs()
    uid = run.report["provenance"]["run_id"]
    assert kept.uid == uid
    assert f"history: run {uid} is in {url.removeprefix('sqlite:///')} already" in said
    assert json.loads(out.read_text())["provenance"]["run_id"] == uid  # the same run

    # A history that does not know the ledger: recorded once, its chains verified.
    elsewhere = f"sqlite:///{tmp_path / 'other.db'}"
    for _ in range(2):
        argv = ["grade", f"file://{ledger}", "--history", elsewhere]
        assert await asyncio.to_thread(cli.main, argv) == 1
    first, again = (line for line in capsys.readouterr().out.splitlines() if "history:" in line)
    with history.open_history(elsewhere, create=False) as opened:
        (graded,) = opened.runs()
        assert opened.count() == (1, 2)
    assert graded.uid.startswith("ledger-")
    assert first == f"history: run {graded.uid} recorded in {tmp_path / 'other.db'}"
    assert again.startswith(f"history: run {graded.uid} is in ")
    assert (graded.passed, graded.failed, graded.ledger_verified) == (1, 1, True)
    assert graded.ledger_url == f"file://{ledger}"
    assert graded.exit_code == 1

    nowhere = tmp_path / "none.db"
    argv = ["grade", str(ledger), "--no-history", "--history", f"sqlite:///{nowhere}"]
    assert await asyncio.to_thread(cli.main, argv) == 2  # they contradict each other
    assert await asyncio.to_thread(cli.main, ["grade", str(ledger), "--no-history"]) == 1
    assert not nowhere.exists()
