"""JSON case files in the established format run as tests."""

from __future__ import annotations

import json
from typing import Any

from helpers import run_cli, run_cli_sync

CASES = [
    {
        "name": "payment outage",
        "description": "RCA of the payment service",
        "category": "RCA",
        "difficulty": "Hard",
        "initialPrompt": "Diagnose why the payment service is failing.",
        "context": [{"description": "Error log", "value": "Connection refused"}],
        "expectedOutcomes": ["names db-primary"],
        "expectedTrajectory": [
            {"step": 1, "description": "logs", "requiredTools": ["search_logs"]},
            {"step": 2, "description": "status", "requiredTools": ["service_status"]},
        ],
    },
    {
        "name": "needs a tool it never calls",
        "labels": ["custom"],
        "initialPrompt": "Is the search service healthy?",
        "expectedTrajectory": [{"step": 1, "description": "x", "requiredTools": ["restart_pod"]}],
    },
    {
        # The example agent searches the logs first, then checks the service status.
        "name": "steps in the wrong order",
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [
            {"step": 2, "description": "logs", "requiredTools": ["search_logs"]},
            {"step": 1, "description": "status", "requiredTools": ["service_status"]},
        ],
    },
    {
        "name": "steps listed out of order but numbered right",
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [
            {"step": 2, "description": "status", "requiredTools": ["service_status"]},
            {"step": 1, "description": "logs", "requiredTools": ["search_logs"]},
        ],
    },
    {
        "name": "nothing to check",
        "initialPrompt": "Diagnose why the payment service is failing.",
        "expectedTrajectory": [{"step": 1, "description": "think it over"}],
    },
]


async def test_cases_run_as_tests(write_suite: Any, triage_url: str) -> None:
    suite = write_suite(**{"suite.cases.json": json.dumps(CASES)})
    run = await run_cli(suite, "--agent", f"rest+{triage_url}")
    payment = run.by_name("payment outage")
    assert payment["status"] == "passed"
    assert payment["labels"] == ["category:RCA", "difficulty:hard"]
    assert payment["prompt"] == "Diagnose why the payment service is failing."
    kinds = [(s["kind"], s["role"]) for s in payment["signals"] if s["kind"] != "metric"]
    assert kinds == [("deterministic", "gate")] * 3 + [("judge", "neutral")]
    order = payment["signals"][2]
    assert order["name"] == "to_have_called_tools_in_steps([['search_logs'], ['service_status']])"
    assert order["passed"] is True
    missing = run.by_name("needs a tool it never calls")
    assert missing["status"] == "failed"
    assert missing["labels"] == ["custom"]
    # One missing tool is one failure: no order signal counts it again.
    assert [s["passed"] for s in missing["signals"] if s["kind"] != "metric"] == [False]
    wrong = run.by_name("steps in the wrong order")
    assert wrong["status"] == "failed"
    failed = [s for s in wrong["signals"] if s["passed"] is False]
    assert [s["name"] for s in failed] == [
        "to_have_called_tools_in_steps([['service_status'], ['search_logs']])"
    ]
    assert failed[0]["evidence"]["broken_at"] == {"step": 2, "tool": "search_logs"}
    assert failed[0]["evidence"]["actual"] == ["search_logs", "service_status"]
    assert wrong["score"] == round(2 / 3, 6)
    assert run.by_name("steps listed out of order but numbered right")["status"] == "passed"
    # A case that checks nothing is not a pass: it is skipped, saying why, and never run.
    empty = run.by_name("nothing to check")
    assert (empty["status"], empty["signals"], empty["metrics"]) == ("skipped", [], {})
    assert "nothing to grade" in empty["skip_reason"]
    assert "no expectedOutcomes and no requiredTools" in empty["skip_reason"]
    assert run.report["summary"]["skipped"] == 1
    assert run.code == 1


def test_bad_case_names_the_case_and_field(write_suite: Any) -> None:
    suite = write_suite(
        **{"test_bad.json": json.dumps([{"name": "ok", "initialPrompt": "x"}, {"name": "broken"}])}
    )
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert run.code == 2
    assert run.report["summary"]["load_errors"] == [
        "test_bad.json: case [1] 'broken': initialPrompt: Field required"
    ]


def test_invalid_json_names_the_line(write_suite: Any) -> None:
    suite = write_suite(**{"x.cases.json": '[\n{"name": "a",\n'})
    run = run_cli_sync(suite, "--pass-with-no-tests")
    assert run.report["summary"]["load_errors"][0].startswith("x.cases.json: line 3: invalid JSON")
