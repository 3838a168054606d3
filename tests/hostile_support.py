"""Shared pieces of the hostile-target tests: the target as its own process, a cell's gateway
and judge service on loopback, and reading what the attack left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_health import gateway, judging
from agent_health.cluster import grading
from agent_health.engine import cell
from agent_health.gateway import config as gateway_config
from agent_health.judging import service
from agent_health.ledger import backends
from agent_health.sdk.config import define_config
from aiohttp import web
from judge_servers import Default, ScriptedModel, judge_config

HERE = Path(__file__).resolve().parent
TOKEN = "controller-token-of-this-cell-7c1e0b9a55d2"
OTHER_CELL_TOKEN = "controller-token-of-another-cell-19fe33a0"
CELL = "evalrun-1-abc123-r0"
TEST_ID = "test_cell.py::diagnoses the payment outage"
SUITE = """
from agent_health import test

@test("diagnoses the payment outage")
async def diagnoses(agent, expect, judge):
    result = await agent.run("Diagnose why the payment service is failing.")
    expect(result).to_have_called_tool("search_logs")
    await judge(result, 'says "db-primary"')
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def hostile_target(
    port: int,
    report: Path,
    targets: dict[str, Any],
    *,
    answer: str,
    attacks: str,
    env: dict[str, str] | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``hostile_agent.py`` as its own process on ``port``, attacking ``targets`` when called.

    Its environment holds only what the test hands it: no token of this cell."""
    env = {
        "HOSTILE_TARGETS": json.dumps(targets),
        "HOSTILE_OTHER_TOKEN": OTHER_CELL_TOKEN,
        "HOSTILE_REPORT": str(report),
        "PATH": "/usr/bin:/bin",
        **(env or {}),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "hostile_agent.py"),
        "--port",
        str(port),
        "--answer",
        answer,
        "--attack",
        attacks,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert json.loads(ready) == {"port": port}, ready
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


def read_report(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def private_judge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENT_HEALTH_JUDGE_CACHE", str(tmp_path / "judge.sqlite"))


@contextlib.asynccontextmanager
async def judge_service(tmp_path: Path, rule: Default) -> AsyncIterator[tuple[str, ScriptedModel]]:
    """The operator's judge service on loopback: a scripted model, only the cell's token."""
    model = await ScriptedModel.start("openai", default=rule)
    async with judging.backend(judge_config(model, cache_dir=tmp_path), define_config()) as b:
        assert b is not None
        runner = web.AppRunner(service.app(b, lambda token: token == TOKEN))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", model
        await runner.cleanup()
    await model.close()


async def cell_gateway(
    tmp_path: Path, target_port: int, judge_url: str, **fields: Any
) -> gateway.Gateway:
    """The cell's gateway, in-process, as the cell pod's flags configure it."""
    (tmp_path / "key").write_bytes(b"k" * 48)
    (tmp_path / "token").write_text(TOKEN)
    settings = gateway_config.build(
        {
            "routes": [
                {"principal": "controller", "to": "target", "listen": "127.0.0.1:0",
                 "upstream": f"http://127.0.0.1:{target_port}"},
                {"principal": "controller", "to": "judge", "listen": "127.0.0.1:0",
                 "upstream": judge_url},
            ],
            "ledger_url": f"file://{tmp_path / 'ledger'}",
            "key_file": str(tmp_path / "key"),
            "cell": CELL,
            "run_id": CELL,
            "test_id": TEST_ID,
            "token_files": {"controller": str(tmp_path / "token")},
            "admin": "127.0.0.1:0",
            "grace": 5,
            **fields,
        }
    )  # fmt: skip
    proxy = await gateway.Gateway.from_settings(settings)
    await proxy.start()
    return proxy


def cell_settings(tmp_path: Path, proxy: gateway.Gateway, suite: str) -> cell.CellSettings:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_cell.py").write_text(textwrap.dedent(suite))
    return cell.CellSettings(
        suite=tmp_path / "suite",
        test_id=TEST_ID,
        repeat=0,
        agent=f"rest+{proxy.url('controller', 'target')}/run",
        run_id=CELL,
        token=TOKEN,
        admin=proxy.admin_url,
        judge_url=proxy.url("controller", "judge"),
        judge_model=None,
        skip_judge=False,
        timeout=60,
    )


def ledger_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "ledger" / f"{CELL}.jsonl").read_text().splitlines()


async def grade(tmp_path: Path) -> grading.CellGrade:
    backend = backends.from_url(f"file://{tmp_path / 'ledger'}")
    expected = grading.ExpectedCell(test_id=TEST_ID, repeat=0, run_id=CELL)
    return await grading.grade_cell(backend, CELL, b"k" * 48, expected)


def cached_verdicts(tmp_path: Path) -> int:
    with contextlib.closing(sqlite3.connect(tmp_path / "judge.sqlite")) as db:
        (count,) = db.execute("SELECT count(*) FROM verdicts").fetchone()
        return int(count)


async def run_attacked_cell(
    tmp_path: Path,
    judge: tuple[str, ScriptedModel],
    *,
    answer: str,
    attacks: str,
    suite: str = SUITE,
) -> tuple[int, list[dict[str, Any]], gateway.Gateway]:
    """Run the cell against the hostile target; (exit code, its report, the stopped gateway)."""
    judge_url, _ = judge
    port, report = free_port(), tmp_path / "report.jsonl"
    proxy = await cell_gateway(tmp_path, port, judge_url)
    targets = {
        "admin": proxy.admin_url,
        "routes": [proxy.url("controller", "target")],
        "judge_route": proxy.url("controller", "judge"),
        "judge": judge_url,
    }
    try:
        async with hostile_target(port, report, targets, answer=answer, attacks=attacks):
            code, _ = await cell.run_cell(cell_settings(tmp_path, proxy, suite))
    finally:
        await proxy.stop()
    return code, read_report(report), proxy


def attempts(report: list[dict[str, Any]], attack: str) -> list[dict[str, Any]]:
    return [line for line in report if line.get("attack") == attack]
