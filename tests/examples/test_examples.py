"""Every numbered example runs, through the real CLI, and does what its README says.

:func:`test_every_numbered_example_runs_green` runs each ``examples/NN-topic/`` found, so a new
example cannot go untested; the tests after it check what particular examples promise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_health.ledger import objects
from support import examples_support

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


NUMBERED = sorted(path.name for path in EXAMPLES.glob("[0-9][0-9]-*/"))


def test_the_examples_are_numbered_from_one_without_a_gap() -> None:
    assert [name[:2] for name in NUMBERED] == [f"{n:02}" for n in range(1, len(NUMBERED) + 1)]
    assert all((EXAMPLES / name / "README.md").is_file() for name in NUMBERED)


@pytest.mark.slow
@pytest.mark.parametrize("example", NUMBERED)
def test_every_numbered_example_runs_green(example: str, tmp_path: Path) -> None:
    """The example, copied with its neighbours (the agents it starts), run as its README
    says, without a judge's model or a simulated user's (their calls are neutral skips):
    every test loads, and every one that runs passes."""
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "run",
            "--no-judge",
            "--no-simulate",
            "--no-history",
            "--reporter",
            f"json:{report}",
        ],
        cwd=tmp_path / "examples" / example,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(report.read_text())["summary"]
    assert summary["total"] > 0
    assert (summary["failed"], summary["errored"], summary["not_loaded"]) == (0, 0, [])


@pytest.mark.slow
def test_quickstart_passes_against_the_example_agent(tmp_path: Path) -> None:
    quickstart = examples_support.copy(tmp_path, "01-quickstart")
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
        cwd=quickstart,
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
def test_quickstart_lists_without_running(tmp_path: Path) -> None:
    quickstart = examples_support.copy(tmp_path, "01-quickstart")
    proc = subprocess.run(
        [sys.executable, "-m", "agent_health.cli", "list", "--json"],
        cwd=quickstart,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ids = [t["id"] for t in json.loads(proc.stdout)]
    assert "test_triage.py::budgets > a healthy service costs few tokens" in ids


@pytest.mark.slow
def test_the_mcp_example_passes_on_what_the_gateway_read(tmp_path: Path) -> None:
    report, ledger = tmp_path / "report.json", tmp_path / "ledger"
    example = examples_support.copy(tmp_path, "07-mcp")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "run",
            "--reporter",
            f"json:{report}",
            "--ledger",
            f"file://{ledger}",
        ],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["summary"]["passed"] == 5
    tests = {t["name"]: t for t in data["tests"]}
    oslo = tests["tells the time in Oslo with the time server"]
    [called] = [s for s in oslo["signals"] if s["name"].startswith("to_have_called_tool")]
    assert called["evidence"]["source"] == "gateway"
    assert called["evidence"]["peer"] == "peer:time"
    # The pager's isError reached the agent as a plain output (it reported the step ok); the
    # report shows the run as the gateway saw it: failed, and the server that answered.
    paging = tests["says so when paging the on-call fails"]
    [result] = [s for s in paging["trajectory"] if s["type"] == "tool_result"]
    assert (result["status"], result["source"], result["server"]) == (
        "error",
        "gateway",
        "peer:tickets",
    )
    assert paging["metrics"]["ignored_tool_errors"] == 0  # it said so: not ignored
    sealed: dict[str, list[tuple[str, str, bool | None]]] = {}
    names = {t["run_id"]: t["name"] for t in data["tests"]}
    lines = (ledger / "run.jsonl").read_text().splitlines()
    # Each call in its exchange's record (version 5), or a record alone.
    for record in objects.unfold(json.loads(line).get("record", {}) for line in lines):
        if record.get("kind") == "mcp" and record["method"] == "tools/call":
            sealed.setdefault(names[record["run_id"]], []).append(
                (record["server"], record["name"], record["is_error"])
            )
    assert sealed["says so when paging the on-call fails"] == [
        ("peer:tickets", "page_oncall", True)
    ]
    assert sealed["tells the time in Oslo with the time server"] == [
        ("peer:time", "get_current_time", False)
    ]
