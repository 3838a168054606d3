"""Every numbered example runs, through the real CLI, and does what its README says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_quickstart_passes_against_the_example_agent(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "run",
            "--reporter",
            f"json:{report}",
            "--reporter",
            f"junit:{junit}",
        ],
        cwd=EXAMPLES / "01-quickstart",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["version"] == 2
    assert data["summary"]["passed"] == 5
    assert "hint: no judge configured" in proc.stdout
    rca = next(t for t in data["tests"] if t["name"] == "payment RCA names the DB outage")
    assert rca["labels"] == ["category:RCA", "difficulty:hard"]
    assert rca["metrics"]["tool_histogram"] == {"search_logs": 1, "service_status": 1}
    assert junit.read_text().count("<testcase ") == 5
    data_case = next(t for t in data["tests"] if t["file"] == "triage.cases.json")
    assert data_case["labels"] == ["difficulty:Medium", "category:RCA"]  # as upstream builds them


@pytest.mark.slow
def test_quickstart_lists_without_running() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "list", "--json"],
        cwd=EXAMPLES / "01-quickstart",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ids = [t["id"] for t in json.loads(proc.stdout)]
    assert "test_triage.py::budgets > a healthy service costs few tokens" in ids
