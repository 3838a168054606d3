"""``agent-health run`` records through the in-process gateway: one verified cell per test run."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from agent_health import cli
from agent_health.engine import recording
from agent_health.ledger import records
from helpers import run_cli, run_cli_sync

SUITE = {
    "test_triage.py": """
    from agent_health import test

    @test("payment", labels=["smoke"])
    async def payment(agent, expect):
        result = await agent.run("Diagnose the payment service")
        expect(result).to_have_called_tool("search_logs")
        expect(result.output).to_match("db-primary")

    @test("restarts the pod")
    async def restarts(agent, expect):
        result = await agent.run("Diagnose the auth service")
        expect(result).to_have_called_tool("restart_pod")

    @test.skip("not yet")
    async def later(agent):
        await agent.run("x")
    """
}


def _cells(ledger: Path) -> dict[str, list[records.Record]]:
    return {
        path.name.removesuffix(".jsonl"): records.parse_lines(path.read_text().splitlines())
        for path in sorted(ledger.glob("*.jsonl"))
    }


async def test_a_local_run_writes_a_verified_cell_per_test_and_repeat(
    write_suite: Any, triage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(**SUITE)
    ledger = tmp_path / "ledger"
    run = await run_cli(
        suite,
        "--agent",
        f"rest+{triage_url}",
        "--ledger",
        f"file://{ledger}",
        "-j",
        "3",
        "--repeat",
        "2",
    )
    assert run.code == 1
    key = recording.key_path(f"file://{ledger}")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f"ledger: file://{ledger} (6 cells, key {key})" in capsys.readouterr().out
    verify = ["ledger", "verify", f"file://{ledger}", "--key-file", str(key)]
    assert await asyncio.to_thread(cli.main, verify) == 0

    cells = _cells(ledger)
    assert len(cells) == 6  # 3 tests x 2 repeats, the skipped one included
    for test in run.report["tests"]:
        cell = cells[recording.cell_name(test["id"], test["repeat"])]
        meta, end = cell[0], cell[-1]
        assert isinstance(meta, records.CellMeta)
        assert (meta.test_id, meta.repeat, meta.run_id) == (
            test["id"],
            test["repeat"],
            test["run_id"],
        )
        assert isinstance(end, records.CellEnd)
        assert end.status == test["status"]
        if test["status"] == "skipped":
            assert [r.kind for r in cell] == ["cell-meta", "cell-end"]
            continue
        kinds = [r.kind for r in cell]
        assert kinds[:2] == ["cell-meta", "exchange"]
        assert kinds.index("run-result") > max(i for i, k in enumerate(kinds) if k == "exchange")
        exchange = next(r for r in cell if isinstance(r, records.Exchange))
        assert (exchange.principal, exchange.upstream, exchange.path) == (
            "controller",
            "target",
            "/run",
        )
        assert exchange.evidence.startswith("sha256:")
        assert exchange.run_id == test["run_id"]
        result = next(r for r in cell if isinstance(r, records.RunResultRecord))
        assert result.prompt == test["prompt"]
        assert result.trajectory[1]["tool_name"] == "search_logs"
        signals = [r.signal for r in cell if isinstance(r, records.SignalRecord)]
        body_signals = [s["name"] for s in test["signals"] if s["kind"] != "metric"]
        assert [s["name"] for s in signals] == body_signals  # metrics are derived, not recorded
        assert signals


def test_the_default_ledger_lives_under_dot_agent_health(
    write_suite: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    suite = write_suite(**SUITE)
    monkeypatch.chdir(tmp_path)
    run = run_cli_sync(suite, "--agent", "rest+http://127.0.0.1:9/run", "--grep", "payment")
    assert run.code == 3
    error = run.by_name("payment")["error"]
    assert error.startswith("cannot connect to agent at http://127.0.0.1:9")
    [ledger] = [p for p in (tmp_path / ".agent-health" / "ledger").iterdir() if p.is_dir()]
    assert (
        f"ledger: file://.agent-health/ledger/{ledger.name} (1 cells, key "
        in capsys.readouterr().out
    )
    [cell] = _cells(ledger).values()
    assert [r.kind for r in cell][:2] == ["cell-meta", "exchange"]
    exchange = cell[1]
    assert isinstance(exchange, records.Exchange)
    assert exchange.status is None
    assert "cannot reach target" in (exchange.error or "")
    assert isinstance(cell[-1], records.CellEnd)
    assert cell[-1].status == "errored"


def test_no_ledger_records_nothing(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(**SUITE)
    monkeypatch.chdir(tmp_path)
    run = run_cli_sync(suite, "--agent", "rest+http://127.0.0.1:9/run", "--no-ledger")
    assert run.code == 3
    assert not (tmp_path / ".agent-health" / "ledger").exists()
    assert not list((tmp_path / ".agent-health").glob("*.key"))
    both = run_cli_sync(suite, "--ledger", "file:///tmp/x", "--no-ledger")
    assert both.code == 2


def test_cell_names_are_safe_unique_and_stable() -> None:
    a = recording.cell_name("dir/test_a.py::group > one: two", 3)
    assert a == recording.cell_name("dir/test_a.py::group > one: two", 3)
    assert a.endswith(".r3")
    assert a.startswith("dir-test_a.py-group-one-two.")
    assert recording.cell_name("x?", 0) != recording.cell_name("x!", 0)
    assert len(recording.cell_name("t" * 500, 0)) <= 200
    assert json.dumps(recording.cell_name("ünïcode", 0)).isascii()
