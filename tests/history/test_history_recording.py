"""What recording writes, held still: a fixed sequence of runs recorded as ``agent-health run``
records them (``prepare`` while it runs, ``record`` at its end, then the history line) gives
the very tables and lines of ``tests/data/history_recorded.json``, written by the recording
code before its speed work (issue #40). A change that makes recording cheaper must not
change a row, a trend or a line; a change that means to change them rewrites that file
(``AGENT_HEALTH_WRITE_RECORDED=1``) and says why in its commit.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent_health import history
from agent_health.cli.run import archive
from agent_health.engine import reports
from support.history_support import T0, named, report

EXPECTED = Path(__file__).resolve().parents[1] / "data" / "history_recorded.json"
SKIPPED_COLUMNS = {("runs", "recorded_at")}
"""Columns whose value is the moment of recording: left out of the comparison."""


def _tables(path: Path) -> dict[str, list[list[Any]]]:
    """Every table of the SQLite history at ``path`` (its schema's revision aside), each
    row in primary-key order, the columns of :data:`SKIPPED_COLUMNS` left out."""
    db = sqlite3.connect(path)
    try:
        names = [
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        found: dict[str, list[list[Any]]] = {}
        for name in names:
            if name == "alembic_version":
                continue
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({name})")]
            keep = [c for c in columns if (name, c) not in SKIPPED_COLUMNS]
            rows = db.execute(f"SELECT {', '.join(keep)} FROM {name}").fetchall()
            found[name] = [keep, *sorted([list(r) for r in rows], key=repr)]
        return found
    finally:
        db.close()


def _live(n: int, run_id: str, at: int) -> reports.RunReport:
    """A live report of ``n`` tests (two of them failing with their gates' reasons), as
    ``run`` hands it to the history."""
    data = report(
        {**named(n), "t.py::test 001": "failed", "t.py::test 002": "errored"},
        run_id=run_id,
        at=at,
        causes={"t.py::test 002": "infra"},
    )
    interval = {"low": 0.5, "high": 0.9, "method": "wilson", "n": n}
    data["summary"].update(
        pass_rate_interval=interval, score_interval=interval, flaky_count=0, not_run=0
    )
    for t in data["tests"]:
        t["turns"] = [{"prompt": "hi"}, {"prompt": "again"}] if t["status"] == "failed" else []
        t["ended"] = {"reason": "a goal reached, or not"} if t["turns"] else None
    return reports.RunReport.model_validate(data)


def _record_as_a_run(
    opened: history.History, data: Any, *, agent: str | None, at: int, **told: Any
) -> str:
    """``data`` recorded as ``run`` records a run: its tests written and its previous run read
    while it runs, the run and its trend at its end; the history line it prints."""
    tests = data.tests if isinstance(data, reports.RunReport) else data["tests"]
    suite: concurrent.futures.Future[str] = concurrent.futures.Future()
    suite.set_result("suite")
    cases = [Case(t) for t in {str(t["id"]): t for t in tests}.values()]  # one per test, as loaded
    line = archive.Upcoming(agent, suite, T0 + timedelta(minutes=at))
    opened_future: concurrent.futures.Future[history.History] = concurrent.futures.Future()
    opened_future.set_result(opened)
    known = archive._prepare(opened_future, cases, line)
    context = history.RunContext(source="local", suite="suite", exit_code=1, **told)
    recorded = opened.record(data, context, known)
    return archive._line(opened, recorded, "suite").split("; ", 1)[1]


class Case:
    """What ``archive._prepare`` reads of a loaded test."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.id = entry["id"]
        self.title = entry["name"]
        self.file = entry["file"]
        self.line = entry["line"]
        self.labels = tuple(entry.get("labels") or ())
        self.content_hash = entry.get("content_hash")


def _recorded(where: Path) -> dict[str, Any]:
    """The fixed sequence of recordings, and what they left: the tables and the lines."""
    lines: list[str] = []
    with history.open_history(f"sqlite:///{where}") as h:
        labels = {"t.py::test 000": ["kind:smoke", "area:pay"], "t.py::test 003": ["ü"]}
        first = report(named(12), run_id="r1", at=0, labels=labels)
        lines.append(_record_as_a_run(h, first, agent="triage", at=0))
        # Another agent, and a run whose tests fail, error and are renamed and relabelled.
        lines.append(
            _record_as_a_run(
                h, report(named(12), run_id="o1", at=1, agent="other"), agent="other", at=1
            )
        )
        second = report(
            {**named(12, "failed"), "t.py::new": "passed", "t.py::test 004": "errored"},
            run_id="r2",
            at=2,
            labels={"t.py::test 000": ["kind:smoke"], "t.py::new": ["fresh"]},
            causes={"t.py::test 004": "judge"},
            content={"t.py::test 005": "changed"},
            image="sha256:abc",
        )
        second["tests"][3]["name"] = "renamed"
        second["tests"][6].update(skip_reason="not today", status="skipped", error=None)
        second["tests"][7]["quarantined"] = True
        second["tests"][8]["signals"][0]["reasoning"] = "  a reason\nover  two lines  " * 20
        lines.append(_record_as_a_run(h, second, agent="triage", at=2, ledger_verified=True))
        # A live report, as run hands it over.
        lines.append(_record_as_a_run(h, _live(12, "r3", 3), agent="triage", at=3))
        # A run recorded while the next was running: the next is compared with it.
        tests = report(named(12), run_id="r5", at=5)["tests"]
        suite_future: concurrent.futures.Future[str] = concurrent.futures.Future()
        suite_future.set_result("suite")
        opened_future: concurrent.futures.Future[history.History] = concurrent.futures.Future()
        opened_future.set_result(h)
        known = archive._prepare(
            opened_future,
            [Case(t) for t in tests],
            archive.Upcoming("triage", suite_future, T0 + timedelta(minutes=5)),
        )
        lines.append(
            _record_as_a_run(h, report(named(12), run_id="r4", at=4), agent="triage", at=4)
        )
        recorded = h.record(
            report(named(12), run_id="r5", at=5), history.RunContext(suite="suite"), known
        )
        lines.append(archive._line(h, recorded, "suite").split("; ", 1)[1])
        # An older report imported later (renews the next run's trend), one without a run
        # id, the same run again, a later attempt, and an agent matrix.
        h.record(
            report(named(12, "failed"), run_id="old", at=-5), history.RunContext(suite="suite")
        )
        h.record(report(named(3), run_id=None, at=6))
        again = h.record(report(named(12), run_id="r5", at=5), history.RunContext(suite="suite"))
        lines.append(archive._line(h, again, "suite").split("; ", 1)[1])
        h.record(
            report({**named(12), "t.py::test 009": "errored"}, run_id="r4", at=4),
            history.RunContext(suite="suite", attempt=1),
        )
        matrix = report({}, run_id="m1", at=7)
        matrix["tests"] = [
            {**t, "agent": agent}
            for agent, status in (("a", "passed"), ("b", "failed"))
            for t in report({"t.py::x": status, "t.py::y": "passed"}, run_id=None)["tests"]
        ]
        matrix["provenance"]["agents"] = [{"name": "a", "connector": "rest"}, {"name": "b"}]
        matrix["matrix"] = {
            "agents": ["a", "b"],
            "summaries": {
                "a": {"total": 2, "passed": 2, "failed": 0, "errored": 0, "skipped": 0},
                "b": {"total": 2, "passed": 1, "failed": 1, "errored": 0, "skipped": 0},
            },
        }
        recorded = h.record(
            matrix,
            history.RunContext(
                suite="suite",
                ci=history.CI(
                    provider="github",
                    url="https://ci/1",
                    job="test",
                    commit="c0ffee",
                    branch="main",
                    pr="7",
                ),
            ),
        )
        lines.append(archive._line(h, recorded, "suite").split("; ", 1)[1])
    return {"lines": lines, "tables": _tables(where)}  # fmt: skip


def test_recording_writes_the_rows_trends_and_lines_it_always_wrote(tmp_path: Path) -> None:
    got = json.loads(json.dumps(_recorded(tmp_path / "history.db")))
    if os.environ.get("AGENT_HEALTH_WRITE_RECORDED") == "1":
        EXPECTED.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert got["lines"] == expected["lines"]
    assert sorted(got["tables"]) == sorted(expected["tables"])
    for name, rows in expected["tables"].items():
        assert got["tables"][name] == rows, name


def _statements(opened: history.History) -> list[str]:
    """Every statement ``opened`` runs from now on (appended as they run)."""
    import sqlalchemy as sa

    seen: list[str] = []
    sa.event.listen(
        opened.engine, "before_cursor_execute", lambda *args: seen.append(" ".join(args[2].split()))
    )
    return seen


def test_listing_runs_reads_every_trends_previous_run_in_one_statement(tmp_path: Path) -> None:
    # The history line lists an agent's newest runs with their trends: each trend names its
    # previous run, read for them all at once (one statement per listed run before).
    with history.open_history(f"sqlite:///{tmp_path / 'h.db'}") as h:
        for at in range(5):
            h.record(report(named(4), run_id=f"r{at}", at=at))
        seen = _statements(h)
        runs = h.runs(agent="triage", limit=5)
    assert [r.trend.previous if r.trend else None for r in runs] == ["r3", "r2", "r1", "r0", None]
    assert len([s for s in seen if s.startswith("SELECT")]) == 2, seen


def test_recording_reads_the_runs_agent_suite_and_start_once(tmp_path: Path) -> None:
    # Its previous run (for its trend) and its next (recorded earlier, whose trend it renews)
    # are both found from the run's agent, suite and start: read once for it, and once for
    # the next run, whose own previous run is found again (three reads before).
    with history.open_history(f"sqlite:///{tmp_path / 'h.db'}") as h:
        h.record(report(named(4), run_id="r0", at=0))
        h.record(report(named(4, "failed"), run_id="r2", at=2))
        seen = _statements(h)
        h.record(report(named(4), run_id="r1", at=1))
        trends = [h.run(uid).trend for uid in ("r1", "r2")]
    assert [t.previous if t else None for t in trends] == ["r0", "r1"]
    place = [s for s in seen if s.startswith("SELECT runs.id, runs.started_at, runs.suite")]
    assert len(place) == 2, seen
