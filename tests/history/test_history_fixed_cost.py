"""What a run pays for its history beyond SQLAlchemy's import, held by what it does, not by
timing it (issue #40; bench/README.md's figures): the run's part of the history — opening
it, ``prepare``, ``record``, the history line — done in a fresh interpreter, as ``agent-health
run`` does it, must not build the models or import the modules only the ``history``
command's queries need, and the line reads what it shows in one statement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from agent_health import history
from agent_health.cli.run import archive
from support.history_support import named, report

TESTS = Path(__file__).resolve().parents[1]

RUN_PATH = """
import concurrent.futures, json, sys
from datetime import timedelta

sys.path.insert(0, sys.argv[2])
from pydantic import BaseModel

from agent_health.cli.run import archive
from agent_health.engine import reports
from support.history_support import T0, named, report

data = report(named(3), run_id="r9", at=9)
live = reports.RunReport.model_validate(data)
archive._import()
opened = concurrent.futures.Future()
opened.set_result(archive._open(sys.argv[1]))
suite = concurrent.futures.Future()
suite.set_result("suite")
cases = []
for t in data["tests"]:
    case = type("Case", (), {})()
    case.id, case.title, case.file, case.line = t["id"], t["name"], t["file"], t["line"]
    case.labels, case.content_hash = tuple(t["labels"]), t["content_hash"]
    cases.append(case)
upcoming = archive.Upcoming("triage", suite, T0 + timedelta(minutes=9))
known = archive._prepare(opened, cases, upcoming)
from agent_health import history
from agent_health.history import facts

context = history.RunContext(source="local", suite="suite", exit_code=0)
recorded = opened.result().record(live, context, known)
line = archive._line(opened.result(), recorded, "suite")
opened.result().close()
built = sorted(
    name
    for module in ("facts", "answers")  # answers: not imported, if all is well
    for name, value in vars(sys.modules.get(f"agent_health.history.{module}", facts)).items()
    if isinstance(value, type) and issubclass(value, BaseModel) and value.__pydantic_complete__
)
modules = sorted(name for name in sys.modules if name.startswith("agent_health.history."))
import dataclasses

dataclassed = sorted(
    f"{name}.{value.__name__}"
    for name in modules
    for value in vars(sys.modules[name]).values()
    if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == name
)
print(json.dumps({"line": line, "built": built, "modules": modules, "dataclasses": dataclassed}))
"""


def _a_runs_history(where: Path) -> dict[str, object]:
    """What the run's part of the history built and imported in a fresh interpreter, and
    its line, recording a fourth run of ``triage`` in the history at ``where``."""
    url = f"sqlite:///{where}"
    with history.open_history(url) as h:
        for at in range(3):
            h.record(report(named(3), run_id=f"r{at}", at=at), history.RunContext(exit_code=0))
    done = subprocess.run(
        [sys.executable, "-c", RUN_PATH, url, str(TESTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_runs_history_line_builds_no_run_model(tmp_path: Path) -> None:
    found = _a_runs_history(tmp_path / "h.db")
    assert "triage over its last 4 runs: pass rate 100% → 100% → 100% → 100%" in str(found["line"])
    # The line shows pass rates and the newest run's mark: a whole Run (fifty fields, its
    # agent, CI and intervals) of each listed run was a third of the history's own cost.
    assert "Run" not in found["built"], found["built"]
    assert "Interval" not in found["built"], found["built"]


def test_a_runs_history_imports_neither_the_queries_nor_their_answers(tmp_path: Path) -> None:
    found = _a_runs_history(tmp_path / "h.db")
    # The history command's queries (1,300 lines) and the fifteen models they answer with
    # (a run, a test across runs, flaky tests, the grid, a run's results) are not a run's.
    assert "agent_health.history.trends" in found["modules"], found["modules"]
    assert "agent_health.history.queries" not in found["modules"], found["modules"]
    assert "agent_health.history.answers" not in found["modules"], found["modules"]


def test_a_runs_history_makes_no_dataclass_but_its_locations(tmp_path: Path) -> None:
    found = _a_runs_history(tmp_path / "h.db")
    # A dataclass compiles its methods as its module is imported (a frozen one, about 2 M
    # instructions here); the location is the one a run with a history needs.
    assert found["dataclasses"] == ["agent_health.history.location.Location"]


def test_the_history_line_reads_each_agents_runs_in_one_statement(tmp_path: Path) -> None:
    import sqlalchemy as sa

    with history.open_history(f"sqlite:///{tmp_path / 'h.db'}") as h:
        recorded = []
        for at in range(3):
            data = report(named(3), run_id=f"r{at}", at=at)
            recorded = h.record(data, history.RunContext(exit_code=0))
        seen: list[str] = []
        sa.event.listen(h.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        line = archive._line(h, recorded, "suite")
    assert line.endswith("triage over its last 3 runs: pass rate 100% → 100% → 100%"), line
    # The previous runs' uids (a trend names its previous run) are not shown: not read.
    assert len([s for s in seen if s.lstrip().upper().startswith("SELECT")]) == 1, seen


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////tmp/suite/.agent-health/history.db",
        "sqlite:////tmp/a folder/h%20istory.db?timeout=2.5",
        "sqlite:////tmp/h.db?timeout=1&mode=ro&mode=rw&cache=shared",
    ],
)
def test_a_sqlite_historys_url_is_read_as_sqlalchemy_reads_it(url: str) -> None:
    import sqlalchemy as sa
    from agent_health.history import database

    # Made from its parts, not by make_url's parser (a regular expression compiled on its
    # first use): the same database and query.
    path, query = database._sqlite_parts(url)
    assert sa.URL.create("sqlite", database=path, query=query) == sa.make_url(url)


def test_recording_a_run_reads_no_uid_of_its_previous_run(tmp_path: Path) -> None:
    import sqlalchemy as sa

    with history.open_history(f"sqlite:///{tmp_path / 'h.db'}") as h:
        h.record(report(named(3), run_id="r0", at=0))
        seen: list[str] = []
        sa.event.listen(h.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        h.record(report(named(3, "failed"), run_id="r1", at=1))
        recording = list(seen)
        (run,) = h.runs(limit=1)
    # The row keeps its trend's previous run by id: its uid is read when a trend is shown.
    uids = [s for s in recording if " ".join(s.split()).startswith("SELECT runs.uid FROM")]
    assert not uids, recording
    assert run.trend is not None
    assert (run.trend.previous, run.trend.effect, run.trend.tests) == ("r0", -1.0, 3)


def test_a_live_reports_summary_is_recorded_as_its_json_would_be() -> None:
    from agent_health.engine import reports
    from agent_health.history import ingest

    # What recording keeps of a summary read from the live report's attributes (not its
    # serializer, which loads the report's optional parts) is what its JSON shape gives.
    data = report({**named(3), "t.py::test 001": "failed"}, run_id="r7", at=7)
    interval = {"low": 0.25, "high": 0.875, "method": "wilson", "n": 3}
    data["summary"].update(
        pass_rate_interval=interval,
        score_interval={**interval, "low": 0.125},
        flaky_count=1,
        not_run=2,
        interrupted=True,
        stopped="-x: the first failure",
        budget={
            "limits": {"max_cost_usd": 0.01},
            "spent": {
                **dict.fromkeys(("tokens", "agent_tokens", "judge_tokens"), 30),
                **dict.fromkeys(("cost_usd", "agent_cost_usd", "judge_cost_usd"), 0.012),
                **dict.fromkeys(("tokens_unknown", "cost_unknown"), 0),
                "tokens_estimated": None,
                "cost_usd_estimated": None,
                "duration_s": 1.5,
            },
            "exhausted": "max_cost_usd",
            "reason": "spent $0.012 of $0.01",
            "skipped": 2,
        },
    )
    live = reports.RunReport.model_validate(data)
    light, whole = ingest.recorded_data(live), ingest.report_data(live)
    assert ingest._counts(light["summary"]) == ingest._counts(whole["summary"])
    assert ingest._counts(light["summary"])["budget_stop"] == "max_cost_usd"
    assert {k: v for k, v in light.items() if k != "summary"} == {
        k: v for k, v in whole.items() if k != "summary"
    }
