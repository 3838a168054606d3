"""JSON report v2: what the agent was asked and did, capped; what ran; read back and rendered.

Real runs against the example triage agent on loopback; ``report``, ``compare`` and
``grade`` read what those runs wrote.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import agent_health
import pytest
from agent_health import cli
from agent_health.connectors.protocol import ContextItem, Step
from agent_health.engine.recording import recording
from agent_health.engine.reports import bounds, entries, entryshape, provenance
from agent_health.engine.reports.report import RunReport
from agent_health.ledger import backends
from agent_health.sdk.results import TestResult
from support.helpers import run_cli

SUITE = {
    "agent-health.config.py": """
    from agent_health import define_config

    config = define_config(agents={"triage": {"connector": "rest", "url": "http://unused"}})
    """,
    "test_triage.py": """
    from agent_health import test

    @test("payment", labels=["smoke"])
    async def payment(agent, expect):
        result = await agent.run(
            "Diagnose the payment service",
            context=[{"description": "Error log", "value": "refused: db-primary:5432"}],
        )
        expect(result).to_have_called_tool("search_logs")

    @test("no agent at all")
    async def plain(expect):
        expect(1).to_equal(1)
    """,
}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def test_a_run_records_prompt_context_output_trajectory_and_its_cell(
    write_suite: Any, triage_url: str, tmp_path: Path
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--ledger", f"file://{ledger}")
    assert run.code == 0
    assert run.report["version"] == 2
    test = run.by_name("payment")
    assert list(test)[:7] == ["id", "name", "file", "line", "labels", "repeat", "status"]
    assert test["prompt"] == "Diagnose the payment service"
    assert test["context"] == [{"description": "Error log", "value": "refused: db-primary:5432"}]
    assert "db-primary" in test["output"]
    tools = [s["tool_name"] for s in test["trajectory"] if s["type"] == "tool_call"]
    assert tools[0] == "search_logs"
    assert test["trajectory"][-1]["type"] == "assistant"
    assert test["truncated"] == []
    cell = test["ledger_cell"]
    assert cell == recording.cell_name(test["id"], 0)
    backend = backends.from_url(f"file://{ledger}")
    try:
        assert cell in await backend.cells()  # the cell that recorded this run is there
    finally:
        await backend.close()
    plain = run.by_name("no agent at all")
    assert (plain["output"], plain["trajectory"], plain["prompt"]) == (None, [], None)
    assert plain["ledger_cell"] is None  # a test that never ran the agent records no cell
    for entry in run.report["tests"]:
        entryshape.TestEntry.model_validate(entry)  # the documented shape, field for field
    assert list(run.report["tests"][0]) == [
        name for name in entryshape.TestEntry.model_fields if name in run.report["tests"][0]
    ]


async def test_provenance_says_what_ran(
    write_suite: Any, triage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(**SUITE)
    _git(suite, "init", "-q")
    _git(suite, "add", "-A")
    _git(suite, "commit", "-qm", "suite")
    commit = _git(suite, "rev-parse", "HEAD")
    monkeypatch.setenv("AGENT_HEALTH_SKIP_JUDGE", "1")
    # Loading the suite writes its bytecode beside it, as it does for users (whatever this
    # machine's PYTHONDONTWRITEBYTECODE): a cache the run wrote is not an edit.
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    secret_url = triage_url.replace("http://", "http://user:hunter2@") + "?token=hunter2"
    args = ("--agent", f"rest+{secret_url}", "--no-ledger")
    clean = await run_cli(suite, *args)
    (suite / "test_triage.py").write_text((suite / "test_triage.py").read_text() + "\n# edit\n")
    dirty = await run_cli(suite, *args)

    p = clean.report["provenance"]
    assert p["agent"] == {
        "name": f"rest+{triage_url}",
        "connector": "rest",
        "url": triage_url,  # without the user info and the query
        "command": None,
        "image": None,
    }
    assert p["judge"] == {"provider": None, "model": None, "skipped": True}
    branch = _git(suite, "symbolic-ref", "--short", "HEAD")
    assert p["suite"] == {
        "paths": [str(suite)],
        "git_commit": commit,
        "git_dirty": False,
        "git_branch": branch,
        "name": ".",  # the suite's folder within its checkout: the top
    }
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", p["run_id"])
    assert p["run_id"] != dirty.report["provenance"]["run_id"]  # each run its own
    assert p["selection"] == {"grep": [], "labels": [], "shard": None}
    assert dirty.report["provenance"]["suite"]["git_dirty"] is True
    config = suite / "agent-health.config.py"
    assert p["config_file"] == str(config)
    assert p["config_hash"] == "sha256:" + hashlib.sha256(config.read_bytes()).hexdigest()
    assert p["python_version"] == platform.python_version()
    # The running code's own version, which the installed distribution's is built from.
    assert p["agent_health_version"] == agent_health.__version__
    assert agent_health.__version__ == importlib.metadata.version("agent-health")
    assert p["started_at"] <= p["ended_at"]
    assert p["ledger"] is None
    line = " ".join(p["command_line"])
    assert line.startswith(f"agent-health run {suite} --reporter json:")
    assert "hunter2" not in json.dumps(clean.report["provenance"]["command_line"])
    assert "--agent rest+http://127.0.0.1:" in line


def test_outside_git_the_suite_has_no_commit(tmp_path: Path) -> None:
    assert provenance.git_state([tmp_path]) == (None, None, None)


def test_a_checkouts_commit_branch_and_state_take_one_git_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite, other = tmp_path / "suite", tmp_path / "other"
    for repo in (suite, other):
        repo.mkdir()
        _git(repo, "init", "-q")
    assert provenance.git_state([suite]) == (None, None, None)  # no commit yet
    for repo in (suite, other):
        (repo / "test_a.py").write_text("x = 1\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", "suite")
    commit, branch = (
        _git(suite, "rev-parse", "HEAD"),
        _git(suite, "symbolic-ref", "--short", "HEAD"),
    )
    # Every git the run starts, counted by a git first on PATH that hands on to the real one.
    shim, calls = tmp_path / "bin", tmp_path / "calls"
    shim.mkdir()
    real = shutil.which("git")
    (shim / "git").write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    assert provenance.git_state([suite]) == (commit, False, branch)
    assert calls.read_text().split() == ["status"]
    (suite / "test_b.py").write_text("y = 2\n")
    assert provenance.git_state([suite]) == (commit, True, branch)
    _git(suite, "checkout", "-q", "--detach")
    assert provenance.git_state([suite]) == (commit, True, None)  # no branch when detached
    # Paths in two checkouts, which status refuses: the first's commit, its state unsaid.
    assert provenance.git_state([suite, other]) == (commit, None, None)
    calls.unlink()
    assert provenance.git_state([tmp_path / "nowhere"]) == (None, None, None)
    assert calls.read_text().split() == ["status"]  # outside a checkout, one process too


def test_long_fields_are_cut_and_named() -> None:
    big = "x" * (bounds.OUTPUT_CHARS + 10)
    steps = [Step(type="tool_result", tool_output={"rows": ["y" * 50] * 400})] + [
        Step(type="assistant", content="ok")
    ] * (bounds.STEPS + 5)
    result = TestResult(
        id="t.py::big",
        name="big",
        title="big",
        file="t.py",
        line=1,
        status="passed",
        run_id="r",
        prompt="p" * (bounds.FIELD_CHARS + 1),
        context=(ContextItem(description="d", value="v" * (bounds.FIELD_CHARS + 2)),),
        output=big,
        trajectory=tuple(steps),
    )
    entry = entries.from_result(result)
    assert entry["truncated"] == [
        "prompt",
        "context[0].value",
        "output",
        "trajectory[0].tool_output",
        f"trajectory[{bounds.STEPS}:]",
    ]
    assert entry["output"].endswith("… [10 more characters cut]")
    assert entry["output"].startswith("x" * bounds.OUTPUT_CHARS)
    assert entry["prompt"].endswith("… [1 more characters cut]")
    assert len(entry["trajectory"]) == bounds.STEPS
    cut_output = entry["trajectory"][0]["tool_output"]
    assert isinstance(cut_output, str)  # a value over its cap becomes its JSON text, cut
    assert cut_output.startswith('{"rows": ["yyy')
    small = entries.from_result(result.model_copy(update={"output": "short", "prompt": "p"}))
    assert "output" not in small["truncated"]
    assert small["output"] == "short"


def _v1(path: Path, status: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "summary": {
                    "total": 1,
                    "passed": int(status == "passed"),
                    "failed": int(status == "failed"),
                    "errored": 0,
                    "skipped": 0,
                    "pass_rate": 1.0 if status == "passed" else 0.0,
                    "score": 1.0,
                    "duration_ms": 1.0,
                    "tokens": 5,
                },
                "tests": [
                    {
                        "id": "test_triage.py::payment",
                        "name": "payment",
                        "file": "test_triage.py",
                        "line": 4,
                        "labels": [],
                        "repeat": 0,
                        "status": status,
                        "score": 1.0,
                        "error": None,
                        "run_id": "r",
                        "prompt": None,
                        "duration_ms": 1.0,
                        "signals": [],
                        "metrics": {},
                        "insights": None,
                    }
                ],
            }
        )
    )
    return path


async def test_compare_reads_a_version_1_base_against_a_version_2_run(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**SUITE)
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--no-ledger")
    new = suite / ".report.json"
    assert json.loads(new.read_text())["version"] == 2
    capsys.readouterr()
    base = _v1(tmp_path / "base.json", "failed")
    code = await asyncio.to_thread(cli.main, ["compare", str(base), str(new)])
    assert code == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "newly passing: 1" in out
    assert "failed → passed  test_triage.py::payment" in out
    assert run.code == 0


def test_report_renders_a_saved_report_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = _v1(tmp_path / "v1.json", "failed")
    junit = tmp_path / "out.xml"
    again = tmp_path / "again.json"
    code = cli.main(
        ["report", str(saved), "--reporter", f"junit:{junit}", "--reporter", f"json:{again}"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "0 passed, 1 failed, 0 errored, 0 skipped" in out
    assert f"junit report: {junit}" in out
    assert 'failures="1"' in junit.read_text()
    data = json.loads(again.read_text())
    assert data["version"] == 1  # re-rendering never claims fields the file did not have
    assert data["tests"][0]["trajectory"] == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such report file"),
        ("{nope", "not JSON"),
        ("[]", "not an agent-health JSON report (no version field)"),
        ('{"version": 7, "tests": []}', "version: 7 is not a report version"),
        ('{"version": true, "summary": {}, "tests": []}', "version: True is not a report version"),
        ('{"version": 2, "summary": {}}', "no summary object or tests list"),
        (
            '{"version": 2, "summary": {}, "tests": [{"id": "a", "name": "a", "status": "odd"}]}',
            "tests[0].status: 'odd' is not a status (passed, failed, errored, skipped, flaky)",
        ),
        (
            '{"version": 2, "summary": {}, "tests": [{"id": "a", "name": "a", "status": "passed",'
            ' "signals": [{"kind": "judge", "role": "gate"}]}]}',
            "tests[0].signals[0].name: Field required",
        ),
        ('{"version": 2, "summary": {"total": NaN}, "tests": []}', "summary.total: NaN: JSON has"),
        ('{"version": 2, "summary": {}, "tests": ' + "[" * 99_999 + "]" * 99_999 + "}", "deeper"),
        ('{"version": 2, "summary": {}, "tests": []}', "summary.total: Field required"),
    ],
)
def test_report_refuses_bad_files_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert message in err
    assert not (tmp_path / "agent-health-report").exists()


async def test_grade_renders_a_ledger_with_what_the_agent_did(
    write_suite: Any, triage_url: str, tmp_path: Path
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = await run_cli(suite, "--agent", f"rest+{triage_url}", "--ledger", f"file://{ledger}")
    assert run.code == 0
    graded = tmp_path / "graded.json"
    html_dir = tmp_path / "html"
    key = recording.key_path(f"file://{ledger}")
    argv = ["grade", f"file://{ledger}", "--key-file", str(key)]
    argv += ["--reporter", f"json:{graded}", "--reporter", f"html:{html_dir}"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    data = json.loads(graded.read_text())
    [payment] = [t for t in data["tests"] if t["name"] == "payment"]
    local = run.by_name("payment")
    for field in ("prompt", "context", "output", "trajectory", "ledger_cell", "run_id"):
        assert payment[field] == local[field], field
    assert data["provenance"]["ledger"] == f"file://{ledger}"
    page = (html_dir / "index.html").read_text()
    assert "search_logs" in page


def test_a_report_without_results_still_builds() -> None:
    report = RunReport.build([], duration_ms=0.0)
    assert report.model_dump()["tests"] == []
    assert report.provenance is None


def test_agent_healths_own_files_never_make_the_suite_dirty(tmp_path: Path) -> None:
    # The history and the ledgers live in .agent-health/ beside the config: the suite's own
    # runs must not turn it dirty for the next one.
    (tmp_path / "test_a.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "suite")
    (tmp_path / ".agent-health").mkdir()
    (tmp_path / ".agent-health" / "history.db").write_bytes(b"x")
    assert provenance.git_state([tmp_path]).dirty is False
    (tmp_path / "test_b.py").write_text("y = 2\n")
    assert provenance.git_state([tmp_path]).dirty is True
