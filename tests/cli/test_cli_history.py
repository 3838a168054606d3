"""The history from the command line: what a run records and says, ``history``, ``history
TEST``, ``flaky`` and its quarantine, baselines, import and prune, and a history that cannot
be used never changing a run's outcome."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from agent_health import cli, history

SUITE = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from agent_health import test

    HERE = Path(__file__).parent


    @test("steady", labels=["kind:steady"])
    async def steady(expect):
        expect(1).to_equal(1)


    @test("wobbly")
    async def wobbly(expect):
        (HERE / "ran").write_text("yes")
        expect(json.loads((HERE / "outcome.json").read_text())).to_equal("pass")
    """
)


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A suite of two data tests (no agent); ``wobbly`` passes when outcome.json says so. The
    command runs from another folder: the history is found beside the config, not here."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_wobbly.py").write_text(SUITE)
    (folder / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config()\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("AGENT_HEALTH_HISTORY", raising=False)
    outcome(folder, "pass")
    return folder


def outcome(suite: Path, said: str) -> None:
    (suite / "outcome.json").write_text(json.dumps(said))


def run(suite: Path, *args: str) -> int:
    return cli.main(["run", str(suite), "--no-ledger", *args])


def said(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    got = capsys.readouterr()
    return got.out, got.err


def test_two_runs_record_a_trend_of_two_beside_the_config(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(suite) == 0
    out, _ = said(capsys)
    db = suite / ".agent-health" / "history.db"
    assert db.is_file()
    assert f"recorded in {db}" in out
    assert "the suite: its first run here" in out
    assert run(suite, "--reporter", f"json:{suite / 'r.json'}") == 0
    out, _ = said(capsys)
    assert "the suite over its last 2 runs: pass rate 100% → 100%" in out
    assert cli.main(["history", "--config", str(suite / "agent-health.config.py")]) == 0
    out, _ = said(capsys)
    assert out.count("100% [") == 2, out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert cli.main(["history", "--json", "--history", f"sqlite:///{db}"]) == 0
    runs = json.loads(capsys.readouterr().out)
    uid = json.loads((suite / "r.json").read_text())["provenance"]["run_id"]
    assert runs[0]["uid"] == uid  # newest first, by the report's run id
    assert runs[0]["report_path"] == str(suite / "r.json")
    assert [r["passed"] for r in runs] == [2, 2]


def test_one_test_across_runs_says_where_it_broke(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    for result in ("pass", "pass", "fail", "fail"):
        outcome(suite, result)
        run(suite)
    capsys.readouterr()
    assert cli.main(["history", "wobbly", "--history", db]) == 0
    out, _ = said(capsys)
    assert "test_wobbly.py::wobbly" in out
    assert "outcomes, oldest → newest: ✓✓✗✗" in out
    assert "broke: last passed in run" in out
    assert "nothing recorded differed" in out
    assert "✗ to_equal" in out  # the first failing run's failed gate
    assert cli.main(["history", "no such test", "--history", db]) == 2
    _, err = said(capsys)
    assert "no test in the history" in err


def test_flaky_finds_the_flipping_test_and_its_quarantine_keeps_it_from_gating(
    suite: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    for result in ("pass", "fail", "pass", "fail"):
        outcome(suite, result)
        run(suite)
    capsys.readouterr()
    quarantine = tmp_path / "quarantine.json"
    assert cli.main(["flaky", "--history", db, "--quarantine", str(quarantine)]) == 0
    out, err = said(capsys)
    assert "test_wobbly.py::wobbly" in out
    assert "steady" not in out
    assert "50% [" in out  # its failure rate with the interval
    assert f"quarantine: 1 tests written to {quarantine}" in err
    assert [t["id"] for t in json.loads(quarantine.read_text())["tests"]] == [
        "test_wobbly.py::wobbly"
    ]
    assert cli.main(["flaky", "--history", db, "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)
    assert (found["flips"], found["failures"], found["decided"]) == (3, 2, 4)

    outcome(suite, "fail")
    report, junit = tmp_path / "q.json", tmp_path / "q.xml"
    code = run(suite, "--quarantine", str(quarantine), "--reporter", f"json:{report}",
               "--reporter", f"junit:{junit}")  # fmt: skip
    out, _ = said(capsys)
    assert code == 0  # the failing test is quarantined: it does not gate
    assert "1 quarantined (1 failed: not counted)" in out
    assert "(quarantined: reported apart, does not gate)" in out
    data = json.loads(report.read_text())
    assert data["summary"]["quarantined"]["failed"] == 1
    assert (data["summary"]["passed"], data["summary"]["failed"]) == (1, 0)
    assert data["summary"]["pass_rate"] == 1.0
    wobbly = next(t for t in data["tests"] if t["name"] == "wobbly")
    assert (wobbly["status"], wobbly["quarantined"]) == ("failed", True)
    case = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "wobbly")
    skipped = case.find("skipped")
    assert skipped is not None
    assert (skipped.get("message") or "").startswith("quarantined (failed)")
    # without the quarantine the same run fails
    assert run(suite) == 1
    # the config names it too; a file that cannot be read is a usage error before anything runs
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\n"
        f"config = define_config(quarantine={str(quarantine)!r})\n"
    )
    assert run(suite) == 0
    (suite / "ran").unlink()
    assert run(suite, "--quarantine", str(tmp_path / "missing.json")) == 2
    assert "no such quarantine file" in said(capsys)[1]
    assert not (suite / "ran").exists()


def test_no_history_leaves_no_trace(suite: Path, tmp_path: Path) -> None:
    assert run(suite, "--no-history") == 0
    assert not list(tmp_path.rglob("history.db*"))
    assert not (suite / ".agent-health").exists()


@pytest.mark.parametrize(
    "url", ["mysql://user:pw@127.0.0.1/db", "sqlite://", "history.db", "postgresql+psycopg2://h/d"]
)
def test_a_history_url_that_names_none_is_a_usage_error_before_anything_runs(
    suite: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(suite, "--history", url) == 2
    _, err = said(capsys)
    assert "--history" in err
    assert "pw" not in err
    assert not (suite / "ran").exists()


@pytest.mark.parametrize("result", ["pass", "fail"])
def test_a_corrupt_history_is_one_warning_and_the_exit_code_stands(
    suite: Path, result: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome(suite, result)
    db = suite / ".agent-health" / "history.db"
    db.parent.mkdir()
    db.write_bytes(b"garbage" * 1000)
    report = suite / "r.json"
    code = run(suite, "--reporter", f"json:{report}")
    out, err = said(capsys)
    assert code == (0 if result == "pass" else 1)
    warnings = [line for line in err.splitlines() if "history" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith("warning: the run was not recorded in the history: history ")
    assert "Traceback" not in out + err
    assert json.loads(report.read_text())["summary"]["total"] == 2  # its reports are written


def test_a_locked_history_is_one_warning(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = suite / ".agent-health" / "history.db"
    assert run(suite) == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        code = run(suite, "--history", f"sqlite:///{db}?timeout=0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _, err = said(capsys)
    assert code == 0
    assert "locked by another writer past the busy timeout" in err


def test_an_unreachable_postgres_is_one_warning_without_its_password(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://who:hunter2secret@127.0.0.1:{port}/db?connect_timeout=2"
    outcome(suite, "fail")
    assert run(suite, "--history", url) == 1
    out, err = said(capsys)
    assert "hunter2secret" not in out + err
    assert f"history postgresql://who@127.0.0.1:{port}/db: unreachable or refused" in err


def test_run_baseline_gates_on_a_regression_from_the_last_green_run(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(suite, "--baseline", "last-green") == 0  # nothing to compare with yet: no gate
    _, err = said(capsys)
    assert "warning: no baseline comparison: no green run" in err
    outcome(suite, "fail")
    assert run(suite) == 1  # a red run: not a green baseline
    outcome(suite, "pass")
    capsys.readouterr()
    assert run(suite, "--baseline", "last-green") == 0
    out, _ = said(capsys)
    assert "baseline: last-green = run" in out
    assert "no regression" in out
    outcome(suite, "fail")
    report = suite / "new.json"
    assert run(suite, "--baseline", "last-green", "--reporter", f"json:{report}") == 1
    out, _ = said(capsys)
    assert "newly failing: 1" in out
    assert run(suite, "--baseline", "last-green", "--no-history") == 2
    # compare --baseline reads the same history for a saved report
    db = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    assert cli.main(["compare", "--baseline", "last-green", str(report), "--history", db]) == 1
    out, _ = said(capsys)
    assert "newly failing: 1" in out
    assert "the history's last-green" in out
    assert cli.main(["compare", "--baseline", "last", str(report), "--history", db]) == 1
    out, _ = said(capsys)  # the newest run before NEW, never NEW itself (it is recorded)
    new_id = json.loads(report.read_text())["provenance"]["run_id"]
    assert "baseline: last = run " in out
    assert f"baseline: last = run {new_id}" not in out
    assert cli.main(["compare", str(report)]) == 2  # BASE.json NEW.json, or --baseline


def test_import_saved_reports_once_and_prune(
    suite: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    reports = []
    for i, result in enumerate(("pass", "fail", "pass")):
        outcome(suite, result)
        path = tmp_path / f"r{i}.json"
        run(suite, "--no-history", "--reporter", f"json:{path}")
        reports.append(str(path))
    old = json.loads(Path(reports[0]).read_text())
    old["version"] = 1
    for t in old["tests"]:
        t.pop("cause", None)
    old.pop("provenance")
    Path(reports[0]).write_text(json.dumps(old))
    db = f"sqlite:///{tmp_path / 'imported.db'}"
    capsys.readouterr()
    assert cli.main(["history", "import", *reports, "--history", db]) == 0
    assert "imported 3 runs from 3 reports" in said(capsys)[0]
    assert cli.main(["history", "import", *reports, "--history", db]) == 0
    assert "imported 0 runs from 3 reports" in said(capsys)[0]  # idempotent
    assert cli.main(["history", "prune", "--keep-runs", "1", "--history", db]) == 0
    assert "pruned 2 runs" in said(capsys)[0]
    assert cli.main(["history", "prune", "--history", db]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 7}')
    assert cli.main(["history", "import", str(bad), "--history", db]) == 2
    assert "bad.json" in said(capsys)[1]


def test_the_history_is_named_by_the_environment_and_the_config(
    suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\n"
        "config = define_config(history='sqlite:///kept/runs.db')\n"
    )
    assert run(suite) == 0
    assert (suite / "kept" / "runs.db").is_file()  # relative to the config's folder
    monkeypatch.setenv("AGENT_HEALTH_HISTORY", f"sqlite:///{tmp_path / 'env.db'}")
    assert run(suite) == 0
    assert (tmp_path / "env.db").is_file()
    (suite / "agent-health.config.py").write_text(
        "from agent_health import define_config\n\nconfig = define_config(history=False)\n"
    )
    monkeypatch.delenv("AGENT_HEALTH_HISTORY")
    before = set(tmp_path.rglob("*.db"))
    assert run(suite) == 0
    assert set(tmp_path.rglob("*.db")) == before


def test_history_with_nothing_recorded_says_so(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["history", "--config", str(suite / "agent-health.config.py")]) == 2
    _, err = said(capsys)
    assert "no history at" in err
    assert "agent-health run" in err
    assert not (suite / ".agent-health").exists()


def test_a_run_a_budget_stopped_is_recorded_with_what_finished_marked_so(
    suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{suite / '.agent-health' / 'history.db'}"
    assert run(suite, "-j", "1", "--max-duration", "0.000001") == 4  # stopped by the budget
    capsys.readouterr()
    assert cli.main(["history", "--json", "--history", db]) == 0
    (recorded,) = json.loads(capsys.readouterr().out)
    assert recorded["budget_stop"] == "max_duration_s"  # the limit that stopped it
    assert recorded["exit_code"] == 4
    assert recorded["skipped"] >= 1  # what did not start is there, skipped (reason budget)
    assert cli.main(["history", "--history", db]) == 0
    out, _ = said(capsys)
    assert "* interrupted or stopped by a budget" in out


ASKS = """
from agent_health import test


@test("asks the agent")
async def asks(agent, expect):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result.output).to_match(r".")
"""


async def test_a_run_records_that_its_ledger_was_sealed_whole(
    tmp_path: Path, triage_url: str
) -> None:
    # The run wrote its ledger with the only key and sealed it: that is its verification
    # (reading it back would cost about as much as the run, bench/history.py).
    folder = tmp_path / "asks"
    folder.mkdir()
    (folder / "test_asks.py").write_text(ASKS)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    for extra in ((), ("--no-ledger",)):
        argv = ["run", str(folder), "--agent", f"rest+{triage_url}", "--history", url, *extra]
        assert await asyncio.to_thread(cli.main, argv) == 0
    with history.open_history(url, create=False) as opened:
        unledgered, sealed = opened.runs()
    assert sealed.ledger_url is not None
    assert sealed.ledger_verified is True
    assert (unledgered.ledger_url, unledgered.ledger_verified) == (None, None)


SEES_THREADS = '''
import threading
from pathlib import Path

from agent_health import define_config
from agent_health.connectors import AgentReply

HERE = Path(__file__).parent


class Inproc:
    """Answers at once; notes the threads running as the run makes it (before any test)."""

    def __init__(self, spec):
        names = [t.name for t in threading.enumerate()]
        (HERE / "threads.txt").write_text("\\n".join(names))

    async def run(self, request):
        return AgentReply(output="pong")

    async def aclose(self):
        return None


config = define_config(
    connectors={"inproc": Inproc},
    agents={"inproc": {"connector": "inproc"}},
    default_agent="inproc",
)
'''


def test_the_history_opens_as_the_first_tests_start_not_before(tmp_path: Path) -> None:
    # Opened before the agent's connector was made (and the preflight ran), the history's
    # import of SQLAlchemy took the interpreter from the work every test waits for: about
    # 0.2 s of a 400-call run's wall time (bench/defaults.py, the calls row). A fresh
    # interpreter: no thread of another test's run is about.
    (tmp_path / "test_one.py").write_text(
        "from agent_health import test\n\n\n@test('one')\nasync def one(agent, expect):\n"
        "    expect((await agent.run('ping')).output).to_equal('pong')\n"
    )
    (tmp_path / "agent-health.config.py").write_text(SEES_THREADS)
    done = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "run", str(tmp_path), "--no-ledger"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    threads = (tmp_path / "threads.txt").read_text().splitlines()
    assert "MainThread" in threads
    assert not [name for name in threads if name.startswith("history")], threads
    # and the run is recorded all the same
    assert "history: run" in done.stdout, done.stdout
    assert (tmp_path / ".agent-health" / "history.db").is_file()
