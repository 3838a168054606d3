"""The history's store on SQLite and on a real PostgreSQL server: recording, the queries,
the schema's revisions, and its reliability (two writers at once, a writer killed mid-write).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from agent_health import history
from agent_health.history import database, ingest, migrations, tables
from support.history_support import T0, named, report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty history: a SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    from support import postgres_support

    server = request.getfixturevalue("postgres_server")
    monkeypatch.setenv("PGPASSWORD", postgres_support.PASSWORD)
    return str(server.url(server.new_database()))


@pytest.fixture
def opened(url: str) -> Iterator[history.History]:
    with history.open_history(url) as h:
        yield h


def test_a_run_is_recorded_once_with_its_counts(opened: history.History) -> None:
    data = report({"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "errored"}, run_id="r1")
    context = history.RunContext(source="ci", exit_code=1, report_path="/tmp/r1.json")
    (first,) = opened.record(data, context)
    assert (first.uid, first.agent, first.new, first.results) == ("r1", "triage", True, 3)
    (again,) = opened.record(data, context)
    assert (again.new, again.results) == (False, 0)  # the same run twice is a no-op
    assert opened.count() == (1, 3)
    (run,) = opened.runs()
    assert (run.passed, run.failed, run.errored, run.total) == (1, 1, 1, 3)
    assert run.errored_by_cause == {"agent": 1, "judge": 0, "test": 0, "infra": 0}
    assert run.pass_rate == pytest.approx(1 / 3, abs=1e-6)
    assert (run.source, run.exit_code, run.report_path) == ("ci", 1, "/tmp/r1.json")
    assert run.agent is not None
    assert run.agent.name == "triage"
    assert (run.git_commit, run.suite) == ("c0ffee", "suite")
    assert run.started_at.isoformat() == "2025-01-01T12:00:00+00:00"
    assert run.trend is None  # its agent's first run


def test_a_later_attempt_of_a_run_replaces_its_results_an_earlier_one_is_left(
    opened: history.History,
) -> None:
    # An EvaluationRun's errored cells requeued: the same run, its errored grades replaced.
    first = {"t.py::a": "passed", "t.py::b": "errored", "t.py::c": "failed"}
    again = {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "failed"}
    (one,) = opened.record(report(first, run_id="ns.run.uid"), history.RunContext())
    opened.record(report(dict.fromkeys(first, "passed"), run_id="later", at=5))  # its next run
    before = opened.run("later")
    (two,) = opened.record(report(again, run_id="ns.run.uid"), history.RunContext(attempt=1))
    (old,) = opened.record(report(first, run_id="ns.run.uid"), history.RunContext(attempt=1))
    assert (one.new, one.attempt, one.replaced) == (True, 0, None)
    assert (two.new, two.attempt, two.replaced, two.results) == (True, 1, 0, 3)
    assert (old.new, old.attempt) == (False, 1)  # the same attempt again: left as it was
    assert opened.count() == (2, 6)  # one run, its results the new attempt's
    run = opened.run("ns.run.uid")
    assert (run.attempt, run.passed, run.errored, run.failed) == (1, 2, 0, 1)
    page = {r.id: r.status for r in opened.results("ns.run.uid").results}
    assert page == again
    (b,) = opened.timeline("t.py::b")
    assert [o.status for o in b.outcomes] == ["passed", "passed"]
    # The run after it is compared with its new results.
    after = opened.run("later")
    assert before.trend is not None
    assert after.trend is not None
    assert after.trend.previous == before.trend.previous == "ns.run.uid"
    assert before.trend.effect != after.trend.effect  # b no longer went errored → passed


def test_a_report_without_a_run_id_gets_one_from_its_content(opened: history.History) -> None:
    data = report(named(3), run_id=None)
    (one,) = opened.record(data)
    (two,) = opened.record(json.loads(json.dumps(data)))  # the same file read again
    assert one.uid == two.uid
    assert one.uid.startswith("report-")
    assert (one.new, two.new) == (True, False)


def test_an_agent_matrix_records_one_run_per_agent_linked(opened: history.History) -> None:
    data = report({}, run_id="m1")
    data["tests"] = [
        {**t, "agent": agent}
        for agent, status in (("a", "passed"), ("b", "failed"))
        for t in report({"t.py::x": status}, run_id=None)["tests"]
    ]
    data["provenance"]["agents"] = [{"name": "a", "connector": "rest"}, {"name": "b"}]
    data["matrix"] = {
        "agents": ["a", "b"],
        "summaries": {
            "a": {"total": 1, "passed": 1, "failed": 0, "errored": 0, "skipped": 0},
            "b": {"total": 1, "passed": 0, "failed": 1, "errored": 0, "skipped": 0},
        },
    }
    recorded = opened.record(data)
    assert [(r.uid, r.agent) for r in recorded] == [("m1/a", "a"), ("m1/b", "b")]
    runs = {r.agent.name: r for r in opened.runs() if r.agent is not None}
    assert runs["a"].group == runs["b"].group == "m1"
    assert (runs["a"].passed, runs["b"].failed) == (1, 1)


def test_the_trend_marks_a_significant_drop_from_the_agents_previous_run(
    opened: history.History,
) -> None:
    opened.record(report(named(12), run_id="r1", at=0))
    opened.record(report(named(12), run_id="other", at=1, agent="other"))
    opened.record(report(named(12, "failed"), run_id="r2", at=2))
    newest = opened.runs(agent="triage")
    assert [r.uid for r in newest] == ["r2", "r1"]
    trend = newest[0].trend
    assert trend is not None
    assert (trend.previous, trend.mark, trend.method, trend.tests) == (
        "r1",
        "worse",
        "exact McNemar",
        12,
    )
    assert trend.p_value < 0.001
    # A small change is not a mark.
    opened.record(report({**named(12, "failed"), "t.py::test 000": "passed"}, run_id="r3", at=3))
    assert opened.runs(limit=1)[0].trend.mark is None  # type: ignore[union-attr]


def test_an_older_report_recorded_later_renews_the_next_runs_trend(
    opened: history.History,
) -> None:
    opened.record(report(named(12, "failed"), run_id="late", at=10))
    opened.record(report(named(12), run_id="early", at=0))
    late = opened.run("late")
    assert late.trend is not None
    assert (late.trend.previous, late.trend.mark) == ("early", "worse")


def _statements(opened: history.History) -> list[str]:
    """Every statement ``opened`` runs from now on (appended as they run)."""
    seen: list[str] = []
    sa.event.listen(
        opened.engine, "before_cursor_execute", lambda *args: seen.append(" ".join(args[2].split()))
    )
    return seen


def test_the_run_a_recording_is_compared_with_is_read_while_it_runs(
    opened: history.History,
) -> None:
    # Prepared with whose run it is (agent, suite, start), the history reads the previous
    # run's results while the run goes on: its recording reads none of them at the end.
    opened.record(report(named(12), run_id="r1", at=0))
    tests = report(named(12, "failed"), run_id="r2", at=2)["tests"]
    line = ingest.Upcoming(agent="triage", suite="suite", started_at=T0 + timedelta(minutes=2))
    known = opened.prepare(tests, line)
    assert known.previous is not None
    with opened.engine.connect() as conn:
        first = conn.execute(sa.text("SELECT id FROM runs WHERE uid = 'r1'")).scalar_one()
    assert known.previous[0] == first
    assert len(known.previous[1]) == 12
    seen = _statements(opened)
    opened.record(report(named(12, "failed"), run_id="r2", at=2), None, known)
    assert not [s for s in seen if s.startswith("SELECT") and "FROM results" in s], seen
    trend = opened.run("r2").trend
    assert trend is not None
    assert (trend.previous, trend.mark, trend.tests) == ("r1", "worse", 12)


def test_a_run_recorded_meanwhile_is_the_one_compared_with_not_the_one_read_ahead(
    opened: history.History,
) -> None:
    opened.record(report(named(12, "failed"), run_id="r1", at=0))
    tests = report(named(12), run_id="r3", at=5)["tests"]
    line = ingest.Upcoming(agent="triage", suite="suite", started_at=T0 + timedelta(minutes=5))
    known = opened.prepare(tests, line)
    # Another run of the agent, started before this one, recorded while it ran.
    opened.record(report(named(12), run_id="r2", at=3))
    opened.record(report(named(12), run_id="r3", at=5), None, known)
    trend = opened.run("r3").trend
    assert trend is not None
    assert (trend.previous, trend.mark) == ("r2", None)  # against r2 (all passed), not r1


def test_a_runs_results_are_written_as_recorded(opened: history.History) -> None:
    data = report(
        {"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "errored"}, run_id="r1", at=0
    )
    data["tests"][0]["quarantined"] = True
    opened.record(data)
    page = opened.results("r1")
    got = {r.id: (r.status, r.cause, r.quarantined) for r in page.results}
    assert got == {
        "t.py::a": ("passed", None, True),
        "t.py::b": ("failed", None, False),
        "t.py::c": ("errored", "agent", False),
    }


def test_one_test_across_runs_and_what_differed_at_its_break(opened: history.History) -> None:
    test_id = "t.py::test 000"
    opened.record(report(named(3), run_id="r1", at=0, image="sha256:aaa"))
    opened.record(report(named(3), run_id="r2", at=1, image="sha256:aaa"))
    broken = {**named(3), test_id: "failed"}
    opened.record(
        report(
            broken,
            run_id="r3",
            at=2,
            image="sha256:bbb",
            commit="beef",
            content={test_id: "h-new"},
            judge_model="gpt-x",
        )
    )
    opened.record(report(broken, run_id="r4", at=3, image="sha256:bbb", commit="beef"))
    (found,) = opened.timeline(test_id)
    assert [o.status for o in found.outcomes] == ["passed", "passed", "failed", "failed"]
    assert found.broke is not None
    assert (found.broke.last_pass.run, found.broke.first_fail.run) == ("r2", "r3")
    differed = {d.what: (d.before, d.after) for d in found.broke.differences}
    assert differed == {
        "agent image": ("sha256:aaa", "sha256:bbb"),
        "suite commit": ("c0ffee", "beef"),
        "test content": ("h-" + test_id, "h-new"),
        "judge model": (None, "gpt-x"),
    }
    assert found.broke.first_fail.messages == ['✗ to_match: {"pattern": "x"}']
    # A pattern finds tests by id or title; an unknown one is NotFoundError.
    assert len(opened.timeline("test 00[01]")) == 2
    with pytest.raises(history.NotFoundError, match="no test"):
        opened.timeline("nothing like it")


def test_a_break_where_nothing_recorded_changed_says_so(opened: history.History) -> None:
    opened.record(report({"t.py::a": "passed"}, run_id="r1", at=0))
    opened.record(report({"t.py::a": "failed"}, run_id="r2", at=1))
    (found,) = opened.timeline("t.py::a")
    assert found.broke is not None
    assert found.broke.differences == []


def test_flaky_counts_flips_only_while_agent_and_test_stay_the_same(
    opened: history.History,
) -> None:
    flips = ["passed", "failed", "passed", "failed", "passed"]
    for i, status in enumerate(flips):
        opened.record(
            report(
                {"t.py::flaky": status, "t.py::steady": "passed", "t.py::edited": status},
                run_id=f"r{i}",
                at=i,
                # each run of `edited` is another version of it: never a flip
                content={"t.py::edited": f"h{i}"},
            )
        )
    # the same outcomes from another agent image are another identity, flipping on its own
    opened.record(report({"t.py::flaky": "failed"}, run_id="img", at=9, image="sha256:zzz"))
    found = opened.flaky(runs=50)
    assert [f.id for f in found] == ["t.py::flaky"]
    (f,) = found
    assert (f.flips, f.failures, f.decided, f.runs, f.last_status) == (4, 2, 5, 5, "passed")
    assert f.failure_rate == pytest.approx(0.4)
    assert 0.1 < f.failure_rate_interval.low < 0.4 < f.failure_rate_interval.high < 0.9
    assert f.agent is not None
    assert f.agent.image is None
    assert opened.flaky(runs=1) == []  # one run flips nothing
    assert opened.flaky(runs=50, agent="someone else") == []


def test_regressions_are_tests_that_passed_in_the_agents_previous_run(
    opened: history.History,
) -> None:
    opened.record(report({"t.py::a": "passed", "t.py::b": "passed"}, run_id="r1", at=0))
    opened.record(report({"t.py::a": "failed", "t.py::b": "passed"}, run_id="r2", at=1))
    (found,) = opened.regressions()
    assert (found.id, found.run, found.previous, found.status) == ("t.py::a", "r2", "r1", "failed")
    assert not found.changed


def test_the_grid_is_the_newest_runs_by_every_test_they_ran(opened: history.History) -> None:
    causes = {"t.py::c": "infra"}
    opened.record(report({"t.py::a": "passed", "t.py::b": "passed"}, run_id="r1", at=0))
    opened.record(
        report(
            # a's repeats make one cell, the worst of them; c errored, not the agent's doing
            [("t.py::a", "passed"), ("t.py::a", "failed"), ("t.py::c", "errored")],
            run_id="r2",
            at=1,
            causes=causes,
        )
    )
    opened.record(
        report({"t.py::a": "errored", "t.py::b": "skipped"}, run_id="r3", at=2, agent="other")
    )
    found = opened.grid(runs=10)
    assert [c.run.uid for c in found.columns] == ["r1", "r2", "r3"]  # oldest first
    assert {r.id: r.cells for r in found.rows} == {
        "t.py::a": "PFE",
        "t.py::b": "P.S",
        "t.py::c": ".X.",
    }
    assert [r.title for r in found.rows] == ["a", "b", "c"]
    latency = found.columns[0].latency
    assert latency is not None
    assert (latency.mean_ms, latency.p50_ms, latency.p90_ms) == (12.0, 12.0, 12.0)
    # the trend each run carries, as runs() gives it
    assert found.columns[1].run.trend == opened.run("r2").trend
    assert found.columns[1].run.trend is not None
    newest = opened.grid(runs=2)
    assert [c.run.uid for c in newest.columns] == ["r2", "r3"]
    assert {r.id: r.cells for r in newest.rows}["t.py::b"] == ".S"
    assert [c.run.uid for c in opened.grid(agent="other").columns] == ["r3"]
    assert opened.grid(agent="nobody") == history.Grid(columns=[], rows=[])


def test_the_grid_with_a_label_draws_its_tests_alone(opened: history.History) -> None:
    labels = {"t.py::a": ["area:db"]}
    opened.record(report({"t.py::a": "failed", "t.py::b": "passed"}, run_id="r1", labels=labels))
    found = opened.grid(label="area:db")
    assert [r.id for r in found.rows] == ["t.py::a"]
    (column,) = found.columns
    assert (column.run.total, column.run.failed, column.run.pass_rate) == (1, 1, 0.0)


def test_baselines_last_last_green_and_by_id(opened: history.History) -> None:
    opened.record(
        report(named(2), run_id="20250101T120000Z-aaaa1111", at=0), history.RunContext(exit_code=0)
    )
    opened.record(
        report({**named(2), "t.py::test 001": "failed"}, run_id="r-red", at=1),
        history.RunContext(exit_code=1),
    )
    opened.record(
        report(named(2), run_id="r-other", at=2, agent="other"), history.RunContext(exit_code=0)
    )
    run, base = opened.baseline("last", agent="triage", suite="suite")
    assert run.uid == "r-red"
    assert {t["id"]: t["status"] for t in base["tests"]} == {
        "t.py::test 000": "passed",
        "t.py::test 001": "failed",
    }
    assert base["summary"]["failed"] == 1
    assert base["version"] == 2
    run, _ = opened.baseline("last-green", agent="triage", suite="suite")
    assert run.uid == "20250101T120000Z-aaaa1111"
    run, _ = opened.baseline("last", agent="triage", suite="suite", exclude="r-red")
    assert run.uid == "20250101T120000Z-aaaa1111"
    run, _ = opened.baseline("aaaa1111")  # the part a table shows
    assert run.uid == "20250101T120000Z-aaaa1111"
    with pytest.raises(history.NotFoundError, match="no green run"):
        opened.baseline("last-green", agent="nobody")
    with pytest.raises(history.NotFoundError, match="no run 'zzz'"):
        opened.baseline("zzz")
    # compare with the baseline: a newly failing test is a regression
    _, result = opened.compare(
        "last-green", report({**named(2), "t.py::test 000": "failed"}, run_id="new"), agent="triage"
    )
    assert result.regressed
    assert [c.id for c in result.newly_failing] == ["t.py::test 000"]


def test_prune_keeps_the_newest_runs(opened: history.History) -> None:
    for i in range(4):
        opened.record(report(named(2, prefix=f"t{i}.py::x"), run_id=f"r{i}", at=i))
    assert opened.prune(keep_runs=2) == 2
    assert [r.uid for r in opened.runs()] == ["r3", "r2"]
    assert opened.count() == (2, 4)
    assert opened.prune(keep_days=1) == 2  # 2025 is long ago
    assert opened.count() == (0, 0)


def test_labels_scope_runs_and_queries(opened: history.History) -> None:
    labels = {"t.py::a": ["area:db"]}
    opened.record(report({"t.py::a": "failed", "t.py::b": "passed"}, run_id="r1", labels=labels))
    (run,) = opened.runs(label="area:db")
    assert (run.total, run.failed, run.passed, run.pass_rate) == (1, 1, 0, 0.0)
    assert opened.runs(label="nope") == []
    assert [t.id for t in opened.timeline("t.py", label="area:db")] == ["t.py::a"]


def test_a_page_of_a_runs_results_with_its_tests(opened: history.History) -> None:
    statuses = {**named(5, prefix="t.py::ok"), "t.py::bad": "failed", "t.py::err": "errored"}
    opened.record(report(statuses, run_id="run-0001", labels={"t.py::bad": ["area:db"]}))
    page = opened.results("run-0001")
    assert (page.run, page.total, page.offset, len(page.results)) == ("run-0001", 7, 0, 7)
    assert [r.id for r in page.results] == sorted(statuses)  # test id, then repeat
    bad = next(r for r in page.results if r.id == "t.py::bad")
    assert (bad.status, bad.labels, bad.file, bad.content_hash) == (
        "failed",
        ["area:db"],
        "t.py",
        "h-t.py::bad",
    )
    failing = opened.results("0001", status="failed")  # a unique part of the uid names it
    assert [r.id for r in failing.results] == ["t.py::bad"]
    assert failing.total == 1
    second = opened.results("run-0001", offset=2, limit=2)
    assert ([r.id for r in second.results], second.total) == ([r.id for r in page.results][2:4], 7)
    with pytest.raises(history.NotFoundError, match="no status 'fine'"):
        opened.results("run-0001", status="fine")
    with pytest.raises(history.NotFoundError, match="no run 'nope'"):
        opened.results("nope")


def test_a_page_as_json_is_the_pages_models_json(opened: history.History) -> None:
    # What the server sends (written from the rows, no models) is the typed page's JSON,
    # byte for byte, whatever the filter: labels shared or none, messages, a page cut short.
    statuses = {**named(4, prefix="t.py::ok"), "t.py::bad": "failed", "t.py::err": "errored"}
    labels = {"t.py::bad": ["area:db"], "t.py::ok 000": ["area:db"], "t.py::err": ["x", "y"]}
    opened.record(report(statuses, run_id="run-0002", labels=labels))
    for asked in ({}, {"status": "failed"}, {"offset": 1, "limit": 3}, {"offset": 9}):
        typed = opened.results("run-0002", **asked)
        assert opened.results_json("run-0002", **asked) == typed.model_dump_json().encode()
    sent = {r["id"]: r for r in json.loads(opened.results_json("0002"))["results"]}
    assert (sent["t.py::ok 001"]["labels"], sent["t.py::err"]["labels"]) == ([], ["x", "y"])
    with pytest.raises(history.NotFoundError, match="no run 'nope'"):
        opened.results_json("nope")


def test_runs_filtered_by_branch_and_by_how_they_ended(opened: history.History) -> None:
    def on(branch: str, data: dict[str, Any]) -> dict[str, Any]:
        data["provenance"]["suite"]["git_branch"] = branch
        return data

    opened.record(on("main", report({"t.py::a": "passed"}, run_id="green", at=0)),
                  history.RunContext(exit_code=0))  # fmt: skip
    opened.record(on("main", report({"t.py::a": "failed"}, run_id="red", at=1)),
                  history.RunContext(exit_code=1))  # fmt: skip
    opened.record(on("dev", report({"t.py::a": "errored"}, run_id="infra", at=2,
                                   causes={"t.py::a": "infra"})))  # fmt: skip
    stopped = on("dev", report({"t.py::a": "passed"}, run_id="cut", at=3))
    stopped["summary"]["interrupted"] = True
    opened.record(stopped)
    assert [r.uid for r in opened.runs(branch="main")] == ["red", "green"]
    assert [r.uid for r in opened.runs(branch="dev")] == ["cut", "infra"]
    assert [r.uid for r in opened.runs(ending="green")] == ["green"]
    assert [r.uid for r in opened.runs(ending="failed")] == ["red"]
    assert [r.uid for r in opened.runs(ending="errored")] == ["infra"]
    assert [r.uid for r in opened.runs(ending="incomplete")] == ["cut"]
    assert [r.uid for r in opened.runs(offset=1, limit=2)] == ["infra", "red"]


# -- the schema -------------------------------------------------------------------------------


def test_head_is_the_newest_migration_and_the_tables_match_it(url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    assert database.revisions()[-1] == migrations.HEAD
    with history.open_history(url) as opened, opened.engine.connect() as conn:
        found = compare_metadata(MigrationContext.configure(conn), tables.metadata)
    assert found == []


def test_a_history_made_by_the_first_revision_is_migrated_in_place(url: str) -> None:
    from alembic import command

    first = database.revisions()[0]
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        command.upgrade(database.alembic_config(conn), first)
    engine.dispose()
    with history.open_history(url) as opened:
        assert opened.revision() == migrations.HEAD
        opened.record(report(named(2), run_id="r1"))
        assert opened.count() == (1, 2)


def test_a_history_written_by_a_newer_agent_health_is_refused(url: str) -> None:
    with history.open_history(url) as opened, opened.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
        conn.execute(sa.text("UPDATE history_info SET value = '9.9.9'"))
    with pytest.raises(history.NewerSchemaError) as caught:
        history.open_history(url)
    said = str(caught.value)
    assert "schema revision 9999 (written by agent-health 9.9.9)" in said
    assert f"knows revisions up to {migrations.HEAD}" in said
    assert "upgrade agent-health" in said
    assert "\n" not in said


def test_opening_an_up_to_date_history_loads_no_alembic(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with history.open_history(f"sqlite:///{path}"):
        pass
    code = (
        "import sys\n"
        "from agent_health import history\n"
        f"history.open_history({f'sqlite:///{path}'!r}).close()\n"
        "print([m for m in sys.modules if m.startswith('alembic')])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- reliability ------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    from agent_health import history
    from support.history_support import named, report
    url, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with history.open_history(url) as h:
        for i in range(runs):
            h.record(report(named(200), run_id=f"{{name}}-{{i}}", at=i, agent=name))
    print("done")
    """
)


def test_two_processes_writing_at_once_lose_nothing(url: str, tmp_path: Path) -> None:
    history.open_history(url).close()  # the schema first: both writers then only write
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(ROOT / "tests")))
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), url, name, "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for name in ("alpha", "beta")
    ]
    for w in writers:
        _out, err = w.communicate(timeout=240)
        assert w.returncode == 0, err
    with history.open_history(url) as opened:
        assert opened.count() == (10, 2000)
        assert {r.uid for r in opened.runs(limit=20)} == {
            f"{n}-{i}" for n in ("alpha", "beta") for i in range(5)
        }


def test_two_first_runs_at_once_both_find_the_schema(url: str, tmp_path: Path) -> None:
    # Neither finds a schema: both migrate at once; one makes it, the other waits for it
    # (SQLite's write lock) or finds it made when its own attempt fails (PostgreSQL).
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(ROOT / "tests")))
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), url, name, "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta", "gamma")
    ]
    for w in writers:
        _, err = w.communicate(timeout=240)
        assert w.returncode == 0, err
    with history.open_history(url) as opened:
        assert opened.count() == (3, 600)
        assert opened.revision() == migrations.HEAD


THREADS = textwrap.dedent(
    """
    import sys, threading
    from agent_health import history
    folder = sys.argv[1]
    for round_ in range(5):
        urls = [f"sqlite:///{folder}/{round_}-{i}.db" for i in range(8)]
        threads = [threading.Thread(target=lambda u=u: history.open_history(u).close())
                   for u in urls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for u in urls:
            with history.open_history(u) as h:
                assert h.revision() is not None, u
    print("done")
    """
)


def test_histories_first_opened_in_several_threads_at_once_are_each_migrated(
    tmp_path: Path,
) -> None:
    # Alembic keeps its migration context per process: threads migrating at once must not
    # run one another's operations (on SQLite, that crashed the process). In a subprocess,
    # so that a crash is this test's failure, not the end of the test session.
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]


KILLED = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests!r})
    import sqlalchemy as sa
    from agent_health import history
    from support.history_support import named, report
    h = history.open_history(sys.argv[1])
    inserts = []

    @sa.event.listens_for(h.engine, "after_cursor_execute")
    def paused(conn, cursor, statement, parameters, context, executemany):
        # the run's row and its results are written, the transaction not committed: stop here
        if statement.lstrip().upper().startswith("INSERT INTO RESULTS"):
            print("mid-write", flush=True)
            time.sleep(600)

    h.record(report(named(50), run_id="killed"))
    """
)


def test_a_writer_killed_mid_transaction_leaves_no_half_run(url: str, tmp_path: Path) -> None:
    with history.open_history(url) as opened:
        opened.record(report(named(5), run_id="before"))
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(tests=str(ROOT / "tests")))
    writer = subprocess.Popen(
        [sys.executable, str(script), url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "mid-write", writer.stderr
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=60)
    time.sleep(0.1)
    with history.open_history(url) as opened:
        assert [r.uid for r in opened.runs()] == ["before"]
        assert opened.count() == (1, 5)
        opened.record(report(named(5), run_id="after", at=1))  # and it goes on
        assert opened.count() == (2, 10)


def test_a_locked_history_is_one_line_after_its_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    history.open_history(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with (
            history.open_history(f"sqlite:///{path}?timeout=0.2") as opened,
            pytest.raises(history.UnavailableError) as caught,
        ):
            opened.record(report(named(1), run_id="r"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked by another writer past the busy timeout" in str(caught.value)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_corrupt_history_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    path.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(history.UnavailableError) as caught:
        history.open_history(f"sqlite:///{path}")
    said = str(caught.value)
    assert "not a readable SQLite database" in said
    assert "move the file aside" in said


def test_a_reader_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(history.NotFoundError, match="no history at"):
        history.open_history(f"sqlite:///{tmp_path / 'none' / 'h.db'}", create=False)
    assert not (tmp_path / "none").exists()


def test_no_credential_in_any_message_of_an_unreachable_or_refused_postgres(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from support import postgres_support

    monkeypatch.delenv("PGPASSWORD", raising=False)
    secret = postgres_support.PASSWORD
    # the password in the URL, against a wrong database name: refused
    url = postgres_server.url("no_such_db", password=True)
    with pytest.raises(history.UnavailableError) as caught:
        history.open_history(url)
    said = str(caught.value)
    assert secret not in said
    assert "no_such_db" in said
    assert "unreachable or refused" in said
    assert (
        history.parse(url).shown
        == f"postgresql://agenthealth@127.0.0.1:{postgres_server.port}/no_such_db"
    )
    # a wrong password from a file: refused, and the file's content never shown
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-password\n")
    monkeypatch.setenv("AGENT_HEALTH_HISTORY_PASSWORD_FILE", str(wrong))
    with pytest.raises(history.UnavailableError) as caught:
        history.open_history(postgres_server.url("postgres"))
    assert "not-the-password" not in str(caught.value)
    assert "password authentication failed" in str(caught.value)
    # the right one from the file works, with no password in the URL or environment
    right = tmp_path / "right"
    right.write_text(secret + "\n")
    monkeypatch.setenv("AGENT_HEALTH_HISTORY_PASSWORD_FILE", str(right))
    with history.open_history(postgres_server.url(postgres_server.new_database())) as opened:
        assert opened.revision() == migrations.HEAD
        assert secret not in repr(opened)
        assert secret not in str(opened.engine.url)


# -- where a history is -----------------------------------------------------------------------


def test_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "suite" / "agent-health.config.py"
    config.parent.mkdir()
    found = history.resolve(None, config_file=config, environ={})
    assert found is not None
    assert found.path == config.parent / ".agent-health" / "history.db"
    assert found.origin == "the default"
    relative = history.resolve(None, configured="sqlite:///h/x.db", config_file=config, environ={})
    assert relative is not None
    assert relative.path == config.parent / "h" / "x.db"
    from_env = history.resolve(None, environ={"AGENT_HEALTH_HISTORY": "sqlite:///e.db"})
    assert from_env is not None
    assert from_env.path == tmp_path / "e.db"
    assert history.resolve(None, configured=False, config_file=config, environ={}) is None
    with pytest.raises(history.LocationError, match="contradict"):
        history.resolve("sqlite:///f.db", disabled=True)
    with pytest.raises(history.LocationError, match="unknown history URL scheme 'mysql'"):
        history.parse("mysql://u:pw@h/db")
    with pytest.raises(history.LocationError, match="names no file"):
        history.parse("sqlite://")
    with pytest.raises(history.LocationError, match="names no database"):
        history.parse("postgresql://u@h:5432")
    assert history.redact("postgresql://u:pw@h:1/db?password=pw") == "postgresql://u@h:1/db"


def test_ci_metadata_from_the_standard_variables() -> None:
    github = history.ci_from_env(
        {
            "GITHUB_ACTIONS": "true",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_RUN_ID": "42",
            "GITHUB_RUN_ATTEMPT": "2",
            "GITHUB_JOB": "test",
            "GITHUB_SHA": "abc",
            "GITHUB_REF": "refs/pull/7/merge",
            "GITHUB_HEAD_REF": "feature",
        }
    )
    assert github is not None
    assert github.model_dump() == {
        "provider": "github-actions",
        "url": "https://github.com/o/r/actions/runs/42/attempts/2",
        "job": "test",
        "commit": "abc",
        "branch": "feature",
        "pr": "7",
    }
    gitlab = history.ci_from_env(
        {
            "GITLAB_CI": "true",
            "CI_JOB_URL": "https://gitlab.example/j/1",
            "CI_JOB_NAME": "t",
            "CI_COMMIT_SHA": "def",
            "CI_COMMIT_REF_NAME": "main",
            "CI_MERGE_REQUEST_IID": "3",
        }
    )
    assert gitlab is not None
    assert (gitlab.provider, gitlab.pr, gitlab.branch) == (
        "gitlab-ci",
        "3",
        "main",
    )
    jenkins = history.ci_from_env(
        {
            "JENKINS_URL": "https://ci/",
            "BUILD_URL": "https://user:tok@ci/job/x/5/",
            "JOB_NAME": "x",
            "GIT_COMMIT": "0a",
            "BRANCH_NAME": "dev",
            "CHANGE_ID": "9",
        }
    )
    assert jenkins is not None
    assert jenkins.url == "https://ci/job/x/5/"
    buildkite = history.ci_from_env(
        {
            "BUILDKITE": "true",
            "BUILDKITE_BUILD_URL": "https://bk/b/1",
            "BUILDKITE_JOB_ID": "j",
            "BUILDKITE_LABEL": "tests",
            "BUILDKITE_COMMIT": "1b",
            "BUILDKITE_BRANCH": "b",
            "BUILDKITE_PULL_REQUEST": "false",
        }
    )
    assert buildkite is not None
    assert (buildkite.url, buildkite.pr) == ("https://bk/b/1#j", None)
    assert history.ci_from_env({"CI": "true"}) == history.CI(provider="ci")
    assert history.ci_from_env({}) is None
