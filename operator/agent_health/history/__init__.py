"""The history: every run remembered, in SQLite by default and PostgreSQL for a team
(docs/history.md).

The face of the package — everything a command, a page, a CI reporter or the operator
calls::

    from agent_health import history

    with history.open_history("sqlite:///.agent-health/history.db") as h:
        h.record(report, history.RunContext(source="ci", exit_code=0, ci=history.ci_from_env()))
        for run in h.runs(agent="triage", limit=10):        # newest first, each with its trend
            print(run.uid, run.pass_rate, run.trend and run.trend.mark)
        (timeline,) = h.test("test_triage.py::payment RCA")   # one test across runs
        h.flaky(runs=50)                                      # flips, failure rate, Wilson
        h.regressions(runs=10)
        h.grid(runs=100)                                      # runs × tests, for a page
        run, report = h.baseline("last-green", agent="triage") # a report compare reads
        history.write_page(Path("history-page"), h)           # the history page (--html)

``history.short(uid)`` is a run's uid as tables and pages show it.

Every answer is a typed value of :mod:`.answers` (what a recording is told and writes:
:mod:`.facts`): pydantic, ``model_dump(mode="json")`` for JSON. Every method of :class:`History`
blocks: async code calls it in a thread. Errors are :mod:`.errors`' one tree, each one line
naming the history without its password.

Names load on first use (PEP 562): ``agent-health list``, ``--help`` and test files never
import SQLAlchemy; :mod:`.location` (resolving a URL) is the standard library alone.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from agent_health.history.answers import (
        Break,
        Column,
        Difference,
        Flaky,
        Grid,
        Interval,
        Latency,
        Outcome,
        Regression,
        Result,
        Results,
        Row,
        Run,
        TestHistory,
        Trend,
    )
    from agent_health.history.ci import ci_from_env
    from agent_health.history.database import History, open_history
    from agent_health.history.errors import (
        HistoryError,
        LocationError,
        NewerSchemaError,
        NotFoundError,
        UnavailableError,
    )
    from agent_health.history.facts import CI, Agent, Ending, Recorded, RunContext, short
    from agent_health.history.ingest import Upcoming
    from agent_health.history.location import Location, default_location, parse, redact, resolve
    from agent_health.history.page import write_page

_WHERE = {
    "ci_from_env": "ci",
    "History": "database",
    "open_history": "database",
    **dict.fromkeys(
        ("HistoryError", "LocationError", "NewerSchemaError", "NotFoundError", "UnavailableError"),
        "errors",
    ),
    **dict.fromkeys(
        ("CI", "Agent", "Ending", "Recorded", "RunContext", "short"),
        "facts",
    ),
    **dict.fromkeys(
        (
            "Break",
            "Column",
            "Difference",
            "Flaky",
            "Grid",
            "Interval",
            "Latency",
            "Outcome",
            "Regression",
            "Result",
            "Results",
            "Row",
            "Run",
            "TestHistory",
            "Trend",
        ),
        "answers",
    ),
    "write_page": "page",
    "Upcoming": "ingest",
    **dict.fromkeys(("Location", "default_location", "parse", "redact", "resolve"), "location"),
}


def __getattr__(name: str) -> _typing.Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("_"))})


__all__ = [
    "CI",
    "Agent",
    "Break",
    "Column",
    "Difference",
    "Ending",
    "Flaky",
    "Grid",
    "History",
    "HistoryError",
    "Interval",
    "Latency",
    "Location",
    "LocationError",
    "NewerSchemaError",
    "NotFoundError",
    "Outcome",
    "Recorded",
    "Regression",
    "Result",
    "Results",
    "Row",
    "Run",
    "RunContext",
    "TestHistory",
    "Trend",
    "UnavailableError",
    "Upcoming",
    "ci_from_env",
    "default_location",
    "open_history",
    "parse",
    "redact",
    "resolve",
    "short",
    "write_page",
]
