"""The report's models are filled by agent-health's own code without validation
(``model_construct``: a run that writes no report file builds none of their validators).
What each holds must be exactly what validation would have made of it: the JSON written is
the same bytes, and so is every value read from it in Python (a float field never holds an
int, which validation would turn into ``1.0``: the JSON is written by the field's type
either way, ``model_dump()`` and what the terminal prints are not)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agent_health.connectors.protocol import TokenUsage
from agent_health.engine import reports
from agent_health.engine.reports import provenance
from agent_health.engine.reports.report import RunReport
from agent_health.sdk.results import TestResult


def tr(title: str, status: str, repeat: int = 0, **kw: Any) -> TestResult:
    fields: dict[str, Any] = {
        "id": f"test_a.py::{title}",
        "name": title,
        "title": title,
        "file": "test_a.py",
        "line": 1,
        "status": status,
        "repeat": repeat,
        "run_id": f"{title}-{repeat}",
        "score": {"passed": 1.0, "failed": 0.0, "flaky": 1.0}.get(status),
        "cause": "agent" if status == "errored" else None,
        **kw,
    }
    return TestResult(**fields)


def whole_costs(cost: int) -> dict[str, Any]:
    # Whole numbers where the report's fields are floats: validation would make them 1.0.
    return {
        "total_tokens": 10,
        "cost_usd": cost,
        "unpriced_models": [{"model": "m", "tokens": 4}],
    }


def mixed() -> list[TestResult]:
    return [
        tr("a", "passed", labels=("smoke", "area:a"), metrics=whole_costs(1)),
        tr("b", "failed", labels=("smoke",), metrics=whole_costs(2)),
        tr("c", "errored", labels=("area:a",)),
        tr("d", "skipped"),
        tr("e", "flaky", token_usage=TokenUsage(prompt=7, completion=3)),
        tr("q", "failed", quarantined=True),
    ]


def repeated() -> list[TestResult]:
    return [
        tr(t, s, repeat=i)
        for t, statuses in (("a", "ppf"), ("b", "ppp"), ("c", "fef"))
        for i, s in enumerate(statuses)
        for s in [{"p": "passed", "f": "failed", "e": "errored"}[s]]
    ]


def matrix() -> list[TestResult]:
    return [
        tr(f"t{i}", "passed" if i < 2 or agent == "good" else "failed", agent=agent)
        for i in range(4)
        for agent in ("good", "faulty")
    ]


def what_ran() -> reports.Provenance:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    agent = reports.AgentInfo.model_construct(name="a", connector="rest", url="http://x/run")
    return reports.collect_provenance(
        paths=[Path("tests")],
        argv=["agent-health", "run", "tests"],
        agent=agent,
        agents=[agent],
        judge=reports.JudgeInfo.model_construct(provider=None, model=None, skipped=True),
        config_file=None,
        ledger=None,
        started_at=at,
        ended_at=at,
        git=provenance.GitState("abc", False, "main"),
        selection=reports.Selection.model_construct(grep=["x"], labels=[], shard=None),
        suite="tests",
        run="20260102T030405Z-abcd",
    )


@pytest.mark.parametrize(
    ("results", "kw"),
    [
        (mixed(), {"duration_ms": 12}),  # a whole number of milliseconds
        (repeated(), {"duration_ms": 3.5, "repeats": 3, "pass_at": [1, 3]}),
        (matrix(), {"duration_ms": 1.0}),
        ([], {"duration_ms": 0, "load_errors": ["x.py: boom"], "not_loaded": ["x.py"]}),
    ],
    ids=["mixed", "repeated", "matrix", "nothing-ran"],
)
def test_a_report_built_without_validation_is_what_validation_makes_of_it(
    results: list[TestResult], kw: dict[str, Any]
) -> None:
    report = RunReport.build(results, provenance=what_ran(), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a value of another type than its field's warns
        validated = RunReport.model_validate(report.model_dump())
        assert validated.model_dump_json(indent=2) == report.model_dump_json(indent=2)
        # as Python values too (the history stores them): 12 == 12.0, but not in their repr
        assert repr(validated.model_dump()) == repr(report.model_dump())


FRESH = """
import json, sys
from agent_health.engine.reports.report import RunReport

parts = ("agent_health.engine.budget", "agent_health.engine.reports.rollup",
         "agent_health.engine.statistics.matrix")
before = [m for m in parts if m in sys.modules]
text = open(sys.argv[1]).read()
read = RunReport.model_validate_json(text).model_dump_json(indent=2)
schema = sorted(RunReport.model_json_schema()["$defs"])
print(json.dumps({"before": before, "same": read == text, "schema": schema}))
"""


def test_a_report_with_every_optional_part_reads_back_where_none_of_their_modules_was_loaded(
    tmp_path: Path,
) -> None:
    # A run of one agent with no budget and no insights never loads the modules of those
    # parts (their models are the report's field types, resolved when pydantic first builds
    # a validator, a serializer or a schema of it): a fresh interpreter reading a report that
    # has all three must load them then, and read it as written.
    from agent_health.engine import budget

    meter = budget.Meter(budget.Limits(max_tokens=10), started=0.0)
    explained = {"summary": "slow", "why": "it waited", "recommendations": ["cache it"]}
    results = [
        r.model_copy(update={"insights": explained}) if r.status == "failed" else r
        for r in matrix()
    ]
    report = RunReport.build(
        results, provenance=what_ran(), duration_ms=1.0, budget=meter.report(now=1.0)
    )
    assert report.matrix is not None
    assert report.summary.budget is not None
    assert report.summary.insights is not None
    path = tmp_path / "report.json"
    path.write_text(report.model_dump_json(indent=2))
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["before"] == []  # the parts' modules were not loaded by the report's
    assert found["same"]
    assert {"Matrix", "Report", "Rollup"} <= set(found["schema"])
